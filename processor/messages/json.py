"""The json message type (orjson)."""

from __future__ import annotations

from typing import Any

import orjson

from processor.errors import DecodeError
from processor.messages.fields import merge


def json_object(data: bytes, what: str, kind: str) -> dict[str, Any]:
    """``data`` as a JSON object; DecodeError naming ``what`` (the payload, the delta
    text) when it is not JSON, or ``kind`` when it is JSON but not an object."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise DecodeError(f"{kind} must be a JSON object, got a {type(value).__name__}")
    return value


class JsonCodec:
    """JSON objects. A payload that is not a JSON object is a DecodeError."""

    name = "json"

    def decode(self, data: bytes) -> Any:
        return json_object(data, "the payload", "a json message")

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError("a json message must be a JSON object")
        return orjson.dumps(value)

    def from_text(self, text: bytes) -> bytes:
        self.decode(text)
        return text

    def to_text(self, data: bytes) -> bytes:
        return data

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        return self.decode(data)

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        """Every field of the JSON delta is given (a null too: it sets the field to null)."""
        given = self.decode(delta)
        if stored is None:
            return delta
        return orjson.dumps(merge(self.decode(stored), given))

    def text_of(self, value: Any) -> bytes:
        return orjson.dumps(value)
