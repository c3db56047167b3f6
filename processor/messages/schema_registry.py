"""The Schema Registry wire format: ``avro-sr``, ``protobuf-sr`` and ``json-sr``
(docs/schema-registry.md).

A payload is the magic byte 0, the writer schema's id (4 bytes, big-endian), for
protobuf the message indexes (zigzag varints: their count, then the path of the message
type in the .proto file; a lone 0 is the first message), then the body: Avro binary, a
protobuf message, JSON text. The schema of an id comes from the topic's registry
(:mod:`processor.messages.registry`, cached); the body is read by the native type's
codec built from it (:class:`~processor.messages.avro.AvroCodec`,
:class:`~processor.messages.protobuf.ProtobufCodec`, json checked against its JSON
Schema), so the fields, the limits and the errors are the native type's.

A message kafka-sow builds from fields (JSON text published, enrichment, preprocessing)
is written with the latest version of the topic's subject (protobuf: the message type
``schema_registry.message`` names, else the file's first). A delta_publish merged into a
stored record keeps the stored record's schema id (its writer schema) when the delta is
JSON text or a payload of the same id; a delta payload of another id (the producer moved
to a newer schema) is merged into the stored fields as a record of the delta's schema,
and written with its id. A partial message (a select list, a
delta subscription) is not a record of a schema: it travels as JSON text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson

from processor.errors import ConfigurationError, DecodeError
from processor.messages.base import jsonable
from processor.messages.json import JsonCodec, json_object
from processor.messages.registry import Registry
from processor.topology.message_types import TRAITS

MAGIC = 0
#: What the registry calls each type's schemas.
_SCHEMA_TYPE = {"avro-sr": "AVRO", "protobuf-sr": "PROTOBUF", "json-sr": "JSON"}
#: The deepest message index path read (a message type nested this deep is not real).
_MAX_INDEXES = 64


class RegistryCodec:
    """One topic's messages in the wire format above; thread-safe."""

    def __init__(
        self, name: str, registry: Registry, subject: str, message: str = "", where: str = ""
    ) -> None:
        self.name = name
        self.traits = TRAITS[name]
        self.registry = registry
        self.subject = subject
        self._schema_type = _SCHEMA_TYPE[name]
        if message and self._schema_type != "PROTOBUF":
            raise ConfigurationError(
                f"{where}: schema_registry.message names a protobuf message type; "
                f"{name} messages have one type per schema, so leave it out"
            )
        #: protobuf: the message type the messages it builds are ("": the file's first).
        self.message = message
        #: The codec of each frame seen (the registry's cache, without its key).
        self._inners: dict[bytes, Any] = {}
        #: protobuf schemas are asked for as a base64 FileDescriptorProto, not .proto text.
        self._format = "serialized" if self._schema_type == "PROTOBUF" else None

    # -- reading ---------------------------------------------------------------------

    def split(self, data: bytes) -> tuple[bytes, Any, bytes]:
        """The frame (magic byte, id, indexes), the codec of its schema, and the body."""
        if len(data) < 5 or data[0] != MAGIC:
            first = f"byte {data[0]}" if data else "nothing"
            raise DecodeError(
                f"the payload is not in the Schema Registry wire format: it starts with "
                f"{first}, not the magic byte 0 followed by a 4-byte schema id (topic type "
                f"{self.name}; the producer must use a Schema Registry serializer)"
            )
        schema_id = int.from_bytes(data[1:5], "big")
        end = 5
        path: tuple[int, ...] = ()
        if self._schema_type == "PROTOBUF":
            path, end = _indexes(data, 5)
        frame = data[:end]
        inner = self._inners.get(frame)
        if inner is None:
            inner = self.registry.built(
                (self.name, schema_id, path), lambda: self._inner(schema_id, path)
            )
            self._inners[frame] = inner
        return frame, inner, data[end:]

    def decode(self, data: bytes) -> Any:
        _, inner, body = self.split(data)
        return inner.decode(body)

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        """The native codec's key decoder of each schema (protobuf's reads the Key fields
        alone), one per frame."""
        decoders: dict[bytes, Callable[[bytes], Any]] = {}

        def key_fields(data: bytes) -> Any:
            frame, inner, body = self.split(data)
            decode = decoders.get(frame)
            if decode is None:
                decode = decoders.setdefault(frame, inner.key_decoder(paths))
            return decode(body)

        return key_fields

    def to_text(self, data: bytes) -> bytes:
        return orjson.dumps(self.decode(data), default=jsonable)

    def text_of(self, value: Any) -> bytes:
        return orjson.dumps(value, default=jsonable)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if text_form:
            return json_object(data, "the delta text", f"a delta of a {self.name} topic")
        _, inner, body = self.split(data)
        return inner.decode_delta(body, False)

    # -- writing ---------------------------------------------------------------------

    def encode_json(self, value: Any) -> bytes:
        frame, inner = self._latest()
        return frame + bytes(inner.encode_json(value))

    def from_text(self, text: bytes) -> bytes:
        return self.encode_json(
            json_object(text, "the message text", f"a message of a {self.name} topic")
        )

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        """Written with the stored record's schema id, or a delta payload's own when it
        is another (see the module doc)."""
        if stored is None:
            if text_form:
                frame, inner = self._latest()
                return frame + bytes(inner.merge(None, delta, True))
            self.decode(delta)
            return delta
        frame, inner, body = self.split(stored)
        if text_form:
            return frame + bytes(inner.merge(body, delta, True))
        delta_frame, delta_inner, delta_body = self.split(delta)
        if delta_frame == frame:
            return frame + bytes(inner.merge(body, delta_body, False))
        # Another schema (the producer's newer one): the stored fields become a record of
        # it, and the delta merges into that.
        stored_text = orjson.dumps(inner.decode(body), default=jsonable)
        rebased = delta_inner.merge(None, stored_text, True)
        return delta_frame + bytes(delta_inner.merge(rebased, delta_body, False))

    def _latest(self) -> tuple[bytes, Any]:
        """The frame and codec of the subject's latest version (cached by the client)."""
        registered = self.registry.call(
            f"latest version of subject {self.subject!r}",
            lambda: self.registry.client.get_latest_version(self.subject, fmt=self._format),
        )
        schema_id = registered.schema_id
        if schema_id is None:
            raise DecodeError(f"the Schema Registry gave no id for subject {self.subject!r}")
        frame = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
        path: tuple[int, ...] = ()
        if self._schema_type == "PROTOBUF":
            path = self.registry.built(
                ("path", schema_id, self.message),
                lambda: self._message_path(registered.schema, schema_id),
            )
            frame += _zigzag_indexes(path)
        inner = self.registry.built(
            (self.name, schema_id, path), lambda: self._inner(schema_id, path)
        )
        return frame, inner

    def _message_path(self, schema: Any, schema_id: int) -> tuple[int, ...]:
        from processor.messages.registry_protobuf import message_path

        return message_path(schema, self.message, f"schema id {schema_id} of {self.registry.url}")

    # -- the schema of an id ---------------------------------------------------------

    def _inner(self, schema_id: int, path: tuple[int, ...]) -> Any:
        schema = self.registry.call(
            f"schema id {schema_id}",
            lambda: self.registry.client.get_schema(schema_id, fmt=self._format),
        )
        kind = schema.schema_type or "AVRO"
        if kind != self._schema_type:
            raise DecodeError(
                f"schema id {schema_id} is a {kind} schema, but the topic's type {self.name} "
                f"reads {self._schema_type} ones: the producer wrote another format"
            )
        source = f"schema id {schema_id} of {self.registry.url}"
        if self._schema_type == "PROTOBUF":
            from processor.messages.registry_protobuf import protobuf_codec

            return protobuf_codec(self.registry, schema, path, source)
        if schema.references:
            raise DecodeError(
                f"{source} refers to other schemas ({len(schema.references)}); kafka-sow "
                f"reads {kind} schemas without references (protobuf's imports are read)"
            )
        text = schema.schema_str or ""
        if self._schema_type == "AVRO":
            return _avro(text, source)
        return _json_schema(text, source)


def _indexes(data: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """The message index path after the schema id and where the body starts."""
    count, at = _zigzag(data, at)
    if count == 0:
        return (0,), at
    if not 0 < count <= _MAX_INDEXES:
        raise DecodeError(
            f"the payload's protobuf message index count is {count}, not within 1.."
            f"{_MAX_INDEXES}: not a Schema Registry protobuf frame"
        )
    path = []
    for _ in range(count):
        index, at = _zigzag(data, at)
        if index < 0:
            raise DecodeError(f"the payload's protobuf message index {index} is negative")
        path.append(index)
    return tuple(path), at


def _zigzag_indexes(path: tuple[int, ...]) -> bytes:
    """The message indexes of ``path`` as the wire format writes them ([0]: one 0)."""
    if path == (0,):
        return b"\x00"
    out = bytearray()
    for number in (len(path), *path):
        value = number << 1  # zigzag of a number >= 0
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise DecodeError("the payload ends inside its protobuf message indexes")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


def _avro(text: str, source: str) -> Any:
    from processor.errors import ConfigurationError
    from processor.messages.avro import AvroCodec

    try:
        return AvroCodec(orjson.loads(text), source=source)
    except (orjson.JSONDecodeError, ConfigurationError) as exc:
        raise DecodeError(f"{source} is not an Avro schema kafka-sow can read: {exc}") from exc


class JsonSchemaCodec(JsonCodec):
    """json checked against one JSON Schema: compiled by fastjsonschema (drafts 4, 6 and
    7: a few µs a message), else read by jsonschema (2019-09, 2020-12: tens of µs)."""

    def __init__(self, check: Callable[[Any], str | None], source: str) -> None:
        self._first_error = check
        self.source = source

    def decode(self, data: bytes) -> Any:
        value = super().decode(data)
        self._check(value)
        return value

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        """A delta is partial: the merged message is checked (:meth:`encode_json`)."""
        return super().decode(data)

    def encode_json(self, value: Any) -> bytes:
        self._check(value)
        return super().encode_json(value)

    def _check(self, value: Any) -> None:
        error = self._first_error(value)
        if error is not None:
            raise DecodeError(f"the message does not match JSON Schema {self.source}: {error}")


#: The drafts fastjsonschema does not compile (jsonschema reads them).
_NEWER_DRAFTS = ("2019-09", "2020-12")


def _json_schema(text: str, source: str) -> JsonSchemaCodec:
    import fastjsonschema

    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{source} is not a JSON Schema: {exc}") from exc
    draft = str(schema.get("$schema", "")) if isinstance(schema, dict) else ""
    if not any(newer in draft for newer in _NEWER_DRAFTS):
        try:
            # use_default=False: a message is checked, never filled in.
            compiled = fastjsonschema.compile(schema, use_default=False)
        except fastjsonschema.JsonSchemaDefinitionException:
            pass  # a schema it cannot compile: jsonschema reads it (or says what is wrong)
        else:
            return JsonSchemaCodec(functools.partial(_fast_error, compiled), source)
    return JsonSchemaCodec(_full_check(schema, source), source)


def _fast_error(compiled: Callable[[Any], Any], value: Any) -> str | None:
    import fastjsonschema

    try:
        compiled(value)
    except fastjsonschema.JsonSchemaValueException as exc:
        where = "/" + "/".join(str(p) for p in exc.path[1:]) if exc.path else "/"
        return f"at {where}: {exc.message}"
    return None


def _full_check(schema: Any, source: str) -> Callable[[Any], str | None]:
    import jsonschema

    try:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise DecodeError(f"{source} is not a JSON Schema: {exc.message}") from exc
    validator = kind(schema)

    def first_error(value: Any) -> str | None:
        error = next(iter(validator.iter_errors(value)), None)
        if error is None:
            return None
        where = "/" + "/".join(str(p) for p in error.absolute_path)
        return f"at {where}: {error.message}"

    return first_error
