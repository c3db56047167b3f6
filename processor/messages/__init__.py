"""Message types: one codec module per type, chosen by a topic's ``message_type``.

A codec turns payload bytes into the value that Key paths and (later) filters are evaluated
on, and raises :class:`~processor.errors.DecodeError` with a precise reason when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from processor.errors import ConfigurationError
from processor.topology.model import Topic


class Codec(Protocol):
    """Decodes and encodes one message type. Implementations are thread-safe."""

    name: str

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


def codec_for(topic: Topic) -> Codec:
    """The codec for a topic's message type."""
    if topic.message_type == "json":
        from processor.messages.json import JsonCodec

        return JsonCodec()
    if topic.message_type == "avro":
        from processor.messages.avro import AvroCodec

        if topic.schema is None:
            raise ConfigurationError(f"topic {topic.name} is avro but names no schema file")
        return AvroCodec.from_file(topic.schema)
    if topic.message_type in ("fix", "nvfix"):
        from processor.messages.fix import TagValueCodec

        return TagValueCodec(topic.message_type, topic.field_separator)
    if topic.message_type == "xml":
        from processor.messages.xml import XmlCodec

        return XmlCodec()
    if topic.message_type == "bflat":
        from processor.messages.bflat import BflatCodec

        return BflatCodec()
    if topic.message_type == "bson":
        from processor.messages.bson import BsonCodec

        return BsonCodec()
    if topic.message_type == "binary":
        from processor.messages.binary import BinaryCodec

        return BinaryCodec()
    raise ConfigurationError(
        f"topic {topic.name} has message type {topic.message_type!r}; "
        "supported types are json, avro, fix, nvfix, xml, bson, bflat and binary"
    )
