"""What the message types whose payloads decode to a tree of fields share.

:class:`FieldsCodec` is the codec interface's behaviour for a type whose message text is
the payload itself (json, fix, nvfix, xml): the text form is the payload, a delta is a
message of the type, and a delta_publish merges field by field
(:func:`processor.messages.fields.merge`). Subclasses give ``name``, :meth:`decode` and
:meth:`encode_json`; a type whose text form is not its payload (bson) overrides the text
methods too.

:func:`typed_text` types a value given as text the way AMPS's parsers for text formats
do (spec 1.5): an integer, a float, else the string; empty text is NULL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from processor.messages import limits
from processor.messages.fields import merge
from processor.topology.message_types import MessageTraits

# ASCII digits only: AMPS reads bytes, so other scripts' digits are text, not numbers.
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)", re.ASCII)


def typed_text(raw: str, where: str = "") -> Any:
    """A text value as AMPS types it: ``24`` an integer, ``24.0`` or ``1e3`` a float
    (ASCII digits only), anything else the string itself; empty text is NULL (None). An
    integer outside 64 bits is a DecodeError naming ``where`` (the field)."""
    if not raw:
        return None
    first = raw[0]
    if first.isdigit() or first in "+-.":
        if _INTEGER.fullmatch(raw):
            return int(raw) if len(raw) < 19 else limits.integer(raw, where)
        if _FLOAT.fullmatch(raw):
            return float(raw)
    return raw


_INTEGER_BYTES = re.compile(rb"[+-]?\d+")
_FLOAT_BYTES = re.compile(rb"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")
_NUMBER_START = frozenset(b"0123456789+-.")


def typed_bytes(raw: bytes, where: str = "") -> Any:
    """:func:`typed_text` of UTF-8 bytes, without decoding a number first."""
    if not raw:
        return None
    if raw[0] in _NUMBER_START:
        if _INTEGER_BYTES.fullmatch(raw):
            return int(raw) if len(raw) < 19 else limits.integer(raw.decode(), where)
        if _FLOAT_BYTES.fullmatch(raw):
            return float(raw)
    return raw.decode("utf-8", errors="replace")


def jsonable(value: Any) -> Any:
    """JSON for the values JSON lacks (Avro and BSON types): bytes as Base64, the rest
    as their text."""
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode()
    return str(value)


def merge_fields(codec: Any, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
    """delta_publish for a codec whose messages are trees of fields: the stored message
    with every field the delta gives merged in (:func:`processor.messages.fields.merge`),
    encoded again (``codec``: its decode, decode_delta and encode_json)."""
    given = codec.decode_delta(delta, text_form)
    if stored is None:
        return delta if not text_form else codec.encode_json(given)
    merged = merge(codec.decode(stored), given)
    # Each side is within the limits, and a merge nests no deeper than its sides, but
    # their values add up: the stored result must decode again.
    limits.check_tree(merged, 0, len(stored) + len(delta))
    return bytes(codec.encode_json(merged))


class FieldsCodec:
    """Base of the codecs whose text form is the payload (see the module doc)."""

    name: str
    traits: MessageTraits

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def encode_json(self, value: Any) -> bytes:
        raise NotImplementedError

    def from_text(self, text: bytes) -> bytes:
        self.decode(text)
        return text

    def to_text(self, data: bytes) -> bytes:
        return data

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        return self.decode(data)

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        """Every field of the delta is given (a null too: it sets the field to null)."""
        return merge_fields(self, stored, delta, text_form)

    def text_of(self, value: Any) -> bytes:
        return orjson.dumps(value, default=jsonable)

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        return self.decode
