"""Damage notes: the bytes of a segment that failed verification, kept as they are.

A CRC or authentication failure found by recovery or by a read is recorded next to the
segment (`<base>.damaged`), so reads of those offsets keep answering CORRUPT_MESSAGE after a
clean restart, and the bytes are never cut or overwritten to "repair" the log.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from kbroker.fsutil import write_atomically
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.storage")

DAMAGE_SUFFIX = ".damaged"


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of a segment that failed verification and are kept as they are.

    Positions [start, end) of the file; offsets [first_offset, end_offset) are those the damaged
    bytes may hold (from the batch before them to the batch after them; end_offset -1 when no
    sound batch follows in the segment: up to the next segment's base). Reads of those offsets
    get CORRUPT_MESSAGE; every other batch of the segment, and every later segment, stays
    readable. Recorded in `<base>.damaged` so a clean restart still knows.
    """

    start: int
    end: int
    first_offset: int
    end_offset: int
    reason: str


class DamagedData(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


def read_damage(path: Path) -> list[Damage]:
    try:
        return [Damage(**entry) for entry in json.loads(path.read_text())]
    except FileNotFoundError:
        return []
    except (ValueError, TypeError) as e:
        # Unreadable damage notes: treat the segment as damaged so it is verified again.
        log.warning("%s is unreadable (%s); the segment will be verified", path, e)
        return [Damage(0, 0, 0, 0, "unreadable damage notes")]


def write_damage(path: Path, damage: list[Damage]) -> None:
    # Durable: for a segment below the recovery point these notes are all that says its bytes are bad.
    write_atomically(path, json.dumps([asdict(d) for d in damage]))
