"""The fix and nvfix message types: ``tag=value`` fields, each ended by a separator.

A FIX message's fields are named by numeric tags (``35=D``), an NVFIX message's by names
(``Symbol=IBM``); both are flat (spec 1.x: a FIX or NVFIX message is a root-less flat
fragment, so ``/55`` and ``/Symbol`` name fields). The field separator is SOH (``\\x01``)
as AMPS uses by default. Values are typed as AMPS's parser types them: an integer
(``24``), a float (``24.0``, ``1e3``), else a string; an empty value is NULL. A tag
given more than once is a repeated field: its value is the list of its values, in order
(a filter on it is existential, as on an array).

Building a message (projection, select lists, delta merge) writes each field once, in
the order given, and a list as the tag repeated; nested values have no FIX form and are
refused, as are a tag that is not one (empty, holding ``=`` or the separator; for fix,
not a number) and a value holding the separator, which would not read back. A
delta_publish's fields replace the stored ones, the others stay.
"""

from __future__ import annotations

from typing import Any

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec, typed_bytes
from processor.topology.message_types import TRAITS

#: Decoded tags by their bytes (a bounded cache: a dict is safe to share between threads).
_TAGS: dict[bytes, str] = {}
#: AMPS's default field separator.
SOH = b"\x01"


def _text(value: Any, name: str) -> bytes:
    """A value as field text; DecodeError for what FIX cannot carry."""
    if value is None:
        return b""
    if value is True or value is False:
        return b"true" if value else b"false"
    if isinstance(value, int | float | str):
        text = repr(value) if isinstance(value, float) else str(value)
        return text.encode()
    raise DecodeError(
        f"field {name!r} holds a {type(value).__name__}, which a tag=value message cannot "
        "carry: FIX and NVFIX fields are flat (numbers and strings)"
    )


class TagValueCodec(FieldsCodec):
    """FIX (numeric tags) or NVFIX (named fields); see the module doc. Thread-safe."""

    def __init__(self, name: str, separator: bytes = SOH) -> None:
        self.name = name
        self.traits = TRAITS[name]
        self.separator = separator
        self._numeric_tags = name == "fix"

    def decode(self, data: bytes) -> Any:
        fields: dict[str, Any] = {}
        #: A repeated tag's count of values, its list owned by this decode (appended to).
        repeats: dict[str, int] = {}
        parts = data.split(self.separator)
        if len(parts) > limits.MAX_VALUES:
            raise limits.too_many_values(len(parts))
        for number, field in enumerate(parts, start=1):
            if not field:
                continue  # the separator that ends the last field
            tag, equals, raw = field.partition(b"=")
            if not equals or not tag:
                raise DecodeError(
                    f"field {number} of the {self.name} message, {field[:40]!r}, is not "
                    "tag=value; fields are tag=value, each ended by the separator \\x01"
                )
            if self._numeric_tags and not tag.isdigit():
                raise DecodeError(
                    f"field {number} of the fix message has tag {tag[:20]!r}: FIX tags are "
                    "numbers (use nvfix for named fields)"
                )
            name = _TAGS.get(tag)
            if name is None:
                name = tag.decode("utf-8", errors="replace")
                if len(_TAGS) < 4096:  # tags repeat from message to message
                    _TAGS[tag] = name
            value = typed_bytes(raw, name)
            if name in fields:
                count = repeats.get(name, 1)
                if count == 1:
                    fields[name] = [fields[name], value]
                else:
                    fields[name].append(value)
                if count >= limits.MAX_REPEATS:
                    raise limits.too_many_repeats(name)
                repeats[name] = count + 1
            else:
                fields[name] = value
        return fields

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError(
                f"a {self.name} message is a set of fields, not a {type(value).__name__}"
            )
        parts: list[bytes] = []
        for name, field in value.items():
            tag = str(name).encode()
            if not tag or b"=" in tag or self.separator in tag:
                raise DecodeError(
                    f"{name!r} cannot be a {self.name} tag: a tag is not empty and has "
                    f"neither '=' nor the field separator {self.separator!r}"
                )
            if self._numeric_tags and not tag.isdigit():
                raise DecodeError(
                    f"{name!r} cannot be a fix tag: FIX tags are numbers (use nvfix for "
                    "named fields)"
                )
            for item in field if isinstance(field, list) else [field]:
                text = _text(item, str(name))
                if self.separator in text:
                    raise DecodeError(
                        f"field {name!r} holds the field separator {self.separator!r}, "
                        f"which a {self.name} value cannot contain"
                    )
                parts.append(tag + b"=" + text + self.separator)
        return b"".join(parts)
