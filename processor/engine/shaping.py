"""Preprocessing and Enrichment in the processor: the message a SOW topic records is the
published one reshaped by the topic's ``<Field>`` lists (spec 3.3, processing order:
preprocessing -> SowKey -> enrichment -> delta merge -> changelog).

The gateway computes the SowKey of the preprocessed message too (it needs the partition),
but only the processor rewrites the message, inside the transaction that records it, so
every publish path (gRPC, the direct publisher, foreign producers re-keyed through the
repartition topic) is reshaped exactly once: a record re-keyed to another partition is
forwarded as published and reshaped where it is applied.

A failure of a field on one message is an EnrichmentError: the record is dead-lettered
with the reason and the processor goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor import changelog
from processor.changelog.commands import DELTA_NATIVE, DELTA_TEXT
from processor.errors import DecodeError, EnrichmentError, MissingKeyError, SowError
from processor.expr.construction import Construction, compile_construction
from processor.expr.inputs import MessageContext
from processor.keys import KeyFunction, key_function, validate_user_key
from processor.messages import Codec
from processor.topology.model import SowTopic


class Shaping:
    """A topic's Preprocessing and Enrichment, compiled once per partition state."""

    __slots__ = ("codec", "enrich", "key_function", "preprocess", "topic")

    def __init__(self, topic: SowTopic, codec: Codec) -> None:
        self.topic = topic
        self.codec = codec
        self.preprocess: Construction | None = (
            compile_construction(topic.preprocessing, enrichment=False)
            if topic.preprocessing
            else None
        )
        self.enrich: Construction | None = (
            compile_construction(topic.enrichment, enrichment=True) if topic.enrichment else None
        )
        #: The SowKey of an already preprocessed message.
        self.key_function: KeyFunction | None = key_function(topic, preprocessed=True)

    @classmethod
    def of(cls, topic: SowTopic, codec: Codec) -> Shaping | None:
        """The topic's shaping, or None when it has neither list."""
        if not topic.preprocessing and not topic.enrichment:
            return None
        return cls(topic, codec)

    def preprocessed(
        self, value: bytes, delta: bytes | None, context: MessageContext
    ) -> dict[str, Any]:
        """The published message (a delta's fields for a delta_publish), preprocessed."""
        message = (
            self.codec.decode(value)
            if delta is None
            else self.codec.decode_delta(value, delta == DELTA_TEXT)
        )
        if not isinstance(message, dict):
            raise DecodeError(f"a {self.codec.name} message has no fields to preprocess")
        if self.preprocess is None:
            return message
        return self._run(self.preprocess, message, None, context)

    def sow_key(self, message: dict[str, Any], key: bytes | None, delta: bytes | None) -> bytes:
        """The SowKey of a preprocessed message (the Kafka key on user-keyed topics)."""
        if self.key_function is None:
            return validate_user_key(key).encode()
        try:
            return self.key_function(message).encode()
        except MissingKeyError as exc:
            if delta is None:
                raise
            raise MissingKeyError(
                f"a delta_publish must give the record's Key fields (it is merged into the "
                f"record they identify): {exc}"
            ) from exc

    def enriched(
        self,
        lookup: Callable[[bytes], bytes | None],
        sow_key: bytes,
        message: dict[str, Any],
        context: MessageContext,
        delta: bytes | None,
    ) -> tuple[bytes, bytes | None]:
        """The message to record (enriched against the record ``sow_key`` holds, as
        ``lookup`` gives it: the batch's, this transaction's writes included) and the
        delta form it now has (None for a publish). A reshaped delta travels in the
        topic's type, unless a partial message has no payload of the type
        (``traits.partial_native``: avro, protobuf), when it goes on as JSON text."""
        if self.enrich is not None:
            previous = None
            if self.enrich.reads_previous:
                stored = lookup(sow_key)
                if stored is not None:
                    data, _ = changelog.data_and_correlation_of(stored)
                    previous = self.codec.decode(data)
            message = self._run(self.enrich, message, previous, context)
        if delta is not None and not self.codec.traits.partial_native:
            return self.codec.text_of(message), DELTA_TEXT
        return self.codec.encode_json(message), None if delta is None else DELTA_NATIVE

    def _run(
        self,
        construction: Construction,
        message: dict[str, Any],
        previous: Any,
        context: MessageContext,
    ) -> dict[str, Any]:
        try:
            return construction.apply(message, previous, context)
        except SowError as exc:
            raise EnrichmentError(f"{construction!r} failed on this message: {exc}") from exc
        except Exception as exc:  # user expressions (UDFs) may raise anything: the record's fault
            raise EnrichmentError(
                f"{construction!r} failed on this message: {type(exc).__name__}: {exc}"
            ) from exc
