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
from fastavro import _read_py

from processor.errors import ConfigurationError, DecodeError
from processor.messages import limits
from processor.messages.base import jsonable
from processor.messages.fields import merge, prune
from processor.messages.json import json_object
from processor.topology.message_types import TRAITS


class AvroCodec:
    """Avro records written without a container header, one record per message.

    A payload decodes only if it is one whole record of the schema: bytes left over after
    the record are a DecodeError too (a common sign of a payload written with another schema).
    """

    name = "avro"
    traits = TRAITS["avro"]

    def __init__(self, schema: dict[str, Any], source: str = "<schema>") -> None:
        try:
            self._schema = fastavro.parse_schema(schema)
        except Exception as exc:  # fastavro raises many types for a bad schema
            raise ConfigurationError(f"{source}: not a valid Avro schema: {exc}") from exc
        self.source = source
        empty = _empty_items(schema)
        if empty:
            raise ConfigurationError(
                f"{source}: the array {empty!r} has items that take no bytes (null, an "
                "empty record or fixed): a payload of a few bytes could claim billions of "
                "them; give the items a type that takes a byte at least"
            )
        #: A recursive schema's records nest as deep as a payload says, a level a byte at
        #: least (a union's index, an array's count): fastavro's compiled reader would
        #: overflow the C stack on a long payload, so past SHORT bytes they are read by
        #: its Python reader, whose recursion Python bounds. Both are held to the limits.
        self._recursive = _recursive(schema)

    #: The longest payload of a recursive schema read by the compiled reader.
    SHORT = 1000

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
        reader = fastavro.schemaless_reader
        if self._recursive and len(data) > self.SHORT:
            reader = _read_py.schemaless_reader
        try:
            value = reader(buffer, self._schema, None)
        except RecursionError:
            raise limits.too_deep(f"byte {buffer.tell()}") from None
        except Exception as exc:  # fastavro: EOFError, ValueError, UnicodeDecodeError...
            raise DecodeError(
                f"the payload is not an Avro record of schema {self.source}: {exc!r}"
            ) from exc
        if buffer.tell() != len(data):
            raise DecodeError(
                f"the payload has {len(data) - buffer.tell()} bytes left over after one Avro "
                f"record of schema {self.source}; it was probably written with another schema"
            )
        if self._recursive:
            limits.check_tree(value, limits.MAX_DEPTH + 1, len(data))
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


_PRIMITIVES = frozenset(("boolean", "int", "long", "float", "double", "bytes", "string"))


def _names(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type of a schema (by name and full name)."""
    if isinstance(schema, list):
        for branch in schema:
            _names(branch, out)
    elif isinstance(schema, dict):
        if isinstance(schema.get("name"), str) and schema.get("type") in (
            "record", "error", "enum", "fixed",
        ):  # fmt: skip
            name, namespace = schema["name"], schema.get("namespace")
            out[name.rpartition(".")[2]] = out[name] = schema
            if namespace:
                out[f"{namespace}.{name}"] = schema
        for key in ("type", "items", "values"):
            if key in schema and not isinstance(schema[key], str):
                _names(schema[key], out)
        for field in schema.get("fields", ()) if isinstance(schema.get("fields"), list) else ():
            if isinstance(field, dict):
                _names(field.get("type"), out)
    return out


def _no_bytes(schema: Any, names: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    """Whether a value of ``schema`` can be written in no bytes."""
    if isinstance(schema, str):
        if schema == "null":
            return True
        if schema in _PRIMITIVES or schema in seen or schema not in names:
            return False
        return _no_bytes(names[schema], names, seen | {schema})
    if not isinstance(schema, dict):
        return False  # a union writes its branch's index
    kind = schema.get("type")
    if kind in ("record", "error"):
        return all(
            isinstance(f, dict) and _no_bytes(f.get("type"), names, seen)
            for f in schema.get("fields", ())
        )
    if kind == "fixed":
        return schema.get("size") == 0
    if isinstance(kind, dict | list) or kind == "null":
        return _no_bytes(kind, names, seen)
    return False


def _empty_items(schema: Any) -> str:
    """The name (or text) of an array of the schema whose items can take no bytes, or ''."""
    names = _names(schema, {})
    found = ""

    def visit(node: Any) -> None:
        nonlocal found
        if found:
            return
        if isinstance(node, list):
            for branch in node:
                visit(branch)
        elif isinstance(node, dict):
            if node.get("type") == "array" and _no_bytes(node.get("items"), names):
                found = json.dumps(node)[:80]
            for key in ("type", "items", "values"):
                if not isinstance(node.get(key), str | None):
                    visit(node[key])
            for field in node.get("fields", ()) if isinstance(node.get("fields"), list) else ():
                if isinstance(field, dict):
                    visit(field.get("type"))

    visit(schema)
    return found


def _recursive(schema: Any) -> bool:
    """Whether a named type of the schema refers to itself (directly or through others):
    a reference to a type whose definition encloses it (Avro names are defined before
    they are used, so that is the only way)."""

    def visit(node: Any, enclosing: frozenset[str]) -> bool:
        if isinstance(node, str):
            return node in enclosing or node.rpartition(".")[2] in enclosing
        if isinstance(node, list):
            return any(visit(branch, enclosing) for branch in node)
        if not isinstance(node, dict):
            return False
        if isinstance(node.get("name"), str) and node.get("type") in ("record", "error"):
            name = node["name"]
            enclosing = enclosing | {name, name.rpartition(".")[2]}
            if node.get("namespace"):
                enclosing = enclosing | {f"{node['namespace']}.{name}"}
        kind = node.get("type")
        if isinstance(kind, dict | list) and visit(kind, enclosing):
            return True
        if kind == "array" and visit(node.get("items"), enclosing):
            return True
        if kind == "map" and visit(node.get("values"), enclosing):
            return True
        fields = node.get("fields")
        return isinstance(fields, list) and any(
            isinstance(f, dict) and visit(f.get("type"), enclosing) for f in fields
        )

    return visit(schema, frozenset())
