"""Replacing a small file all at once, so a reader or a crash sees the old content or the new, never a mix.

The sequence is the usual one (and Kafka's `Utils.atomicMoveWithFallback` plus its checkpoint
writer): write `<name>.tmp` beside the file, flush and fsync it, rename it over the file, then
fsync the directory. The rename is what makes the change all-or-nothing; the directory fsync is
what makes it survive a power loss: until then the new directory entry may exist only in memory,
and after a crash the old file (or, for a new file, none) comes back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

Writer = Callable[[BinaryIO], object]
TMP_SUFFIX = ".tmp"


def temporary_path(path: Path) -> Path:
    """Where `write_atomically` stages the new content of `path`; a crash may leave it behind."""
    return path.with_name(path.name + TMP_SUFFIX)


def fsync_dir(directory: Path) -> None:
    """Make the creations, renames and deletions of entries in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes | str | Writer, *, durable: bool = True) -> None:
    """Replace `path` with `data` (bytes, text as UTF-8, or a function writing to the binary file).

    On any error the temporary file is removed and `path` keeps its old content. `durable=False`
    skips both fsyncs: still all-or-nothing for readers, but a crash may lose the change or leave
    the file torn — only for files whose readers detect that (a CRC) or that are rebuilt anyway.
    """
    tmp = temporary_path(path)
    # Opening the temporary file can fail on its own (no space, a stray directory by that name);
    # only a file this call created is removed again.
    f = open(tmp, "wb")  # noqa: SIM115 - closed below, before the rename
    try:
        with f:
            _write(f, data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def _write(f: BinaryIO, data: bytes | str | Writer) -> None:
    if isinstance(data, str):
        f.write(data.encode("utf-8"))
    elif isinstance(data, (bytes, bytearray, memoryview)):
        f.write(data)
    else:
        data(f)
