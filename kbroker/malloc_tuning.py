"""glibc's malloc set for a broker's large, short-lived buffers.

A follower reads every fetch answer (up to `replica.fetch.max.bytes`) into a stream buffer and
takes it out whole; a leader reads every large produce request into a buffer of its own. With
glibc's defaults a freed buffer of a few MB goes back to the kernel (the heap's top is trimmed
beyond twice the adaptive mmap threshold), and the next one is faulted in again page by page,
zeroed first: a quarter of a follower's CPU under acks=all went to those page faults
(docs/performance.md). Buffers up to MMAP_THRESHOLD come from the heap instead, and up to
TRIM_THRESHOLD of freed heap stays in the process for the next one: a bounded amount of memory
kept for no page faults.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("kbroker")

# mallopt's parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 16 * 1024 * 1024  # above a fetch answer's usual size; glibc's maximum is 32 MiB
TRIM_THRESHOLD = 64 * 1024 * 1024

# Set in the environment, glibc's own variables win: an operator's choice is kept.
_ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def keep_large_buffers() -> bool:
    """Set the thresholds; False where malloc is not glibc's or the environment sets them."""
    if any(name in os.environ for name in _ENVIRONMENT) or not _is_glibc():
        return False  # another allocator (musl, macOS) keeps its defaults
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not applied:
        log.warning("mallopt refused the buffer thresholds: large buffers are faulted in afresh")
    return applied


def _is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False
