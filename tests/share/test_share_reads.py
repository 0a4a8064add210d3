"""A share fetch's view of a log read (kbroker/coordinator/share_reads.py): whole batches by
their headers, and the part an answer sends, for a slice of a segment file and for batches in
memory alike."""

from __future__ import annotations

from pathlib import Path

from kbroker.coordinator.share_reads import batch_extents, records_through
from kbroker.storage.read_results import BatchBytes, ReadResult
from protocol.record_batch import Record, decode_batches, encode_batch


def _batches(*sizes: int, base: int = 40) -> list[bytes]:
    """Batches of `sizes` records each, offsets following one another from `base`."""
    out, offset = [], base
    for count in sizes:
        out.append(encode_batch([Record(i, 0, None, b"v%d" % (offset + i)) for i in range(count)], base_offset=offset))
        offset += count
    return out


def test_a_file_slice_is_walked_by_its_headers_and_trimmed_as_a_file_slice(tmp_path: Path) -> None:
    batches = _batches(3, 1, 5)
    preceding = b"x" * 100  # the slice starts inside the file, as a read past the first batch does
    segment = tmp_path / "segment.log"
    segment.write_bytes(preceding + b"".join(batches))
    whole = sum(map(len, batches))
    with segment.open("rb") as file:
        # The read's byte limit cuts the last batch: it is not a whole batch of the read.
        read = ReadResult(file, len(preceding), whole - 7, 40)
        first, second = len(batches[0]), len(batches[0]) + len(batches[1])
        assert batch_extents(read) == [(40, 42, first), (43, 43, second)]
        answer = records_through(read, second)
        assert isinstance(answer, ReadResult) and answer.file is file  # still sent with sendfile
        assert (answer.position, answer.size) == (len(preceding), second)
        assert [b.base_offset for b in decode_batches(answer.read_bytes())] == [40, 43]


def test_batches_in_memory_are_walked_and_trimmed_in_memory() -> None:
    batches = _batches(2, 4)
    data = b"".join(batches)
    read = BatchBytes(data[:-1], 40)
    assert batch_extents(read) == [(40, 41, len(batches[0]))]
    assert batch_extents(BatchBytes(data, 40))[-1] == (42, 45, len(data))
    answer = records_through(BatchBytes(data, 40), len(batches[0]))
    assert isinstance(answer, BatchBytes) and answer.data == batches[0]
