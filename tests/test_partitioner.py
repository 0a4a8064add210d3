"""murmur2 and the keyed partition choice agree with the Java client."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kbroker.partitioner import murmur2, partition_for_key, to_positive

# From Kafka's UtilsTest.testMurmur2 (Java values, signed).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_agrees_with_kafka_python_on_random_keys() -> None:
    rng = random.Random(20240611)
    for _ in range(5000):
        key = rng.randbytes(rng.randrange(0, 70))
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_every_tail_length_and_high_bytes() -> None:
    # Bytes >= 0x80 are negative in Java; the tail handling must still treat them as unsigned.
    for length in range(0, 9):
        key = bytes(range(0xF8, 0xF8 + length))
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)


def test_to_positive_clears_the_sign_bit() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(5) == 5


def test_partition_for_key_matches_java_formula() -> None:
    # Java: Utils.toPositive(Utils.murmur2(key)) % numPartitions
    assert partition_for_key(b"foobar", 3) == (-790332482 & 0x7FFFFFFF) % 3
    for key, hashed in JAVA_VECTORS.items():
        for n in (1, 2, 3, 7, 100):
            assert partition_for_key(key, n) == (hashed & 0x7FFFFFFF) % n


def test_partition_for_key_needs_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
