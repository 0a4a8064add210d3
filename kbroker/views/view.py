"""What makes a topic a view: its configs, read once into a `View` the read path can use.

A view is a topic record like any other (an id, configs, partitions as its source's) whose
`view.source.topic` config names the topic it reads; it has no log of its own. Every broker
knows its views from its metadata cache, so a view is served by whichever broker leads the
source's partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kbroker.views.filter import FilterError, RecordFilter, parse_filter
from protocol.errors import ErrorCode, KafkaError

SOURCE_CONFIG = "view.source.topic"
FILTER_CONFIG = "view.filter"
TAG_HEADER_CONFIG = "view.tag.header"
DEFAULT_TAG_HEADER = "tag"
VIEW_CONFIGS = frozenset({SOURCE_CONFIG, FILTER_CONFIG, TAG_HEADER_CONFIG})


@dataclass(frozen=True, slots=True)
class View:
    name: str
    source: str
    filter: RecordFilter


def is_view(configs: Mapping[str, str]) -> bool:
    return bool(configs.get(SOURCE_CONFIG))


def view_of(name: str, configs: Mapping[str, str]) -> View | None:
    """The view a topic's configs describe, or None for a plain topic. Raises INVALID_CONFIG for
    a view config without a source, or a filter that does not parse (with its position)."""
    source = configs.get(SOURCE_CONFIG, "")
    if not source:
        stray = sorted(VIEW_CONFIGS & {k for k, v in configs.items() if v})
        if stray:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{stray[0]} is set but {SOURCE_CONFIG} is not")
        return None
    text = configs.get(FILTER_CONFIG, "")
    if not text.strip():
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"view {name} needs {FILTER_CONFIG}")
    tag_header = configs.get(TAG_HEADER_CONFIG) or DEFAULT_TAG_HEADER
    try:
        record_filter = parse_filter(text, tag_header)
    except FilterError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid {FILTER_CONFIG} of view {name}: {e}") from None
    return View(name, source, record_filter)


def loaded_view(name: str, configs: Mapping[str, str]) -> View | None:
    """`view_of` for a record read back from the metadata store, which was checked when written:
    a view that no longer parses (a newer broker's filter) reads nothing rather than stopping
    the broker."""
    try:
        return view_of(name, configs)
    except KafkaError:
        return View(name, configs.get(SOURCE_CONFIG, ""), _NOTHING)


def _keep_none(key: bytes | None, headers: object) -> bool:
    return False


_NOTHING = RecordFilter(text="", matches=_keep_none, header_names=frozenset(), reads_key=False)
