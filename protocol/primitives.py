"""Kafka's wire primitives as `construct` types.

Everything here is sans-io: constructs parse from and build into a stream. Malformed
input raises a `construct.ConstructError` subclass (never IndexError, UnicodeError, ...),
so the connection layer has one exception family to turn into an error or a close.

`KStruct` replaces construct's `Struct` for Kafka messages: it is lean (no context
chaining, which Kafka never needs), fills defaults for fields a version lacks, writes the
tagged-field section of flexible versions, and refuses to build from a dict holding a key
that is no field of the struct in any version (`UnknownFieldError`): a misspelt key would
otherwise go out silently as the field's default.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from construct import Construct, ConstructError, Container, ListContainer, StreamError

# Lengths that no valid message reaches; reading one means hostile or corrupt input.
MAX_COLLECTION_LENGTH = 1 << 28


class ProtocolError(StreamError):
    """Malformed input: a length, varint or string the protocol does not allow."""


class _Fixed(Construct):
    """A fixed-size big-endian number; faster than FormatField and errors uniformly."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self._struct = struct.Struct(">" + fmt)
        self._size = self._struct.size

    def _parse(self, stream, context, path):
        data = stream.read(self._size)
        if len(data) != self._size:
            raise ProtocolError(f"expected {self._size} bytes, got {len(data)}", path=path)
        return self._struct.unpack(data)[0]

    def _build(self, obj, stream, context, path):
        try:
            stream.write(self._struct.pack(obj))
        except struct.error as e:
            raise ProtocolError(f"cannot pack {obj!r}: {e}", path=path) from None
        return obj

    def _sizeof(self, context, path):
        return self._size


Int8 = _Fixed("b")
Int16 = _Fixed("h")
Int32 = _Fixed("i")
Int64 = _Fixed("q")
UInt16 = _Fixed("H")
UInt32 = _Fixed("I")
Float64 = _Fixed("d")


class _Bool(Construct):
    def _parse(self, stream, context, path):
        data = stream.read(1)
        if not data:
            raise ProtocolError("expected a boolean", path=path)
        return data != b"\x00"

    def _build(self, obj, stream, context, path):
        stream.write(b"\x01" if obj else b"\x00")
        return obj


Bool = _Bool()


def read_uvarint(stream: io.BufferedIOBase | io.BytesIO, path: str = "") -> int:
    result = 0
    for shift in range(0, 35, 7):
        data = stream.read(1)
        if not data:
            raise ProtocolError("truncated varint", path=path)
        byte = data[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
    raise ProtocolError("varint longer than 5 bytes", path=path)


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ProtocolError(f"negative unsigned varint {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _UVarInt(Construct):
    def _parse(self, stream, context, path):
        return read_uvarint(stream, path)

    def _build(self, obj, stream, context, path):
        stream.write(encode_uvarint(obj))
        return obj


class _VarInt(Construct):
    """Signed zig-zag varint (int32 range)."""

    def _parse(self, stream, context, path):
        raw = read_uvarint(stream, path)
        return (raw >> 1) ^ -(raw & 1)

    def _build(self, obj, stream, context, path):
        stream.write(encode_uvarint(((obj << 1) ^ (obj >> 31)) & 0xFFFFFFFF))
        return obj


UVarInt = _UVarInt()
VarInt = _VarInt()


def _read_exact(stream, size: int, path: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ProtocolError(f"expected {size} bytes, got {len(data)}", path=path)
    return data


class _Length(Construct):
    """Base for length-prefixed values: classic (int16/int32, -1 = null) or compact (uvarint N+1)."""

    def __init__(self, *, compact: bool, nullable: bool, wide: bool) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self._prefix = Int32 if wide else Int16
        self.flagbuildnone = nullable

    def _read_length(self, stream, path) -> int | None:
        length = read_uvarint(stream, path) - 1 if self.compact else self._prefix._parse(stream, None, path)
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise ProtocolError(f"invalid length {length}", path=path)
        if length > MAX_COLLECTION_LENGTH:
            raise ProtocolError(f"length {length} too large", path=path)
        return length

    def _write_length(self, length: int | None, stream, path) -> None:
        if length is None:
            if not self.nullable:
                raise ProtocolError("null given for a non-nullable field", path=path)
            length = -1
        if self.compact:
            stream.write(encode_uvarint(length + 1))
        else:
            self._prefix._build(length, stream, None, path)


class TooManyEntries(ProtocolError):
    """A request holding more array entries than a parse allows (see `parse_context`)."""


def parse_context(max_entries: int | None = None) -> Container:
    """The context of one parse; with `max_entries`, arrays may hold that many entries in all."""
    context = Container(_parsing=True, _building=False, _sizing=False, _params={})
    if max_entries is not None:
        context["_entries_left"] = max_entries
        context["_max_entries"] = max_entries
    return context


class KString(_Length):
    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=False)

    def _parse(self, stream, context, path):
        length = self._read_length(stream, path)
        if length is None:
            return None
        try:
            return str(_read_exact(stream, length, path), "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8", path=path) from None

    def _build(self, obj, stream, context, path):
        if obj is None:
            self._write_length(None, stream, path)
            return obj
        data = obj.encode("utf-8")
        if not self.compact and len(data) > 0x7FFF:
            raise ProtocolError("string longer than 32767 bytes", path=path)
        self._write_length(len(data), stream, path)
        stream.write(data)
        return obj


class ExternalBytes(Protocol):
    """Bytes held elsewhere (e.g. a slice of a segment file), sent without copying."""

    @property
    def size(self) -> int: ...

    def read_bytes(self) -> bytes: ...


BytesLike = bytes | bytearray | memoryview
# What a records field holds: bytes, or the parts of a record set held here and elsewhere.
RecordsValue = BytesLike | ExternalBytes | Sequence[BytesLike | ExternalBytes]


class KBytes(_Length):
    """Bytes and records fields. Records may be built from external slices (zero copy)."""

    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=True)

    def _parse(self, stream, context, path):
        length = self._read_length(stream, path)
        if length is None:
            return None
        return _read_exact(stream, length, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            self._write_length(None, stream, path)
            return obj
        parts = obj if isinstance(obj, list | tuple) else (obj,)
        self._write_length(sum(_part_size(p) for p in parts), stream, path)
        for part in parts:
            if isinstance(part, BytesLike):
                stream.write(part)
            elif isinstance(stream, SegmentedWriter):
                stream.add_external(part)
            else:
                stream.write(part.read_bytes())
        return obj


def _part_size(part: Any) -> int:
    return len(part) if isinstance(part, BytesLike) else part.size


class _Uuid(Construct):
    def _parse(self, stream, context, path):
        return uuid.UUID(bytes=_read_exact(stream, 16, path))

    def _build(self, obj, stream, context, path):
        stream.write((obj or ZERO_UUID).bytes)
        return obj


Uuid = _Uuid()
ZERO_UUID = uuid.UUID(int=0)


class KArray(_Length):
    def __init__(self, element: Construct, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__(compact=compact, nullable=nullable, wide=True)
        self.element = element

    def _parse(self, stream, context, path):
        length = self._read_length(stream, path)
        if length is None:
            return None
        budget = context.get("_entries_left")
        if budget is not None:
            # Each entry becomes Python objects: a request may not ask for more than its budget.
            if length > budget:
                raise TooManyEntries(f"more than {context['_max_entries']} array entries in one request", path=path)
            context["_entries_left"] = budget - length
        element = self.element
        return ListContainer(element._parsereport(stream, context, path) for _ in range(length))

    def _build(self, obj, stream, context, path):
        if obj is None:
            self._write_length(None, stream, path)
            return obj
        self._write_length(len(obj), stream, path)
        element = self.element
        for item in obj:
            element._build(item, stream, context, path)
        return obj


class UnknownFieldError(ConstructError):
    """A dict built into a struct names a key that is no field of that struct in any version.

    Building a message from a dict fills every field the dict lacks with its default, so a
    misspelt key would put the default on the wire without a word; this refuses it instead.
    `path` is the chain of fields from the message down to the struct; the encoder that knows
    the message and version sets `message` (e.g. "ProduceResponse v9").
    """

    def __init__(self, struct: str, keys: Iterable[str]) -> None:
        super().__init__()
        self.struct = struct
        self.keys = sorted(str(k) for k in keys)
        self.path: list[str] = []
        self.message = ""

    def __str__(self) -> str:
        where = ".".join(self.path)
        keys = ", ".join(repr(k) for k in self.keys)
        return (f"{self.message + ': ' if self.message else ''}unknown key(s) {keys} in {self.struct}"
                f"{' at ' + where if where else ''}: no field of that name in any version")


class _StructDefault:
    """Marks a struct-typed field whose default is its struct with all fields defaulted."""

    def __repr__(self) -> str:
        return "STRUCT_DEFAULT"


STRUCT_DEFAULT = _StructDefault()


class Field:
    """A named member of a KStruct with the value used when building omits it."""

    __slots__ = ("name", "con", "default")

    def __init__(self, name: str, con: Construct, default: Any = None) -> None:
        self.name = name
        self.con = con
        self.default = default

    def default_value(self) -> Any:
        default = self.default
        if isinstance(default, list):
            return []
        if default is STRUCT_DEFAULT:
            return self.con.defaults()
        return default


class TaggedField(Field):
    __slots__ = ("tag",)

    def __init__(self, tag: int, name: str, con: Construct, default: Any = None) -> None:
        super().__init__(name, con, default)
        self.tag = tag

    def is_default(self, value: Any) -> bool:
        if value is None:
            return True
        if self.default is STRUCT_DEFAULT:
            return all(_equal_default(value.get(f.name), f) for f in self.con.fields)
        return value == self.default_value()


def _equal_default(value: Any, field: Field) -> bool:
    return value is None or value == field.default_value()


class KStruct(Construct):
    """A Kafka struct at one version.

    `fields` are written in order; `tagged` (flexible versions only) go in the trailing
    tagged-field section, omitted when they hold their default; `absent` are fields of
    other versions, filled with their default on parse so handlers see one shape. `name` is
    the struct's name in the spec, for error messages.

    Building accepts a key of any field of the struct in any version (fields, tagged and
    absent), so one dict may serve every version; any other key raises UnknownFieldError.
    """

    def __init__(
        self,
        *fields: Field,
        tagged: Sequence[TaggedField] = (),
        flexible: bool = False,
        absent: Iterable[Field] = (),
        nullable: bool = False,
        name: str = "struct",
    ) -> None:
        super().__init__()
        self.fields = fields
        self.nullable = nullable
        self.tagged = {t.tag: t for t in tagged}
        self.flexible = flexible
        self.absent = tuple(absent)
        self.flagbuildnone = True
        self.name = name
        self.known = frozenset(f.name for f in (*self.fields, *self.tagged.values(), *self.absent))

    def defaults(self) -> Container:
        obj = Container()
        for f in (*self.fields, *self.tagged.values(), *self.absent):
            obj[f.name] = f.default_value()
        return obj

    def _parse(self, stream, context, path):
        if self.nullable:
            # A nullable struct field starts with a presence byte: -1 for null, 1 for present.
            marker = _read_exact(stream, 1, path)[0]
            if marker == 0xFF:
                return None
            if marker != 1:
                raise ProtocolError(f"bad nullable struct marker {marker} at {path}")
        obj = Container()
        for f in self.fields:
            obj[f.name] = f.con._parsereport(stream, context, path)
        for f in self.absent:
            obj[f.name] = f.default_value()
        if self.flexible:
            for f in self.tagged.values():
                obj[f.name] = f.default_value()
            self._parse_tagged(obj, stream, context, path)
        return obj

    def _parse_tagged(self, obj, stream, context, path) -> None:
        count = read_uvarint(stream, path)
        for _ in range(count):
            tag = read_uvarint(stream, path)
            size = read_uvarint(stream, path)
            data = _read_exact(stream, size, path)
            field = self.tagged.get(tag)
            if field is None:
                continue  # unknown tags are skipped, as the spec requires
            sub = io.BytesIO(data)
            obj[field.name] = field.con._parsereport(sub, context, path)

    def _build(self, obj, stream, context, path):
        if self.nullable:
            stream.write(b"\x01" if obj is not None else b"\xff")
            if obj is None:
                return None
        if obj is None:
            obj = {}
        elif not self.known.issuperset(obj):
            raise UnknownFieldError(self.name, set(obj).difference(self.known))
        f = None
        try:
            for f in self.fields:
                value = obj.get(f.name, _MISSING)
                f.con._build(f.default_value() if value is _MISSING else value, stream, context, path)
            f = None
            if self.flexible:
                self._build_tagged(obj, stream, context, path)
        except UnknownFieldError as e:  # on its way out: say in which field the struct sits
            if f is not None:
                e.path.insert(0, f.name)
            raise
        return obj

    def _build_tagged(self, obj, stream, context, path) -> None:
        present = []
        for tag in sorted(self.tagged):
            field = self.tagged[tag]
            value = obj.get(field.name)
            if not field.is_default(value):
                try:
                    present.append((tag, field.con.build(value)))
                except UnknownFieldError as e:
                    e.path.insert(0, field.name)
                    raise
        stream.write(encode_uvarint(len(present)))
        for tag, data in present:
            stream.write(encode_uvarint(tag))
            stream.write(encode_uvarint(len(data)))
            stream.write(data)


_MISSING = object()


class SegmentedWriter(io.BytesIO):
    """A build target that keeps external byte slices out of the buffer.

    `parts()` yields bytes and external slices in wire order, so the network layer can
    send file slices with sendfile instead of copying them into Python memory.
    """

    def __init__(self) -> None:
        super().__init__()
        self._externals: list[tuple[int, ExternalBytes]] = []
        self._external_size = 0

    def add_external(self, part: ExternalBytes) -> None:
        self._externals.append((self.tell(), part))
        self._external_size += part.size

    @property
    def total_size(self) -> int:
        return len(self.getbuffer()) + self._external_size

    def parts(self) -> list[BytesLike | ExternalBytes]:
        buffer = self.getvalue()
        out: list[BytesLike | ExternalBytes] = []
        start = 0
        for position, part in self._externals:
            if position > start:
                out.append(buffer[start:position])
            out.append(part)
            start = position
        if start < len(buffer):
            out.append(buffer[start:])
        return out


class ViewStream:
    """A read-only stream over a buffer, for parsing it in place.

    Compiled parsers (protocol/struct_compiler.py) read `view` from `position` directly; the
    interpreter reads through `read`. Unless `copy`, reads of at least ZERO_COPY_FROM bytes are
    views into the buffer, not copies: produce requests are parsed so, and a record set reaches
    the log as a slice of the frame the socket filled. Smaller reads are bytes, as every other
    field expects.
    """

    __slots__ = ("view", "position", "copy")
    ZERO_COPY_FROM = 4096

    def __init__(self, view: memoryview, position: int = 0, *, copy: bool = False) -> None:
        self.view = view
        self.position = position
        self.copy = copy

    def read(self, size: int = -1) -> bytes | memoryview:
        start = self.position
        end = len(self.view) if size < 0 else min(start + size, len(self.view))
        self.position = end
        chunk = self.view[start:end]
        return chunk if not self.copy and end - start >= self.ZERO_COPY_FROM else bytes(chunk)

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = 0) -> int:
        self.position = position if whence == 0 else self.position + position if whence == 1 \
            else len(self.view) + position
        return self.position


def parse_all(con: Construct, data: BytesLike) -> Container:
    """Parse `data` fully with `con`; trailing bytes are tolerated (newer clients may add tags)."""
    return _compiled.parser(con)(memoryview(data), 0, parse_context(), False)[0]


def build_context() -> Container:
    return Container(_parsing=False, _building=True, _sizing=False, _params={})


# Building never writes into its context (parsing does: the entry budget), so one serves all.
_BUILD_CONTEXT = build_context()


def build_into(con: Construct, obj: Any, writer: io.BytesIO) -> None:
    _compiled.builder(con)(obj, writer, _BUILD_CONTEXT)


# Re-exported for generated modules.
__all__ = [
    "STRUCT_DEFAULT",
    "ZERO_UUID",
    "Bool",
    "BytesLike",
    "Field",
    "Float64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "KArray",
    "KBytes",
    "KString",
    "KStruct",
    "ProtocolError",
    "RecordsValue",
    "SegmentedWriter",
    "TaggedField",
    "TooManyEntries",
    "UnknownFieldError",
    "UInt16",
    "UInt32",
    "UVarInt",
    "Uuid",
    "VarInt",
    "ViewStream",
    "build_into",
    "parse_all",
    "parse_context",
]


# Last: the compiler reads the declarations' types above (either module may be imported first).
from protocol import struct_compiler as _compiled  # noqa: E402
