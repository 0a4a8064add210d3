from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kbroker.storage.index import CorruptIndex, OffsetIndex, TimeIndex, segment_file_name


def test_file_names_are_twenty_digit_base_offsets() -> None:
    assert segment_file_name(1234, ".log") == "00000000000000001234.log"


def test_offset_index_lookup_and_file_format(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    for i in range(10):
        index.append(100 + i * 10 + 9, i * 4096)
    assert index.lookup(50) == (100, 0)  # below every entry: scan from the start
    assert index.lookup(109) == (109, 0)
    assert index.lookup(135) == (129, 8192)
    assert index.lookup(10_000) == (199, 36864)
    raw = (tmp_path / "00000000000000000100.index").read_bytes()
    assert len(raw) == 80 and struct.unpack_from(">ii", raw, 8) == (19, 4096)  # relative offsets, big-endian
    index.close()
    reopened = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    assert reopened.lookup(135) == (129, 8192) and reopened.entries == 10


def test_offset_index_rejects_non_increasing_offsets(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 1024)
    index.append(5, 0)
    with pytest.raises(ValueError):
        index.append(5, 100)


def test_offset_index_truncation_and_fullness(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 8 * 4)
    for i in range(4):
        index.append(i * 10, i * 100)
    assert index.is_full
    index.truncate_to(20)
    assert index.entries == 2 and index.last_entry() == (10, 100)
    assert (tmp_path / "x.index").stat().st_size == 16
    index.truncate_to_position(100)
    assert index.entries == 1


def test_time_index_only_grows(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 1200)
    index.maybe_append(1000, 5)
    index.maybe_append(900, 7)  # not larger: ignored
    index.maybe_append(1000, 8)  # equal: ignored
    index.maybe_append(2000, 9)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 0)
    assert index.lookup(1500) == (1000, 5)
    assert index.lookup(5000) == (2000, 9)
    assert len((tmp_path / "00000000000000000000.timeindex").read_bytes()) == 24
    index.truncate_to(9)
    assert index.last_entry() == (1000, 5)


def test_sanity_checks(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", 0, 1024)
    with pytest.raises(CorruptIndex, match="missing"):
        index.check_against(0)
    index.append(3, 500)
    index.check_against(600)
    with pytest.raises(CorruptIndex, match="beyond the log"):
        index.check_against(400)
    with open(tmp_path / "a.index", "ab") as f:
        f.write(b"\x00\x01")
    with pytest.raises(CorruptIndex, match="multiple"):
        OffsetIndex(tmp_path / "a.index", 0, 1024).check_against(600)
