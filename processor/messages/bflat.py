"""The bflat message type: AMPS's typed binary tag/value format (BFlat).

The format as 60East's open-source BFlat libraries (github.com/60East/bflat) read and
write it. A message is a sequence of fields, each:

* one lead byte: bit 7 set for an array; bits 3-6 the value type (0 null, 1 string,
  2 binary, 3 int8, 4 int16, 5 int32, 6 int64, 7 double, 8 datetime, 9 leb128); bits 0-2
  the tag's length in bytes, or 0 when an unsigned LEB128 length follows;
* the tag bytes (UTF-8), then for an array its element count (unsigned LEB128);
* each value: strings and binaries as an unsigned LEB128 length and the bytes; int8 to
  int64, double and datetime (milliseconds since the epoch, an int64) as fixed-width
  little-endian; leb128 as a signed LEB128; null as nothing.

BFlat is flat like NVFIX: ``/name`` addresses a field; an array is a list (a filter on it
is existential); a tag given twice is a repeated field (a list). Values keep their types:
integers of every width and datetimes read as integers, doubles as floats, strings as
text, binaries as bytes. Building a message writes each value in its most compact type
(as BFlat serializers do), booleans as int8 0/1, NULL as null, a list as an array of one
type (mixed integer widths widen, integers mixed with floats become doubles); nested
values have no BFlat form and are refused.
"""

from __future__ import annotations

import struct
from typing import Any

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec
from processor.topology.message_types import TRAITS

NULL, STRING, BINARY, INT8, INT16, INT32, INT64, DOUBLE, DATETIME, LEB128 = range(10)
_ARRAY = 0x80
_FIXED = {
    INT8: struct.Struct("<b"),
    INT16: struct.Struct("<h"),
    INT32: struct.Struct("<i"),
    INT64: struct.Struct("<q"),
    DOUBLE: struct.Struct("<d"),
    DATETIME: struct.Struct("<q"),
}
#: Decoded tags by their bytes (a bounded cache: a dict is safe to share between threads).
_TAGS: dict[bytes, str] = {}
_INLINE = {kind: (fixed.unpack_from, fixed.size) for kind, fixed in _FIXED.items()}
_INT_RANGES = ((INT8, 1 << 7), (INT16, 1 << 15), (INT32, 1 << 31), (INT64, 1 << 63))


def _unsigned(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DecodeError("a LEB128 number of the bflat message is longer than 64 bits")


def _signed(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return (value - (1 << shift) if byte & 0x40 else value), pos
        if shift > 133:
            raise DecodeError("a leb128 value of the bflat message is longer than 128 bits")


def _put_unsigned(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_signed(value: int, out: bytearray) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            out.append(byte)
            return
        out.append(byte | 0x80)


def _value(data: bytes, pos: int, kind: int) -> tuple[Any, int]:
    if kind in (STRING, BINARY):
        length, pos = _unsigned(data, pos)
        end = pos + length
        if end > len(data):
            raise IndexError
        raw = data[pos:end]
        return (raw.decode("utf-8", errors="replace") if kind == STRING else raw), end
    if kind == LEB128:
        value, pos = _signed(data, pos)
        return limits.check_integer(value, f"the leb128 value ending at byte {pos}"), pos
    if kind == NULL:
        return None, pos
    fixed = _FIXED.get(kind)
    if fixed is None:
        raise DecodeError(f"the bflat message has a field of unknown type {kind}")
    return fixed.unpack_from(data, pos)[0], pos + fixed.size


def _repeat(fields: dict[str, Any], repeats: dict[str, int], tag: str, value: Any) -> None:
    """Add one more value of a tag already read: its values become a list (an array's
    elements and the values after it, as the format's readers give them), appended to in
    place so that repeats cost linear time."""
    count = repeats.get(tag)
    if count is None:
        held = fields[tag]
        fields[tag] = [*held, value] if isinstance(held, list) else [held, value]
        count = 1
    else:
        fields[tag].append(value)
    if count >= limits.MAX_REPEATS:
        raise limits.too_many_repeats(tag)
    repeats[tag] = count + 1


def _kind(value: Any, name: str) -> int:
    """The most compact BFlat type of one value."""
    if value is None:
        return NULL
    if value is True or value is False:
        return INT8
    if isinstance(value, int):
        for kind, bound in _INT_RANGES:
            if -bound <= value < bound:
                return kind
        limits.check_integer(value, f"field {name!r}")
        return LEB128
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes | bytearray):
        return BINARY
    raise DecodeError(
        f"field {name!r} holds a {type(value).__name__}, which a bflat message cannot carry: "
        "BFlat fields are flat (numbers, strings, binaries, arrays of one type)"
    )


def _array_kind(items: list[Any], name: str) -> int:
    kinds = {_kind(item, name) for item in items} - {NULL}
    if not kinds:
        return NULL
    if len(kinds) == 1:
        return kinds.pop()
    if kinds <= {INT8, INT16, INT32, INT64, LEB128}:
        return max(kinds)
    if kinds <= {INT8, INT16, INT32, INT64, DOUBLE}:
        return DOUBLE
    raise DecodeError(f"array {name!r} mixes values of different kinds; BFlat arrays have one")


def _write(kind: int, value: Any, out: bytearray) -> None:
    if value is None and kind != NULL:
        raise DecodeError("a bflat array of values cannot hold NULL among them")
    if kind in (STRING, BINARY):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        _put_unsigned(len(raw), out)
        out += raw
    elif kind == LEB128:
        _put_signed(int(value), out)
    elif kind != NULL:
        out += _FIXED[kind].pack(float(value) if kind == DOUBLE else int(value))


class BflatCodec(FieldsCodec):
    """BFlat messages; see the module doc. Thread-safe."""

    name = "bflat"
    traits = TRAITS["bflat"]

    def decode(self, data: bytes) -> Any:
        fields: dict[str, Any] = {}
        #: A repeated tag's count of values, its list owned by this decode (appended to).
        repeats: dict[str, int] = {}
        pos, end = 0, len(data)
        values = 0  # array elements (a field takes a byte at least: len(data) bounds them)
        try:
            while pos < end:
                lead = data[pos]
                pos += 1
                length = lead & 0x07
                if not length:
                    length, pos = _unsigned(data, pos)
                    if not length:
                        raise DecodeError(f"the bflat field at byte {pos} has an empty tag")
                if pos + length > end:
                    raise IndexError
                raw = data[pos : pos + length]
                tag = _TAGS.get(raw)
                if tag is None:
                    tag = raw.decode("utf-8", errors="replace")
                    if len(_TAGS) < 4096:  # tags repeat from message to message
                        _TAGS[raw] = tag
                pos += length
                kind = (lead >> 3) & 0x0F
                if lead & _ARRAY:
                    count, pos = _unsigned(data, pos)
                    values += count
                    if kind == NULL:  # a NULL takes no bytes: only a limit bounds them
                        if count > limits.MAX_REPEATS:
                            raise DecodeError(
                                f"array {tag[:80]!r} holds {count} NULLs, more than "
                                f"{limits.MAX_REPEATS} (the limit of repeats: a NULL takes "
                                "no bytes, so nothing else bounds them)"
                            )
                        value: Any = [None] * count
                    elif count > end - pos:  # every other value takes a byte at least
                        raise IndexError
                    else:
                        value = []
                        for _ in range(count):
                            item, pos = _value(data, pos, kind)
                            value.append(item)
                elif kind in _INLINE:  # the common scalars, without a call per value
                    unpack, size = _INLINE[kind]
                    value = unpack(data, pos)[0]
                    pos += size
                elif kind == STRING and data[pos] < 0x80:  # a string under 128 bytes
                    end_of = pos + 1 + data[pos]
                    if end_of > end:
                        raise IndexError
                    value = data[pos + 1 : end_of].decode("utf-8", errors="replace")
                    pos = end_of
                else:
                    value, pos = _value(data, pos, kind)
                if tag in fields:
                    _repeat(fields, repeats, tag, value)
                else:
                    fields[tag] = value
        except (IndexError, struct.error):
            raise DecodeError(
                f"the bflat message ends inside a field (at byte {pos} of {end})"
            ) from None
        if pos != end:
            raise DecodeError(f"the bflat message ends inside a field (at byte {pos} of {end})")
        if values > limits.MAX_VALUES - end:  # (a field takes two bytes at least)
            values += len(fields) + sum(repeats.values())
            if values > limits.MAX_VALUES:
                raise limits.too_many_values(values)
        return fields

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError(f"a bflat message is a set of fields, not a {type(value).__name__}")
        out = bytearray()
        for name, field in value.items():
            tag = str(name).encode()
            if not tag:
                raise DecodeError("a bflat field needs a non-empty tag")
            is_array = isinstance(field, list)
            kind = _array_kind(field, str(name)) if is_array else _kind(field, str(name))
            lead = (kind << 3) | (_ARRAY if is_array else 0)
            if 0 < len(tag) < 8:
                out.append(lead | len(tag))
            else:
                out.append(lead)
                _put_unsigned(len(tag), out)
            out += tag
            if is_array:
                _put_unsigned(len(field), out)
                for item in field:
                    _write(kind, item, out)
            else:
                _write(kind, field, out)
        return bytes(out)

    def from_text(self, text: bytes) -> bytes:
        from processor.messages.json import json_object

        return self.encode_json(json_object(text, "the message text", "a bflat message"))

    def to_text(self, data: bytes) -> bytes:
        return self.text_of(self.decode(data))

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if text_form:
            from processor.messages.json import json_object

            return json_object(data, "the delta text", "a bflat delta")
        return self.decode(data)
