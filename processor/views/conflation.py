"""Conflated topics (seed 002 SOW/ConflatedTopic): a copy of a SOW topic (or view) that
takes the latest state of each record at most once per ``Interval``, for readers that do
not act on every update.

Like a view, a conflated topic is a SOW topic whose records the processor derives, in two
halves inside its exactly-once transactions:

* :class:`ConflatedFeed` listens to the underlying topic and sends each record's change
  (one per record per transaction: its latest envelope, or a delete when the record was
  deleted or left the ``Filter``) to the conflated topic's input, on the record's own
  partition (both topics have the same partitions).
* :class:`ConflatedPartition` keeps what arrived as *pending* (in its state: changelog
  control records and the store's meta column, so nothing pending is lost to a crash) and,
  when the interval has passed since it last wrote, writes every pending record once, as
  it is then (``tick``, :class:`~processor.engine.derived.Ticking`), and forgets them. So
  a reader sees at most one update per record per interval, each the latest value.

The copy keeps the underlying record's SowKey, message, publish time and correlation id.
With ``Enrichment``, the copy's message gets its fields as the copy is written (the
conflated topic's :class:`~processor.engine.shaping.Shaping`, as a SOW topic's publish
gets them); a field that fails on a record dead-letters that record's latest input
(:data:`~processor.engine.derived.Rejects`), the copy keeps its previous version and
the others are written. With ``TopicFormat`` (a copy of a Pattern topic) each record's
copy is named for its own topic (``%n-C``: the copy of a record of ``orders`` is a record
of ``orders-C``), so every topic the Pattern topic stores has its own copy, queried and
subscribed by its name (:func:`processor.topology.topics.pattern_topic`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from processor import changelog
from processor.changelog import (
    STATE_PREFIX,
    EnvelopeWriter,
)
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.derived import Rejects
from processor.engine.families import MAX_TOPICS
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.errors import DecodeError, MessageError
from processor.expr import Expression, MessageContext
from processor.expr import compile as compile_expression
from processor.log import Headers, Record
from processor.log.records import LogRecord
from processor.messages import Codec, codec_for
from processor.topology.model import SowTopic
from processor.topology.topics import copy_name
from processor.topology.view_topics import conflated_underlying
from processor.views.definition import derived_digest
from processor.views.feed import DIGEST_HEADER, conflated

_PENDING = b"p"
_OFFSET = struct.Struct(">q")


class ConflatedDefinition:
    """One conflated topic, compiled (immutable)."""

    __slots__ = ("codec", "digest", "filter", "interval_ms", "source", "topic", "topic_format")

    def __init__(self, topic: SowTopic, topics: Mapping[str, SowTopic]) -> None:
        spec = topic.conflated
        assert spec is not None, f"{topic.name} is not a conflated topic"
        self.topic = topic
        underlying = conflated_underlying(spec, topics)
        self.source = underlying.name
        self.codec: Codec = codec_for(underlying)
        self.filter: Expression | None = (
            compile_expression(spec.filter) if spec.filter and spec.filter.strip() else None
        )
        self.interval_ms = max(int(spec.interval_s * 1000), 1)
        self.digest: bytes = derived_digest(topic, topics)
        #: Names each record's copy for its own topic (a copy of a Pattern topic), or None.
        self.topic_format = spec.topic_format

    def kept(self, envelope: bytes | None) -> bool:
        """Whether an underlying record (its envelope) belongs in the copy."""
        if envelope is None:
            return False
        if self.filter is None:
            return True
        decoded = changelog.decode(envelope)
        return self.filter.matches(
            self.codec.decode(decoded.data), decoded.context(), overrun="view"
        )


class ConflatedFeed:
    """Sends the underlying topic's changes to the conflated topic (see the module doc)."""

    needs_old = True

    def __init__(self, definition: ConflatedDefinition) -> None:
        self.definition = definition
        self.feed_marker = b"fed:" + definition.topic.name.encode()
        self.feed_version = definition.digest

    def listen(self, batch: PartitionBatch) -> Listener:
        definition = self.definition
        target, partition = definition.topic.kafka_topic, batch.state.partition
        headers = [(DIGEST_HEADER, definition.digest)]

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in conflated(events):
                if definition.kept(event.new):
                    batch.produce(target, event.new, event.sow_key, partition, headers)
                elif definition.kept(event.old):
                    batch.produce(target, None, event.sow_key, partition, headers)

        return changed


class ConflatedPartition:
    """One partition of a conflated topic (see the module doc); not thread-safe."""

    def __init__(self, definition: ConflatedDefinition, state: PartitionState) -> None:
        self.definition = definition
        self.state = state
        self.version = (b"definition", definition.digest)
        #: SowKey -> (input offset, underlying envelope or None: delete); None: not loaded.
        self._pending: dict[bytes, tuple[int, bytes | None]] | None = None
        #: When the pending records are written next (0: as soon as there are some).
        self._next_ms = 0
        #: The envelope writer of each copy's name (a copy of a Pattern topic).
        self._writers: dict[str, EnvelopeWriter] = {}

    def discard(self) -> None:
        self._pending = None

    def _loaded(self) -> dict[bytes, tuple[int, bytes | None]]:
        pending = self._pending
        if pending is None:
            pending = self._pending = {}
            prefix = STATE_PREFIX + _PENDING
            for key, raw in self.state.store.meta_items(prefix):
                offset = _OFFSET.unpack_from(raw)[0]
                pending[key[len(prefix) :]] = (offset, raw[_OFFSET.size :] or None)
        return pending

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        pending = self._loaded()
        digest = self.definition.digest
        for record in records:
            key = record.key()
            headers = dict(record.headers() or ())
            if not key or headers.get(DIGEST_HEADER) is None:
                reject(
                    record,
                    MessageError(
                        f"a record of conflated topic {self.definition.topic.name}'s input "
                        f"needs its key and header {DIGEST_HEADER}: only the processor "
                        "writes this topic"
                    ),
                )
                continue
            if headers[DIGEST_HEADER] != digest:
                continue  # computed for another definition: it is fed again
            value = record.value()
            pending[key] = (record.offset(), value)
            batch.put_state(_PENDING + key, _OFFSET.pack(record.offset()) + (value or b""))
            if not self._next_ms:
                self._next_ms = batch.now_ms + self.definition.interval_ms

    def due(self, now_ms: int) -> bool:
        pending = self._loaded()
        if pending and not self._next_ms:
            self._next_ms = now_ms + self.definition.interval_ms
        return bool(pending) and now_ms >= self._next_ms

    def tick(self, batch: PartitionBatch, now_ms: int, reject: Rejects) -> None:
        """Write every pending record, as it is now (enriched), and forget them; a record
        whose enrichment fails is rejected as its latest input record (module doc)."""
        state, pending = self.state, self._loaded()
        log_topic = state.topic.kafka_topic
        for sow_key, (offset, envelope) in pending.items():
            batch.put_state(_PENDING + sow_key, None)
            if envelope is None:
                if batch.lookup(sow_key) is None:
                    continue
                batch.write(sow_key, None, ChangeReason.DELETE, log_topic, offset)
                continue
            original = changelog.decode(envelope)
            name = state.topic.name
            if self.definition.topic_format is not None:
                name = copy_name(self.definition.topic_format, original.topic)
            try:
                data = self._enriched(batch, sow_key, name, original)
            except Exception as exc:  # reject re-raises what is not this record's failure
                reject(self._input_record(sow_key, offset, envelope), exc)
                continue
            copy = self._writer(name).encode(
                offset,
                sow_key,
                data,
                original.publish_time_ms,
                now_ms,
                None,
                original.correlation_id,
            )
            batch.write(sow_key, copy, ChangeReason.PUBLISH, log_topic, offset)
        pending.clear()
        self._next_ms = now_ms + self.definition.interval_ms

    def _enriched(
        self, batch: PartitionBatch, sow_key: bytes, name: str, original: changelog.Envelope
    ) -> bytes:
        """The copy's message: the original's, with the conflated topic's Enrichment
        fields when it has some (MessageError when one fails on it)."""
        shaping = self.state.shaping
        if shaping is None:
            return original.data
        message = shaping.codec.decode(original.data)
        if not isinstance(message, dict):
            raise DecodeError(f"a {shaping.codec.name} message has no fields to enrich")
        context = MessageContext(
            sow_key=sow_key.decode(),
            topic=name,
            correlation_id=original.correlation_id,
            message_size=len(original.data),
        )
        data, _ = shaping.enriched(batch.lookup, sow_key, message, context, None)
        return data

    def _writer(self, name: str) -> EnvelopeWriter:
        """The envelope writer of the copies named ``name``."""
        state = self.state
        if name == state.topic.name:
            return state.writers[state.topic.kafka_topic]
        writer = self._writers.get(name)
        if writer is None:
            if len(self._writers) >= MAX_TOPICS:
                self._writers.clear()
            writer = EnvelopeWriter(
                name, state.topic.message_type, state.topic.kafka_topic, state.partition
            )
            self._writers[name] = writer
        return writer

    def _input_record(self, sow_key: bytes, offset: int, envelope: bytes) -> Record:
        """The input record that carried a pending record's latest change, as it was
        read (for the dead-letter topic)."""
        headers: Headers = [(DIGEST_HEADER, self.definition.digest)]
        input_topic, partition = self.state.topic.kafka_topic, self.state.partition
        return LogRecord(input_topic, partition, offset, sow_key, envelope, headers)


class ConflatedTopic:
    """Makes the partitions of one conflated topic."""

    def __init__(self, definition: ConflatedDefinition) -> None:
        self.definition = definition

    def open(self, state: PartitionState) -> ConflatedPartition:
        return ConflatedPartition(self.definition, state)
