"""write_atomically: all of the new content or the old file, and durable once it returns."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from kbroker.fsutil import temporary_path, write_atomically
from tests.fsyncs import record_syncs


def test_each_kind_of_data_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "state"
    write_atomically(target, b"\x00\x01bytes")
    assert target.read_bytes() == b"\x00\x01bytes"
    write_atomically(target, "text \u00e9")
    assert target.read_text(encoding="utf-8") == "text \u00e9"

    def writer(f: BinaryIO) -> None:
        for chunk in (b"a" * 100_000, b"b" * 100_000):
            f.write(chunk)

    write_atomically(target, writer)
    assert target.read_bytes() == b"a" * 100_000 + b"b" * 100_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no temporary file left


def test_file_is_fsynced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = (tmp_path / "state").resolve()
    syncs = record_syncs(monkeypatch)
    write_atomically(target, b"new")
    renamed = syncs.index("replace", target)
    assert syncs.index("fsync", temporary_path(target)) < renamed
    assert syncs.index("fsync", target.parent) > renamed


def test_not_durable_skips_every_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs = record_syncs(monkeypatch)
    write_atomically(tmp_path / "state", b"new", durable=False)
    assert (tmp_path / "state").read_bytes() == b"new"
    assert syncs.fsynced == []


def test_a_writer_failing_midway_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"old")

    def failing(f: BinaryIO) -> None:
        f.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomically(target, failing)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_a_failed_fsync_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"old")

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("os.fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        write_atomically(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_an_unwritable_temporary_path_fails_without_touching_either(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_bytes(b"old")
    temporary_path(target).mkdir()  # e.g. left by something else: it is not this call's to remove
    with pytest.raises(IsADirectoryError):
        write_atomically(target, b"new")
    assert target.read_bytes() == b"old"
    assert temporary_path(target).is_dir()
