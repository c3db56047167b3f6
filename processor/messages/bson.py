"""The bson message type (the ``bson`` package of pymongo): a BSON document per message.

BSON carries its types: int32 and int64 are integers, doubles floats, strings, booleans,
null, embedded documents (objects, ``/a/b``) and arrays (``/a[0]``; a filter on an array
is existential). Types JSON lacks (ObjectId, datetime, Decimal128, binary...) are kept as
decoded: a filter comparing them with a literal finds no match, and their text form is
their string (binary: Base64).

The text form (the command line, ``text_form`` publishes and deltas) is JSON: a JSON
object becomes a BSON document of the same fields. A delta is a document (or JSON
text); every field it gives replaces the stored one, a null too.
"""

from __future__ import annotations

from typing import Any

import bson
import orjson
from bson.errors import BSONError

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec, jsonable
from processor.messages.json import json_object
from processor.topology.message_types import TRAITS


class BsonCodec(FieldsCodec):
    """BSON documents; see the module doc. Thread-safe."""

    name = "bson"
    traits = TRAITS["bson"]

    def decode(self, data: bytes) -> Any:
        try:
            value = bson.decode(data)
        except (BSONError, ValueError, TypeError, IndexError, RecursionError) as exc:
            raise DecodeError(f"the payload is not a BSON document: {exc}") from exc
        # An embedded document or array is announced by a type byte, 3 or 4; an element
        # takes two bytes at least (its type and the end of its name).
        containers = 1 + data.count(b"\x03") + data.count(b"\x04")
        limits.check_tree(value, containers, len(data) // 2)
        return value

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError(f"a bson message is a document, not a {type(value).__name__}")
        try:
            return bytes(bson.encode(value))
        except (BSONError, ValueError, TypeError, OverflowError) as exc:
            raise DecodeError(f"the value has no BSON form: {exc}") from exc

    def from_text(self, text: bytes) -> bytes:
        return self.encode_json(json_object(text, "the message text", "a bson message"))

    def to_text(self, data: bytes) -> bytes:
        return orjson.dumps(self.decode(data), default=jsonable)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if text_form:
            return json_object(data, "the delta text", "a bson delta")
        return self.decode(data)
