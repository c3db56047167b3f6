"""Message types: one codec module per type, chosen by a topic's ``message_type``.

A codec turns payload bytes into the value that Key paths and (later) filters are evaluated
on, and raises :class:`~processor.errors.DecodeError` with a precise reason when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from processor.errors import ConfigurationError
from processor.topology.message_types import MessageTraits, unknown_type
from processor.topology.model import Topic


class Codec(Protocol):
    """Decodes and encodes one message type. Implementations are thread-safe."""

    name: str
    #: What the type can do (:mod:`processor.topology.message_types`).
    traits: MessageTraits

    def decode(self, data: bytes) -> Any:
        """The decoded message (a dict for json and avro, the bytes for binary)."""
        ...

    def encode_json(self, value: Any) -> bytes:
        """Encode a JSON-like value (as a user types it on the command line) to payload bytes."""
        ...

    def from_text(self, text: bytes) -> bytes:
        """Payload bytes from the message's text form (JSON; Base64 for binary)."""
        ...

    def to_text(self, data: bytes) -> bytes:
        """The text form of a payload (JSON; Base64 for binary)."""
        ...

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        """The fields of a delta_publish message (``text_form``: given as JSON text), for
        computing its SowKey; raises DecodeError when it is not a delta of this type."""
        ...

    def merge(self, stored: bytes | None, delta: bytes, text_form: bool) -> bytes:
        """delta_publish: the payload of ``stored`` (None: no record yet) with the fields
        ``delta`` gives merged in (:func:`processor.messages.fields.merge`). Raises
        MessageError when the result is not a message of this type."""
        ...

    def text_of(self, value: Any) -> bytes:
        """The JSON text of a decoded (possibly partial: selected or delta) message."""
        ...

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        """A decode for computing a SowKey from the fields at ``paths``: it checks the
        payload as :meth:`decode` does and gives a message whose fields at ``paths``
        equal the decoded message's (it may leave the others out). The processor's hot
        path uses it; :meth:`decode` is always a correct answer."""
        ...


class MessageFormat(Protocol):
    """A message type and what it is configured with: a topic, or a composite type's
    part (:class:`~processor.topology.model.Topic`, ``MessagePart``)."""

    @property
    def message_type(self) -> str: ...

    @property
    def schema(self) -> str | None: ...

    @property
    def proto_type(self) -> str | None: ...

    @property
    def field_separator(self) -> bytes: ...


def _json(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.json import JsonCodec

    return JsonCodec()


def _avro(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.avro import AvroCodec

    if fmt.schema is None:
        raise ConfigurationError(f"{where} is avro but names no schema file")
    return AvroCodec.from_file(fmt.schema)


def _tag_value(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.fix import TagValueCodec

    return TagValueCodec(fmt.message_type, fmt.field_separator)


def _xml(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.xml import XmlCodec

    return XmlCodec()


def _bflat(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.bflat import BflatCodec

    return BflatCodec()


def _bson(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.bson import BsonCodec

    return BsonCodec()


def _msgpack(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.msgpack import MsgpackCodec

    return MsgpackCodec()


def _protobuf(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.protobuf import ProtobufCodec

    if fmt.schema is None or fmt.proto_type is None:
        raise ConfigurationError(
            f"{where} is protobuf but does not name its .proto file (or descriptor set) "
            "and its message type"
        )
    return ProtobufCodec.from_file(fmt.schema, fmt.proto_type)


def _composite(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.composite import CompositeCodec

    parts = getattr(fmt, "parts", ())
    if not parts:
        raise ConfigurationError(f"{where} is {fmt.message_type} but declares no parts")
    codecs = tuple(_build(part, f"part {index} of {where}") for index, part in enumerate(parts))
    return CompositeCodec(fmt.message_type, codecs)


def _schema_registry(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.registry import registry_for
    from processor.messages.schema_registry import RegistryCodec

    registry = getattr(fmt, "schema_registry", None)
    if registry is None:
        raise ConfigurationError(
            f"{where} is {fmt.message_type} but names no Schema Registry (schema_registry)"
        )
    subject = registry.subject or f"{getattr(fmt, 'kafka_topic', '')}-value"
    return RegistryCodec(
        fmt.message_type, registry_for(registry.url), subject, registry.message, where
    )


def _binary(fmt: MessageFormat, where: str) -> Codec:
    from processor.messages.binary import BinaryCodec

    return BinaryCodec()


#: The codec of each message type (the names of :data:`processor.topology.message_types.TRAITS`).
CODECS: Mapping[str, Callable[[MessageFormat, str], Codec]] = MappingProxyType(
    {
        "json": _json,
        "avro": _avro,
        "fix": _tag_value,
        "nvfix": _tag_value,
        "xml": _xml,
        "bson": _bson,
        "bflat": _bflat,
        "msgpack": _msgpack,
        "protobuf": _protobuf,
        "avro-sr": _schema_registry,
        "protobuf-sr": _schema_registry,
        "json-sr": _schema_registry,
        "composite-local": _composite,
        "composite-global": _composite,
        "binary": _binary,
    }
)


def _build(fmt: MessageFormat, where: str) -> Codec:
    factory = CODECS.get(fmt.message_type)
    if factory is None:
        raise ConfigurationError(f"{where}: {unknown_type(fmt.message_type)}")
    return factory(fmt, where)


def codec_for(topic: Topic) -> Codec:
    """The codec for a topic's message type."""
    return _build(topic, f"topic {topic.name}")
