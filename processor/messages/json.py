"""The json message type (orjson)."""

from __future__ import annotations

from typing import Any

import orjson

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec
from processor.topology.message_types import TRAITS


def json_object(data: bytes, what: str, kind: str) -> dict[str, Any]:
    """``data`` as a JSON object; DecodeError naming ``what`` (the payload, the delta
    text) when it is not JSON, or ``kind`` when it is JSON but not an object, or when it
    is past a limit (:mod:`processor.messages.limits`; orjson reads an integer outside
    64 bits as a float)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise DecodeError(f"{kind} must be a JSON object, got a {type(value).__name__}")
    # Every object and array opens with a bracket, and every value takes a byte.
    limits.check_tree(value, data.count(b"{") + data.count(b"["), len(data))
    return value


class JsonCodec(FieldsCodec):
    """JSON objects. A payload that is not a JSON object is a DecodeError."""

    name = "json"
    traits = TRAITS["json"]

    def decode(self, data: bytes) -> Any:
        return json_object(data, "the payload", "a json message")

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError("a json message must be a JSON object")
        return orjson.dumps(value)
