"""The msgpack message type (the ``msgpack`` package): a MessagePack map per message.

MessagePack carries its types: integers (up to 64 bits, signed or unsigned), floats,
strings, booleans, nil (null), maps (objects, ``/a/b``) and arrays (``/a[0]``; a filter
on an array is existential). A map's keys are field names: a key that is not a string
(an integer, a binary) is read as its text, as AMPS names every field by text; a map
or an array as a key is refused. A binary
value (bin) is kept as bytes: a filter compares it as its UTF-8 text, and its text form
is Base64, as bson's binary. An extension type (ext) is refused: it has no field value.

The text form (the command line, ``text_form`` publishes and deltas) is JSON: a JSON
object becomes a map of the same fields. A delta is a map (or JSON text); every field
it gives replaces the stored one, a null too (as json).
"""

from __future__ import annotations

from typing import Any

import msgpack
import orjson

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec, jsonable
from processor.messages.json import json_object
from processor.topology.message_types import TRAITS

#: The first bytes of maps and arrays (fixmap, fixarray, array 16/32, map 16/32).
_CONTAINERS = bytes(range(0x80, 0xA0)) + bytes(range(0xDC, 0xE0))


def _named(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """A map's pairs as fields named by text (msgpack's ``object_pairs_hook``)."""
    return {key if isinstance(key, str) else _key_text(key): value for key, value in pairs}


def _key_text(key: Any) -> str:
    if isinstance(key, dict | list | tuple):
        raise DecodeError(
            f"a map key of the payload is a {'map' if isinstance(key, dict) else 'array'}; "
            "a field is named by a string (or a number, a binary, a boolean)"
        )
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")
    if isinstance(key, bool) or key is None:
        return orjson.dumps(key).decode()
    return str(key)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(
        f"the payload holds a MessagePack extension value (type {code}), which has no "
        "field value; publish standard MessagePack types"
    )


class MsgpackCodec(FieldsCodec):
    """MessagePack maps; see the module doc. Thread-safe."""

    name = "msgpack"
    traits = TRAITS["msgpack"]

    def decode(self, data: bytes) -> Any:
        try:
            value = msgpack.unpackb(
                data,
                raw=False,
                strict_map_key=False,
                object_pairs_hook=_named,
                ext_hook=_refuse_ext,
                # Each value takes one byte at least: a payload cannot claim more.
                max_array_len=len(data),
                max_map_len=len(data),
            )
        except DecodeError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise DecodeError(f"the payload is not a MessagePack message: {exc}") from exc
        if not isinstance(value, dict):
            raise DecodeError(f"a msgpack message must be a map, got a {type(value).__name__}")
        # A map or an array opens with one of _CONTAINERS' bytes; a value takes a byte.
        containers = len(data) - len(data.translate(None, _CONTAINERS))
        limits.check_tree(value, containers, len(data))
        return value

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError(f"a msgpack message is a map, not a {type(value).__name__}")
        try:
            return bytes(msgpack.packb(value, use_bin_type=True, datetime=False))
        except (ValueError, TypeError, OverflowError) as exc:
            raise DecodeError(f"the value has no MessagePack form: {exc}") from exc

    def from_text(self, text: bytes) -> bytes:
        return self.encode_json(json_object(text, "the message text", "a msgpack message"))

    def to_text(self, data: bytes) -> bytes:
        return orjson.dumps(self.decode(data), default=jsonable)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if text_form:
            return json_object(data, "the delta text", "a msgpack delta")
        return self.decode(data)
