"""Encryption at rest of stored record batches (`log.encryption.key.file`).

On disk an encrypted batch keeps its 61-byte v2 header in clear, so everything that walks a
segment by headers (indexes, recovery's framing checks, producer state, transactions,
retention, the log mover) works without the key. Only two header fields differ from the batch
the producer sent: the magic byte is `ENCRYPTED_MAGIC` (no Kafka client accepts it, so raw
stored bytes can never pass for a batch) and the batch length counts the encryption overhead.
After the header:

    key id (uint32) | nonce (12 bytes) | records section encrypted with AES-256-GCM | tag (16)

The associated data is a format label, the partition (`<topic>-<partition>`) and the original
header (magic 2, original length, offsets, epoch, producer fields, timestamps, CRC): a batch
moved to another offset or partition, or a header edited on disk, fails authentication.
Decryption restores the records section byte for byte, so the producer's CRC stays valid and a
consumer gets exactly the batch that was appended.

Nonces: a 64-bit random salt drawn when the key ring is loaded, followed by a 32-bit counter
(a new salt when it wraps). Within a process no nonce repeats by construction; across restarts
and brokers sharing a key, two salts would have to collide (about n^2 / 2^65 for n salts). A
nonce never depends on the offset, so a truncated and rewritten offset range gets new nonces.

The key file: one key per line, `<key id>:<base64 of 32 bytes>`, the key id a decimal number
0..4294967295; blank lines and lines starting with `#` are ignored. The last key is the
current one (new batches); the others only read what was written with them. See
docs/security.md, "Encryption at rest".
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import stat
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from protocol.errors import ErrorCode, KafkaError
from protocol.records import CURRENT_MAGIC, HEADER_SIZE, MAGIC_OFFSET, BatchHeader

log = logging.getLogger("kbroker.storage")

ENCRYPTED_MAGIC = 0x6B  # 'k': not a Kafka message format (0, 1, 2)
KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16
MAX_KEY_ID = 0xFFFFFFFF
_KEY_ID = struct.Struct(">I")
_LENGTH = struct.Struct(">i")
LENGTH_OFFSET = 8
PREFIX_SIZE = _KEY_ID.size + NONCE_SIZE  # between the header and the ciphertext
OVERHEAD = PREFIX_SIZE + TAG_SIZE  # what encryption adds to a batch: 32 bytes
_AAD_LABEL = b"kbroker-batch-aes256gcm-v1\0"
_COUNTER_LIMIT = 1 << 32


class KeyFileError(ValueError):
    """The key file cannot be used: the broker must not start."""


class MissingKey(KafkaError):
    """An encrypted batch whose key is not in the key ring: never served, never deleted."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class AuthenticationFailed(Exception):
    """A stored batch failed AES-GCM authentication: tampered with, or damaged, on disk."""


def is_encrypted(header: BatchHeader) -> bool:
    return header.magic == ENCRYPTED_MAGIC


def plain_size(header: BatchHeader) -> int:
    """Bytes the batch has once decrypted (its stored size for a plaintext batch)."""
    return header.size - OVERHEAD if header.magic == ENCRYPTED_MAGIC else header.size


def plain_header(header: BatchHeader) -> BatchHeader:
    """The header of the batch as appended (and as served): magic 2, original length."""
    if header.magic != ENCRYPTED_MAGIC:
        return header
    return header._replace(magic=CURRENT_MAGIC, batch_length=header.batch_length - OVERHEAD)


def plain_header_bytes(stored: bytes | bytearray | memoryview) -> bytes:
    """The 61 header bytes of a stored batch as they were appended (unchanged for plaintext)."""
    out = bytearray(stored[:HEADER_SIZE])
    if out[MAGIC_OFFSET] == ENCRYPTED_MAGIC:
        out[MAGIC_OFFSET] = CURRENT_MAGIC
        _LENGTH.pack_into(out, LENGTH_OFFSET, _LENGTH.unpack_from(out, LENGTH_OFFSET)[0] - OVERHEAD)
    return bytes(out)


def stored_key_id(stored: bytes | bytearray | memoryview, at: int = 0) -> int:
    return _KEY_ID.unpack_from(stored, at + HEADER_SIZE)[0]


class NonceSequence:
    """Nonces that never repeat in this process: random 64-bit salt + 32-bit counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._salt = os.urandom(8)
        self._counter = 0

    def next(self) -> bytes:
        with self._lock:
            if self._counter == _COUNTER_LIMIT:
                self._salt, self._counter = os.urandom(8), 0
            nonce = self._salt + _KEY_ID.pack(self._counter)
            self._counter += 1
            return nonce


class Keyring:
    """The keys of `log.encryption.key.file`: the current one encrypts, every one decrypts."""

    def __init__(self, keys: Sequence[tuple[int, bytes]], source: str = "key ring") -> None:
        if not keys:
            raise KeyFileError(f"{source} holds no key")
        self._keys: dict[int, AESGCM] = {}
        for key_id, key in keys:
            if not 0 <= key_id <= MAX_KEY_ID:
                raise KeyFileError(f"{source}: key id {key_id} is outside 0..{MAX_KEY_ID}")
            if len(key) != KEY_SIZE:
                raise KeyFileError(f"{source}: key {key_id} has {len(key)} bytes, AES-256 needs {KEY_SIZE}")
            if key_id in self._keys:
                raise KeyFileError(f"{source}: key id {key_id} appears twice")
            self._keys[key_id] = AESGCM(key)
        self.current_id = keys[-1][0]
        self._current = self._keys[self.current_id]
        self.source = source
        self.nonces = NonceSequence()

    @property
    def key_ids(self) -> list[int]:
        return sorted(self._keys)

    def __contains__(self, key_id: int) -> bool:
        return key_id in self._keys

    def key(self, key_id: int) -> AESGCM:
        found = self._keys.get(key_id)
        if found is None:
            raise MissingKey(f"key id {key_id} is not in {self.source} (it holds {self.key_ids}): "
                             "the data written with it cannot be read; add the key back")
        return found

    @property
    def current(self) -> AESGCM:
        return self._current


def parse_key_file(text: str, source: str) -> Keyring:
    keys: list[tuple[int, bytes]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key_id_text, colon, encoded = line.partition(":")
        if not colon or not key_id_text.strip().isdigit():
            raise KeyFileError(f"{source} line {number}: expected <key id>:<base64 of 32 bytes>")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"{source} line {number}: the key is not valid base64") from None
        keys.append((int(key_id_text), key))
    return Keyring(keys, source)


def load_key_file(path: str | os.PathLike[str]) -> Keyring:
    """Read a key file; KeyFileError (with the reason) when it cannot be used."""
    file = Path(path)
    try:
        text = file.read_text("ascii")
        mode = file.stat().st_mode
    except (OSError, UnicodeDecodeError) as e:
        raise KeyFileError(f"cannot read log.encryption.key.file {file}: {e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s can be read by other users than its owner (mode %o): keep keys at 0600",
                    file, stat.S_IMODE(mode))
    return parse_key_file(text, str(file))


class BatchCipher:
    """Encrypts and decrypts the stored batches of one partition."""

    def __init__(self, keyring: Keyring, partition: str) -> None:
        self.keyring = keyring
        self._aad_prefix = _AAD_LABEL + partition.encode() + b"\0"

    @property
    def current_key_id(self) -> int:
        return self.keyring.current_id

    def seal(self, batch: bytes | bytearray | memoryview, at: int, header: BatchHeader) -> bytes:
        """The stored form of the plaintext batch at `batch[at:]` (offsets already assigned)."""
        view = memoryview(batch)[at : at + header.size]
        original_header = bytes(view[:HEADER_SIZE])
        nonce = self.keyring.nonces.next()
        sealed = self.keyring.current.encrypt(nonce, view[HEADER_SIZE:], self._aad_prefix + original_header)
        stored_header = bytearray(original_header)
        stored_header[MAGIC_OFFSET] = ENCRYPTED_MAGIC
        _LENGTH.pack_into(stored_header, LENGTH_OFFSET, header.batch_length + OVERHEAD)
        return b"".join((stored_header, _KEY_ID.pack(self.keyring.current_id), nonce, sealed))

    def seal_all(
        self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
    ) -> tuple[bytes, list[BatchHeader]]:
        """Every batch of `data` (described by `headers`) sealed, and the stored headers."""
        parts, stored, at = [], [], 0
        for header in headers:
            parts.append(self.seal(data, at, header))
            stored.append(header._replace(magic=ENCRYPTED_MAGIC, batch_length=header.batch_length + OVERHEAD))
            at += header.size
        return b"".join(parts), stored

    def open(self, stored: bytes | bytearray | memoryview, at: int, header: BatchHeader) -> bytes:
        """The original batch from its stored form at `stored[at:]` (`header`: the stored header).

        Raises MissingKey for a key not in the ring, AuthenticationFailed for bytes that were changed.
        """
        view = memoryview(stored)[at : at + header.size]
        if len(view) < HEADER_SIZE + OVERHEAD:
            raise AuthenticationFailed(f"batch at offset {header.base_offset} is shorter than its encryption")
        key_id = stored_key_id(view)
        original_header = plain_header_bytes(view)
        nonce = bytes(view[HEADER_SIZE + _KEY_ID.size : HEADER_SIZE + PREFIX_SIZE])
        try:
            records = self.keyring.key(key_id).decrypt(nonce, view[HEADER_SIZE + PREFIX_SIZE :],
                                                       self._aad_prefix + original_header)
        except InvalidTag:
            raise AuthenticationFailed(f"batch at offset {header.base_offset} failed authentication "
                                       f"(key id {key_id}): changed on disk") from None
        return original_header + records


def open_stored(cipher: BatchCipher | None, stored: bytes | bytearray | memoryview, at: int,
                header: BatchHeader) -> bytes:
    """The batch at `stored[at:]` as appended: decrypted if it is encrypted, else as it is."""
    if header.magic != ENCRYPTED_MAGIC:
        return bytes(memoryview(stored)[at : at + header.size])
    if cipher is None:
        key_id = stored_key_id(stored, at)
        raise MissingKey(f"a batch at offset {header.base_offset} is encrypted (key id {key_id}), but "
                         "log.encryption.key.file is not set")
    return cipher.open(stored, at, header)

