"""The composite message types, composite-local and composite-global: a message made of
parts, each of its own declared message type (AMPS "Composite Messages").

The payload is the parts one after another, each preceded by its length, a 4-byte
unsigned big-endian integer (network byte order), as AMPS's composite message builders
write them. Parts after the declared ones are the message's unparsed payload: carried
as they are, never parsed. A binary part is not parsed either.

Fields:

* composite-local keeps each part's fields under its position: the first part's
  ``/name`` is ``/0/name``, the second's ``/1/name``. A part that is not parsed (binary,
  the unparsed payload) is an opaque value at its position: it matches no comparison and
  its text is Base64.
* composite-global reads the parts' fields as one message: ``/name`` is the field of the
  first part that has it. Its messages cannot be built from fields, so it takes no
  delta_publish, enrichment or preprocessing, and a view cannot produce it (as in AMPS,
  which refuses delta and views for composite-global).

The text form is a JSON array with one item per part: a part whose own text form is JSON
(json, bson, msgpack, bflat, avro, protobuf) as that JSON value, any other part as a
string of its text form (the fix, nvfix or xml text; Base64 for binary and for the
unparsed payload). A composite-local message can also be given as its field tree
(``{"0": {...}, "1": ...}``). A delta (composite-local) is a message of the type, or
its text form where a null item gives nothing for that part; each part's fields merge
as its own type's would.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from processor.errors import DecodeError
from processor.messages.base import jsonable, merge_fields
from processor.messages.fields import merge
from processor.topology.message_types import TRAITS

if TYPE_CHECKING:
    from processor.messages import Codec

_LENGTH = struct.Struct(">I")


class Unparsed:
    """A part that is not parsed (binary, the unparsed payload): opaque to filters; its
    text (``str``) is its Base64."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unparsed) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __str__(self) -> str:
        return base64.b64encode(self.data).decode()

    def __repr__(self) -> str:
        return f"Unparsed({self.data!r})"


def split(data: bytes) -> list[bytes]:
    """The parts of a composite payload; DecodeError when a length runs past the end."""
    parts: list[bytes] = []
    at, end = 0, len(data)
    while at < end:
        if end - at < _LENGTH.size:
            raise DecodeError(
                f"the composite message ends {end - at} bytes into the length of part "
                f"{len(parts)} (each part is preceded by a 4-byte big-endian length)"
            )
        (length,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        if length > end - at:
            raise DecodeError(
                f"part {len(parts)} of the composite message claims {length} bytes, and "
                f"{end - at} are left"
            )
        parts.append(data[at : at + length])
        at += length
    return parts


def join(parts: Sequence[bytes]) -> bytes:
    """A composite payload of ``parts``."""
    return b"".join(_LENGTH.pack(len(part)) + part for part in parts)


class CompositeCodec:
    """composite-local or composite-global over the part codecs; see the module doc.
    Thread-safe when its part codecs are."""

    def __init__(self, name: str, parts: tuple[Codec, ...]) -> None:
        self.name = name
        self.traits = TRAITS[name]
        self.parts = parts
        self._local = name == "composite-local"

    # -- decoding -------------------------------------------------------------------------

    def decode(self, data: bytes) -> Any:
        payloads = split(data)
        if len(payloads) < len(self.parts):
            raise DecodeError(
                f"a {self.name} message of this type has {len(self.parts)} parts "
                f"({', '.join(c.name for c in self.parts)}); this one has {len(payloads)}"
            )
        values = [self._part(index, payload) for index, payload in enumerate(payloads)]
        if self._local:
            return {str(index): value for index, value in enumerate(values)}
        tree: dict[str, Any] = {}
        for value in reversed(values):  # the first part that has a field wins
            if isinstance(value, dict):
                tree = merge(tree, value)
        return tree

    def _part(self, index: int, payload: bytes) -> Any:
        if index >= len(self.parts) or not self.parts[index].traits.parsed:
            return Unparsed(payload)
        try:
            return self.parts[index].decode(payload)
        except DecodeError as exc:
            raise DecodeError(f"part {index} ({self.parts[index].name}): {exc}") from exc

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        return self.decode

    # -- encoding -------------------------------------------------------------------------

    def encode_json(self, value: Any) -> bytes:
        if isinstance(value, list):
            return join([self._from_item(index, item) for index, item in enumerate(value)])
        if isinstance(value, dict) and self._local:
            return join(self._from_tree(value))
        form = "a JSON array of its parts" + (
            ", or an object of them by position" if self._local else ""
        )
        raise DecodeError(f"a {self.name} message is given as {form}")

    def _from_tree(self, tree: dict[str, Any]) -> list[bytes]:
        for name in tree:
            if not (name.isdigit() and name.isascii() and str(int(name)) == name):
                raise DecodeError(
                    f"field /{name} of a {self.name} message is not a part: its fields are "
                    "under their part's position (/0/name, /1/name...)"
                )
        payloads = []
        count = max(len(self.parts), 1 + max((int(name) for name in tree), default=-1))
        for index in range(count):
            value = tree.get(str(index))
            if isinstance(value, Unparsed):
                payloads.append(value.data)
            elif index >= len(self.parts):
                raise DecodeError(
                    f"field /{index} of a {self.name} message: part {index} is unparsed "
                    f"payload (the type declares {len(self.parts)} parts), not fields"
                )
            elif value is None and not self.parts[index].traits.parsed:
                payloads.append(b"")
            else:
                payloads.append(self._encode(index, value))
        return payloads

    def _encode(self, index: int, value: Any) -> bytes:
        if value is None:
            raise DecodeError(f"part {index} ({self.parts[index].name}) of the message is missing")
        try:
            return self.parts[index].encode_json(value)
        except DecodeError as exc:
            raise DecodeError(f"part {index} ({self.parts[index].name}): {exc}") from exc

    def _from_item(self, index: int, item: Any) -> bytes:
        """A part's payload from its item of the text form."""
        codec = self.parts[index] if index < len(self.parts) else None
        if codec is not None and codec.traits.json_text and codec.traits.parsed:
            return self._encode(index, item)
        if not isinstance(item, str):
            kind = "Base64 text" if codec is None or not codec.traits.parsed else "its text"
            raise DecodeError(f"part {index} of the message text is given as {kind}")
        if codec is None or not codec.traits.parsed:
            try:
                return base64.b64decode(item, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise DecodeError(f"part {index} is given as Base64 text: {exc}") from exc
        try:
            return codec.from_text(item.encode())
        except DecodeError as exc:
            raise DecodeError(f"part {index} ({codec.name}): {exc}") from exc

    # -- text form ------------------------------------------------------------------------

    def from_text(self, text: bytes) -> bytes:
        data = self.encode_json(self._items(text, "the message text"))
        self.decode(data)
        return data

    def to_text(self, data: bytes) -> bytes:
        items: list[Any] = []
        for index, payload in enumerate(split(data)):
            codec = self.parts[index] if index < len(self.parts) else None
            if codec is None or not codec.traits.parsed:
                items.append(base64.b64encode(payload).decode())
            elif codec.traits.json_text:
                items.append(orjson.loads(codec.to_text(payload)))
            else:
                items.append(codec.to_text(payload).decode("utf-8", errors="replace"))
        return orjson.dumps(items)

    def text_of(self, value: Any) -> bytes:
        return orjson.dumps(value, default=jsonable)

    def _items(self, text: bytes, what: str) -> list[Any]:
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"{what} is not valid JSON: {exc}") from exc
        if not isinstance(items, list):
            raise DecodeError(
                f"{what} of a {self.name} message is a JSON array of its parts, "
                f"not a {type(items).__name__}"
            )
        return items

    # -- delta ----------------------------------------------------------------------------

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if not self.traits.delta:
            raise DecodeError(
                f"{self.name} messages take no delta_publish (as in AMPS): their parts' "
                "fields are one tree, which cannot be split back into parts; publish the "
                "whole message"
            )
        if not text_form:
            return self.decode(data)
        given: dict[str, Any] = {}
        for index, item in enumerate(self._items(data, "the delta text")):
            codec = self.parts[index] if index < len(self.parts) else None
            if item is None:
                continue
            if codec is not None and codec.traits.parsed and codec.traits.json_text:
                given[str(index)] = codec.decode_delta(orjson.dumps(item), True)
            else:
                given[str(index)] = self._part(index, self._from_item(index, item))
        return given

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        return merge_fields(self, stored, delta, text_form)
