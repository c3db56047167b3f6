"""The binary message type: payloads are opaque; the publisher provides the SowKey."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from processor.errors import DecodeError
from processor.topology.message_types import TRAITS


class BinaryCodec:
    """Opaque bytes. On the command line a binary payload is given as Base64 text."""

    name = "binary"
    traits = TRAITS["binary"]

    def decode(self, data: bytes) -> Any:
        return data

    def encode_json(self, value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except ValueError as exc:
                raise DecodeError(f"a binary payload is given as Base64 text: {exc}") from exc
        raise DecodeError("a binary payload is given as Base64 text")

    def from_text(self, text: bytes) -> bytes:
        return self.encode_json(text.decode("ascii", errors="replace").strip())

    def to_text(self, data: bytes) -> bytes:
        return base64.b64encode(data)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        raise _no_fields("delta_publish cannot merge them; publish the whole message")

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        raise _no_fields("delta_publish cannot merge them; publish the whole message")

    def text_of(self, value: Any) -> bytes:
        raise _no_fields("they cannot be given as a select list or a delta")

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        return self.decode


def _no_fields(consequence: str) -> DecodeError:
    return DecodeError(f"binary messages are opaque bytes without fields, so {consequence}")
