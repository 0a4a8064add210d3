"""A compiled quick pass over a producer batch's records, in front of the validator's walk.

Nearly every batch a producer sends holds only plain records: offset deltas counting from 0,
no headers, timestamps within the topic's bounds (and keys, on a compacted topic). The
validator must look at every one of them; aiokafka's record iterator does it in C but makes a
record object and copies each key and value, about 0.2 ms for a megabyte of 1 KB records, the
largest item of a broker's produce path (docs/performance.md). `record_scan_jit` does the same
reading compiled by numba, with no object per record, in a few hundredths of that.

The pass only says "all plain"; any other answer sends the batch to the walk, which words
every error. Until the compiled code is loaded, or where numba cannot be imported, or with
KBROKER_RECORD_SCAN=python in the environment, every batch is walked as before.

Loading costs a broker about 40 MB of its own memory and 80 MB of numba's shared libraries, and
half a second to a second of CPU (importing numba, then compiling, or reading numba's cache
beside `record_scan_jit.py`). A broker pays that only once a batch arrives that is large enough
to gain from the pass (LOAD_FROM_RECORDS), and in a thread of its own: for a batch of a few
records the walk costs about what calling the compiled code does.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from protocol.records import HEADER_SIZE, BatchHeader

log = logging.getLogger("kbroker.storage")

DISABLE_ENV = "KBROKER_RECORD_SCAN"  # "python": the compiled pass is never loaded (for measuring it)
LOAD_FROM_RECORDS = 64  # the first batch of this many records starts loading the pass
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# The pass adds a record's timestamp delta (|delta| < 2**62) to the batch's base timestamp in
# 64 bits: below this bound the sum cannot overflow.
_BASE_TIMESTAMP_LIMIT = 1 << 62

_first_unplain: Callable[..., int] | None = None
_frombuffer: Callable[..., Any] | None = None
_UINT8: Any = None
_loader: threading.Thread | None = None
_lock = threading.Lock()


def load() -> bool:
    """Load the compiled pass in this thread (compiled, or read from numba's cache); True when
    it is there. Once loaded it stays; a failure is logged and the walk does everything."""
    global _first_unplain, _frombuffer, _UINT8
    with _lock:
        if _first_unplain is not None:
            return True
        if os.environ.get(DISABLE_ENV) == "python":
            return False
        started = time.monotonic()
        try:
            import numpy

            from kbroker.storage import record_scan_jit
        except Exception as e:  # no numba for this platform, or its compiler failed
            log.info("records are validated by aiokafka's iterator alone: the compiled pass is unavailable (%s)", e)
            return False
        _frombuffer, _UINT8 = numpy.frombuffer, numpy.uint8
        _first_unplain = record_scan_jit.first_unplain
        log.debug("compiled record pass loaded in %.0f ms", (time.monotonic() - started) * 1000)
        return True


def load_in_background() -> None:
    """Start loading the compiled pass in a daemon thread, once per process."""
    global _loader
    if _loader is not None:
        return
    with _lock:
        if _loader is not None or _first_unplain is not None:
            return
        _loader = threading.Thread(target=load, name="kbroker-record-scan", daemon=True)
        _loader.start()


def loaded() -> bool:
    return _first_unplain is not None


def all_plain(uncompressed: bytes | bytearray | memoryview, header: BatchHeader, low: int, high: int,
              need_key: bool) -> bool:
    """True when the compiled pass finds every record of the batch (header and uncompressed
    records) plain; False when some record is not, or the pass is not loaded: walk it then."""
    first_unplain = _first_unplain
    if first_unplain is None:
        if header.record_count >= LOAD_FROM_RECORDS:
            load_in_background()
        return False
    if not -_BASE_TIMESTAMP_LIMIT < header.base_timestamp < _BASE_TIMESTAMP_LIMIT:
        return False
    assert _frombuffer is not None
    records = _frombuffer(uncompressed, dtype=_UINT8)
    try:
        first = first_unplain(records, HEADER_SIZE, len(records), header.record_count, header.base_offset,
                              header.base_timestamp, max(low, _INT64_MIN), min(high, _INT64_MAX), need_key)
    except TypeError:  # a kind of buffer the pass was not compiled for: the walk takes it
        return False
    return first == -1
