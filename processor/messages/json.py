"""The json message type (orjson)."""

from __future__ import annotations

from typing import Any

import orjson

from processor.errors import DecodeError


class JsonCodec:
    """JSON objects. A payload that is not a JSON object is a DecodeError."""

    name = "json"

    def decode(self, data: bytes) -> Any:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"the payload is not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise DecodeError(f"a json message must be a JSON object, got a {type(value).__name__}")
        return value

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError("a json message must be a JSON object")
        return orjson.dumps(value)

    def from_text(self, text: bytes) -> bytes:
        self.decode(text)
        return text

    def to_text(self, data: bytes) -> bytes:
        return data
