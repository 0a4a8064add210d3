"""Per-broker storage: partition logs in Kafka's on-disk layout (segments, indexes, checkpoints).

`LogManager` owns every partition `Log` in the broker's log dirs; a `Log` is a run of
`LogSegment`s; reads return `FileSlice`s for sendfile. Settings are `LogConfig`.
"""

from kbroker.storage.log import AppendInfo, Log
from kbroker.storage.log_config import TOPIC_CONFIG_DEFAULTS, LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.storage.read_results import FileSlice, ReadResult
from kbroker.storage.segment import LogSegment

__all__ = [
    "TOPIC_CONFIG_DEFAULTS",
    "AppendInfo",
    "FileSlice",
    "Log",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "ReadResult",
]
