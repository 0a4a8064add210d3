"""Straight-line parse and build functions for a KStruct, generated from its declaration.

The declarations in `protocol/messages` are interpreted by `KStruct._parse` and `_build`: a
method call, a stream read and a small allocation per field, which made parsing and encoding
a tenth to a fifth of a broker's busy time on small requests (docs/performance.md, "Compiled
codecs, one-copy answers for followers"). Here each KStruct is turned once, on first use, into Python
source that reads its fields from a buffer at an offset (`struct.unpack_from`, consecutive
fixed-width fields in one call) and writes them the same way, nested structs calling their own
compiled functions. The functions give the results and raise the errors of the interpreter:
malformed input is a `ProtocolError`, too many array entries `TooManyEntries`, an unknown key
`UnknownFieldError` with the path to it (tests/protocol/test_struct_compiler.py compares the
two on every declaration).

Tagged fields are rare on the hot path: a tagged section that holds any is read field by field
with these parsers, and one to write with a value set goes through the interpreter.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from construct import Construct, Container, ListContainer

from protocol import primitives as p

# A compiled parser: (buffer, offset, parse context, views) -> (value, offset after it). With
# `views`, byte fields of at least VIEW_FROM bytes are memoryviews into the buffer, not copies.
Parser = Callable[[memoryview, int, Any, bool], tuple[Any, int]]
# A compiled builder: (value, stream, build context) -> None.
Builder = Callable[[Any, Any, Any], None]

VIEW_FROM = 4096

_FIXED_FORMATS = {p.Int8: "b", p.Int16: "h", p.Int32: "i", p.Int64: "q", p.UInt16: "H", p.UInt32: "I",
                  p.Float64: "d"}


def _fixed_format(con: Construct) -> str | None:
    return _FIXED_FORMATS.get(con)  # type: ignore[call-overload]


class _Source:
    """Python source being generated, with the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def const(self, value: Any, hint: str = "c") -> str:
        key = id(value)
        name = self._ids.get(key)
        if name is None:
            name = f"_{hint}{len(self._ids)}"
            self._ids[key] = name
            self.names[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def compile(self, name: str) -> Any:
        namespace = {**_RUNTIME, **self.names}
        exec(compile("\n".join(self.lines), f"<compiled {name}>", "exec"), namespace)  # noqa: S102
        return namespace["compiled"]


# -- parsing ----------------------------------------------------------------------------------


def _short(buf: memoryview, pos: int, size: int) -> p.ProtocolError:
    return p.ProtocolError(f"expected {size} bytes, got {max(0, min(size, len(buf) - pos))}")


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    end = len(buf)
    for shift in (0, 7, 14, 21, 28):
        if pos >= end:
            raise p.ProtocolError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise p.ProtocolError("varint longer than 5 bytes")


def _length(buf: memoryview, pos: int, compact: bool, nullable: bool, wide: bool) -> tuple[int | None, int]:
    if compact:
        length, pos = _uvarint(buf, pos)
        length -= 1
    else:
        size = 4 if wide else 2
        if pos + size > len(buf):
            raise _short(buf, pos, size)
        length = (_I32 if wide else _I16).unpack_from(buf, pos)[0]
        pos += size
    if length < 0:
        if length == -1 and nullable:
            return None, pos
        raise p.ProtocolError(f"invalid length {length}")
    if length > p.MAX_COLLECTION_LENGTH:
        raise p.ProtocolError(f"length {length} too large")
    return length, pos


def _string(buf: memoryview, pos: int, length: int) -> str:
    end = pos + length
    if end > len(buf):
        raise _short(buf, pos, length)
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError:
        raise p.ProtocolError("string is not UTF-8") from None


def _bytes(buf: memoryview, pos: int, length: int, views: bool) -> bytes | memoryview:
    end = pos + length
    if end > len(buf):
        raise _short(buf, pos, length)
    chunk = buf[pos:end]
    return chunk if views and length >= VIEW_FROM else bytes(chunk)


def _uuid(buf: memoryview, pos: int) -> Any:
    if pos + 16 > len(buf):
        raise _short(buf, pos, 16)
    raw = bytes(buf[pos:pos + 16])
    return p.ZERO_UUID if raw == _ZERO_BYTES else _UUID(bytes=raw)


def _spend(context: Any, length: int) -> None:
    """Charge an array's entries to the parse's entry budget (`parse_context(max_entries)`)."""
    budget = context.get("_entries_left")
    if budget is not None:
        if length > budget:
            raise p.TooManyEntries(f"more than {context['_max_entries']} array entries in one request")
        context["_entries_left"] = budget - length


def _tagged(con: p.KStruct, obj: Any, buf: memoryview, pos: int, context: Any) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise _short(buf, pos, size)
        field = con.tagged.get(tag)
        if field is not None:  # unknown tags are skipped, as the spec requires
            obj[field.name] = parser(field.con)(buf[:end], pos, context, False)[0]
        pos = end
    return pos


def _fallback_parser(con: Construct) -> Parser:
    """A declaration this module does not compile: the interpreter, over a stream of the buffer."""

    def parse(buf: memoryview, pos: int, context: Any, views: bool) -> tuple[Any, int]:
        stream = p.ViewStream(buf, pos, copy=not views)
        value = con._parsereport(stream, context, "")
        return value, stream.tell()

    return parse


def _kept(con: Construct, attribute: str, compile_struct: Callable[[Any], Any],
          fallback: Callable[[Construct], Any]) -> Any:
    """The function kept on `con` under `attribute`, made on first use: compiled for a KStruct,
    the interpreter's for anything else."""
    made = getattr(con, attribute, None)
    if made is None:
        made = compile_struct(con) if type(con) is p.KStruct else fallback(con)
        setattr(con, attribute, made)
    return made


def parser(con: Construct) -> Parser:
    """The compiled parser of `con` (made on first use, then kept on the declaration)."""
    return _kept(con, "_compiled_parse", _compile_parser, _fallback_parser)


def _runs(fields: Sequence[p.Field]) -> Iterator[tuple[Sequence[p.Field], struct.Struct | None]]:
    """The fields in order: each run of consecutive fixed-width ones with the one packer for all
    of them, any other field alone (packer None)."""
    i = 0
    while i < len(fields):
        formats, j = "", i
        while j < len(fields) and (fmt := _fixed_format(fields[j].con)) is not None:
            formats += fmt
            j += 1
        if j == i:
            yield fields[i:i + 1], None
            i += 1
        else:
            yield fields[i:j], struct.Struct(">" + formats)
            i = j


def _compile_parser(con: p.KStruct) -> Parser:
    src = _Source()
    src.emit(0, "def compiled(buf, pos, ctx, views):")
    if con.nullable:
        src.emit(1, "if pos >= len(buf):")
        src.emit(2, "raise _short(buf, pos, 1)")
        src.emit(1, "marker = buf[pos]")
        src.emit(1, "pos += 1")
        src.emit(1, "if marker == 0xFF:")
        src.emit(2, "return None, pos")
        src.emit(1, "if marker != 1:")
        src.emit(2, "raise ProtocolError(f'bad nullable struct marker {marker}')")
    src.emit(1, "obj = Container()")
    for run, packer in _runs(con.fields):
        if packer is None:
            _emit_parse_value(src, run[0].con, f"obj[{run[0].name!r}]", 1)
            continue
        src.emit(1, f"if pos + {packer.size} > len(buf):")
        src.emit(2, f"raise _short(buf, pos, {packer.size})")
        targets = ", ".join(f"obj[{f.name!r}]" for f in run)
        src.emit(1, f"{targets}, = {src.const(packer, 's')}.unpack_from(buf, pos)")
        src.emit(1, f"pos += {packer.size}")
    for f in con.absent:
        src.emit(1, f"obj[{f.name!r}] = {_default_expr(src, f)}")
    if con.flexible:
        for f in con.tagged.values():
            src.emit(1, f"obj[{f.name!r}] = {_default_expr(src, f)}")
        src.emit(1, "if pos < len(buf) and buf[pos] == 0:")  # no tagged fields: nearly always
        src.emit(2, "pos += 1")
        src.emit(1, "else:")
        src.emit(2, f"pos = _tagged({src.const(con, 'k')}, obj, buf, pos, ctx)")
    src.emit(1, "return obj, pos")
    return src.compile(con.name)


def _emit_parse_value(src: _Source, con: Construct, target: str, indent: int) -> None:
    fmt = _fixed_format(con)
    if fmt is not None:
        packer = struct.Struct(">" + fmt)
        src.emit(indent, f"if pos + {packer.size} > len(buf):")
        src.emit(indent + 1, f"raise _short(buf, pos, {packer.size})")
        src.emit(indent, f"{target}, = {src.const(packer, 's')}.unpack_from(buf, pos)")
        src.emit(indent, f"pos += {packer.size}")
    elif con is p.Bool:
        src.emit(indent, "if pos >= len(buf):")
        src.emit(indent + 1, "raise ProtocolError('expected a boolean')")
        src.emit(indent, f"{target} = buf[pos] != 0")
        src.emit(indent, "pos += 1")
    elif con is p.UVarInt:
        src.emit(indent, f"{target}, pos = _uvarint(buf, pos)")
    elif con is p.VarInt:
        src.emit(indent, "raw, pos = _uvarint(buf, pos)")
        src.emit(indent, f"{target} = (raw >> 1) ^ -(raw & 1)")
    elif con is p.Uuid:
        src.emit(indent, f"{target} = _uuid(buf, pos)")
        src.emit(indent, "pos += 16")
    elif type(con) in (p.KString, p.KBytes):
        _emit_length(src, con.compact, con.nullable, type(con) is p.KBytes, indent)
        src.emit(indent, "if n is None:")
        src.emit(indent + 1, f"{target} = None")
        src.emit(indent, "else:")
        read = "_string(buf, pos, n)" if type(con) is p.KString else "_bytes(buf, pos, n, views)"
        src.emit(indent + 1, f"{target} = {read}")
        src.emit(indent + 1, "pos += n")
    elif type(con) is p.KArray:
        _emit_length(src, con.compact, con.nullable, True, indent)
        src.emit(indent, "if n is None:")
        src.emit(indent + 1, f"{target} = None")
        src.emit(indent, "else:")
        src.emit(indent + 1, "_spend(ctx, n)")
        element = con.element
        if _fixed_format(element) is None:
            src.emit(indent + 1, "items = ListContainer()")
            src.emit(indent + 1, "append = items.append")
            src.emit(indent + 1, f"element = {src.const(parser(element), 'p')}")
            src.emit(indent + 1, "for _ in range(n):")
            src.emit(indent + 2, "item, pos = element(buf, pos, ctx, views)")
            src.emit(indent + 2, "append(item)")
            src.emit(indent + 1, f"{target} = items")
        else:
            fmt = _fixed_format(element)
            size = struct.calcsize(">" + fmt)
            src.emit(indent + 1, f"if pos + n * {size} > len(buf):")
            src.emit(indent + 2, f"raise _short(buf, pos, n * {size})")
            src.emit(indent + 1, f"{target} = ListContainer(struct.unpack_from(f'>{{n}}{fmt}', buf, pos))")
            src.emit(indent + 1, f"pos += n * {size}")
    else:
        src.emit(indent, f"{target}, pos = {src.const(parser(con), 'p')}(buf, pos, ctx, views)")


def _emit_length(src: _Source, compact: bool, nullable: bool, wide: bool, indent: int) -> None:
    """n = the length (None for null), pos after it; a one-byte compact length read inline."""
    if compact:
        src.emit(indent, "if pos < len(buf) and buf[pos] & 0x80 == 0:")
        src.emit(indent + 1, "n = buf[pos] - 1")
        src.emit(indent + 1, "pos += 1")
        src.emit(indent + 1, "if n < 0:")
        if nullable:
            src.emit(indent + 2, "n = None")
        else:
            src.emit(indent + 2, "raise ProtocolError('invalid length -1')")
        src.emit(indent, "else:")
        src.emit(indent + 1, f"n, pos = _length(buf, pos, True, {nullable}, {wide})")
    else:
        src.emit(indent, f"n, pos = _length(buf, pos, False, {nullable}, {wide})")


def _default_expr(src: _Source, f: p.Field) -> str:
    default = f.default
    if isinstance(default, list):
        return "[]"
    if default is p.STRUCT_DEFAULT:
        return f"{src.const(f.con, 'k')}.defaults()"
    if _literal(default):
        return repr(default)
    return src.const(default, "d")  # shared, as the interpreter's default_value() shares it


# -- building ---------------------------------------------------------------------------------


def _fallback_builder(con: Construct) -> Builder:
    def build(obj: Any, stream: Any, context: Any) -> None:
        con._build(obj, stream, context, "")

    return build


def builder(con: Construct) -> Builder:
    """The compiled builder of `con` (made on first use, then kept on the declaration)."""
    return _kept(con, "_compiled_build", _compile_builder, _fallback_builder)


def _pack_error(packer: struct.Struct, values: tuple, error: struct.error) -> p.ProtocolError:
    return p.ProtocolError(f"cannot pack {values!r} as {packer.format}: {error}")


def _compile_builder(con: p.KStruct) -> Builder:
    src = _Source()
    me = src.const(con, "k")
    src.emit(0, "def compiled(obj, stream, ctx):")
    src.emit(1, "write = stream.write")
    if con.nullable:
        src.emit(1, "write(b'\\x01' if obj is not None else b'\\xff')")
        src.emit(1, "if obj is None:")
        src.emit(2, "return")
    src.emit(1, "if obj is None:")
    src.emit(2, "obj = {}")
    src.emit(1, f"elif not {me}.known.issuperset(obj):")
    src.emit(2, f"raise UnknownFieldError({con.name!r}, set(obj).difference({me}.known))")
    src.emit(1, "get = obj.get")
    fields = list(con.fields)
    if any(not _is_leaf(f.con) for f in fields):
        src.emit(1, "field = None")
        src.emit(1, "try:")
        body = 2
    else:
        body = 1
    for run, packer in _runs(fields):
        if packer is None:
            f = run[0]
            if not _is_leaf(f.con):
                src.emit(body, f"field = {f.name!r}")
            _emit_build_value(src, f.con, _value_expr(src, f), body)
            continue
        name = src.const(packer, "s")
        src.emit(body, f"values = ({', '.join(_value_expr(src, f) for f in run)},)")
        src.emit(body, "try:")
        src.emit(body + 1, f"write({name}.pack(*values))")
        src.emit(body, "except struct.error as e:")
        src.emit(body + 1, f"raise _pack_error({name}, values, e) from None")
    if body == 2:
        src.emit(2, "field = None")
        src.emit(1, "except UnknownFieldError as e:")
        src.emit(2, "if field is not None:")
        src.emit(3, "e.path.insert(0, field)")
        src.emit(2, "raise")
    if con.flexible:
        if con.tagged and all(type(f).is_default is p.TaggedField.is_default for f in con.tagged.values()):
            # A tagged field given as None is left out, as one holding its default: only a
            # struct with a tagged value set needs the interpreter's section. (A field that
            # decides otherwise, written even when null, always takes the interpreter's way.)
            unset = " and ".join(f"get({f.name!r}) is None" for f in con.tagged.values())
            src.emit(1, f"if {unset}:")
            src.emit(2, "write(b'\\x00')")
            src.emit(1, "else:")
            src.emit(2, f"{me}._build_tagged(obj, stream, ctx, '')")
        elif con.tagged:
            src.emit(1, f"{me}._build_tagged(obj, stream, ctx, '')")
        else:
            src.emit(1, "write(b'\\x00')")
    return src.compile(con.name)


def _is_leaf(con: Construct) -> bool:
    """A field whose building cannot raise UnknownFieldError (no struct inside)."""
    return type(con) in (p._Fixed, p._Bool, p._UVarInt, p._VarInt, p._Uuid, p.KString, p.KBytes)


def _value_expr(src: _Source, f: p.Field) -> str:
    if _literal(f.default):
        return f"get({f.name!r}, {f.default!r})"
    return f"_value(obj, {f.name!r}, {src.const(f, 'f')})"


def _literal(default: Any) -> bool:
    """A default written into the generated source as is (immutable, with an exact repr)."""
    return default is None or type(default) in (int, str, bytes, bool)


def _value(obj: Any, name: str, field: p.Field) -> Any:
    value = obj.get(name, _MISSING)
    return field.default_value() if value is _MISSING else value


_MISSING = object()


def _emit_build_value(src: _Source, con: Construct, value: str, indent: int) -> None:
    fmt = _fixed_format(con)
    if fmt is not None:
        packer = src.const(struct.Struct(">" + fmt), "s")
        src.emit(indent, f"value = {value}")
        src.emit(indent, "try:")
        src.emit(indent + 1, f"write({packer}.pack(value))")
        src.emit(indent, "except struct.error as e:")
        src.emit(indent + 1, f"raise _pack_error({packer}, (value,), e) from None")
    elif con is p.Bool:
        src.emit(indent, f"write(b'\\x01' if {value} else b'\\x00')")
    elif con is p.UVarInt:
        src.emit(indent, f"write(encode_uvarint({value}))")
    elif con is p.VarInt:
        src.emit(indent, f"value = {value}")
        src.emit(indent, "write(encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF))")
    elif con is p.Uuid:
        src.emit(indent, f"write(({value} or ZERO_UUID).bytes)")
    elif type(con) is p.KString:
        src.emit(indent, f"value = {value}")
        src.emit(indent, "if value is None:")
        src.emit(indent + 1, f"{src.const(con, 'k')}._write_length(None, stream, '')")
        src.emit(indent, "else:")
        src.emit(indent + 1, "data = value.encode('utf-8')")
        if con.compact:
            src.emit(indent + 1, "write(encode_uvarint(len(data) + 1))")
        else:
            src.emit(indent + 1, "if len(data) > 0x7FFF:")
            src.emit(indent + 2, "raise ProtocolError('string longer than 32767 bytes')")
            src.emit(indent + 1, "write(_I16.pack(len(data)))")
        src.emit(indent + 1, "write(data)")
    elif type(con) is p.KArray:
        element = con.element
        src.emit(indent, f"items = {value}")
        src.emit(indent, "if items is None:")
        src.emit(indent + 1, f"{src.const(con, 'k')}._write_length(None, stream, '')")
        src.emit(indent, "else:")
        if con.compact:
            src.emit(indent + 1, "write(encode_uvarint(len(items) + 1))")
        else:
            src.emit(indent + 1, "write(_I32.pack(len(items)))")
        src.emit(indent + 1, f"element = {src.const(builder(element), 'b')}")
        src.emit(indent + 1, "for item in items:")
        src.emit(indent + 2, "element(item, stream, ctx)")
    elif type(con) is p.KStruct:
        src.emit(indent, f"{src.const(builder(con), 'b')}({value}, stream, ctx)")
    else:  # KBytes (external slices), and anything not compiled: the interpreter
        src.emit(indent, f"{src.const(con, 'k')}._build({value}, stream, ctx, '')")


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_UUID = p.uuid.UUID
_ZERO_BYTES = bytes(16)

_RUNTIME: dict[str, Any] = {
    "struct": struct,
    "Container": Container,
    "ListContainer": ListContainer,
    "ProtocolError": p.ProtocolError,
    "UnknownFieldError": p.UnknownFieldError,
    "ZERO_UUID": p.ZERO_UUID,
    "encode_uvarint": p.encode_uvarint,
    "_I16": _I16,
    "_I32": _I32,
    "_short": _short,
    "_uvarint": _uvarint,
    "_length": _length,
    "_string": _string,
    "_bytes": _bytes,
    "_uuid": _uuid,
    "_spend": _spend,
    "_tagged": _tagged,
    "_pack_error": _pack_error,
    "_value": _value,
}
