"""The avro message type: schemaless Avro binary (fastavro), schema from an .avsc file.

delta_publish on avro (spec 3.3): a delta is given either

* as JSON text (the message's text form): the fields present in the JSON object are
  given, the others are not; or
* as an Avro record of the topic's schema: every field is given except those whose value
  is null, so a binary delta can leave out only fields the schema makes nullable (a union
  with "null"), and cannot set a field to null (a delta never removes a value).

The merged record must be a whole record of the schema: a delta for a key with no stored
record that leaves out a field with no default is refused (MessageError) with the field's
name, since Avro cannot store a partial record.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import orjson

from processor.errors import ConfigurationError, DecodeError
from processor.messages.base import jsonable
from processor.messages.fields import merge, prune
from processor.messages.json import json_object


class AvroCodec:
    """Avro records written without a container header, one record per message.

    A payload decodes only if it is one whole record of the schema: bytes left over after
    the record are a DecodeError too (a common sign of a payload written with another schema).
    """

    name = "avro"

    def __init__(self, schema: dict[str, Any], source: str = "<schema>") -> None:
        try:
            self._schema = fastavro.parse_schema(schema)
        except Exception as exc:  # fastavro raises many types for a bad schema
            raise ConfigurationError(f"{source}: not a valid Avro schema: {exc}") from exc
        self.source = source

    @classmethod
    def from_file(cls, path: str) -> AvroCodec:
        """Load the schema from an .avsc file."""
        try:
            schema = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read Avro schema {path}: {exc}") from exc
        return cls(schema, source=path)

    def decode(self, data: bytes) -> Any:
        buffer = io.BytesIO(data)
        try:
            value = fastavro.schemaless_reader(buffer, self._schema, None)
        except Exception as exc:  # fastavro: EOFError, ValueError, UnicodeDecodeError...
            raise DecodeError(
                f"the payload is not an Avro record of schema {self.source}: {exc!r}"
            ) from exc
        if buffer.tell() != len(data):
            raise DecodeError(
                f"the payload has {len(data) - buffer.tell()} bytes left over after one Avro "
                f"record of schema {self.source}; it was probably written with another schema"
            )
        return value

    def encode_json(self, value: Any) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._schema, value, strict_allow_default=True)
        except Exception as exc:  # fastavro: ValueError, TypeError, KeyError...
            raise DecodeError(f"the value does not fit Avro schema {self.source}: {exc}") from exc
        return buffer.getvalue()

    def from_text(self, text: bytes) -> bytes:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"the message text is not valid JSON: {exc}") from exc
        return self.encode_json(value)

    def to_text(self, data: bytes) -> bytes:
        return orjson.dumps(self.decode(data), default=jsonable)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if not text_form:
            return self.decode(data)
        return json_object(data, "the delta text", "an avro delta")

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        """See the module doc for which fields a delta gives."""
        fields = self.decode_delta(delta, text_form)
        if stored is None:
            value = fields if text_form else prune(fields, _not_null)
        else:
            value = merge(self.decode(stored), fields, None if text_form else _not_null)
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._schema, value, strict_allow_default=True)
        except Exception as exc:  # fastavro: ValueError, TypeError, KeyError...
            where = "with no stored record, " if stored is None else ""
            raise DecodeError(
                f"the delta merged into the stored record is not a record of Avro schema "
                f"{self.source}: {exc}; {where}a delta must give every field the schema "
                "requires (one without a default), since Avro cannot store a partial record"
            ) from exc
        return buffer.getvalue()

    def text_of(self, value: Any) -> bytes:
        return orjson.dumps(value, default=jsonable)

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        return self.decode


def _not_null(value: Any) -> bool:
    return value is not None
