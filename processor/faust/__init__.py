"""Faust (faust-streaming) applications read a SOW topic (docs/faust.md).

Two things: :class:`EnvelopeCodec`, a Faust codec that turns a changelog value (an
envelope, :mod:`processor.changelog`) into the message it carries, decoded by the topic's
message type; and :func:`sow_table`, which declares a read-only :class:`SowTable` (a Faust
``GlobalTable``) over a SOW topic's own changelog, so the app sees every record, update and
delete a sow query sees, a moment later.

Imports faust: install the ``faust`` extra. Nothing else in the package imports this room.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from faust.serializers import codecs
from faust.tables.globaltable import GlobalTable
from faust.types import AppT, CodecT, EventT, TopicT
from faust.types.enums import ProcessingGuarantee
from mode import Seconds

from processor import changelog
from processor.errors import ConfigurationError, SowError, UnsupportedError
from processor.faust.preflight import check_permissions
from processor.messages import Codec, codec_for
from processor.topology.message_types import traits as message_traits
from processor.topology.model import SowTopic, Topic

logger = logging.getLogger(__name__)

#: The name :class:`EnvelopeCodec` is registered under (``value_serializer="sow-envelope"``):
#: it decodes every message type but avro, whose schema only the topic knows.
CODEC_NAME = "sow-envelope"

_READ_ONLY = (
    "a SOW table is read-only: its changelog belongs to the SOW processor; "
    "publish or delete through the SOW (gRPC, `sow publish`, `sow delete`) instead"
)


class EnvelopeCodec(codecs.Codec):
    """Faust codec: changelog envelope bytes -> the message it carries, decoded by the
    topic's codec (:func:`processor.messages.codec_for`): a dict for json and avro, the
    fields for fix and nvfix, the bytes for binary.

    Given a ``topic`` it decodes with that topic's codec (its Avro schema); without one
    it picks the codec by the message type each envelope names, which every type but
    avro allows. Reading only: :meth:`dumps` raises UnsupportedError, since what a Faust
    app writes must never reach a SOW changelog. A value that is not an envelope (a
    control record) raises EnvelopeError, which Faust reports as a ValueDecodeError.
    Thread-safe.
    """

    def __init__(
        self, children: tuple[CodecT, ...] | None = None, topic: Topic | None = None
    ) -> None:
        super().__init__(children, topic=topic)
        self._fixed: Codec | None = None if topic is None else codec_for(topic)
        self._by_type: dict[str, Codec] = {}

    def message_codec(self, envelope: changelog.Envelope) -> Codec:
        """The codec of the message an envelope carries."""
        if self._fixed is not None:
            return self._fixed
        codec = self._by_type.get(envelope.message_type)
        if codec is None:
            kind = envelope.message_type
            if message_traits(kind).schema is not None or message_traits(kind).composite:
                raise ConfigurationError(
                    f"topic {envelope.topic} is {kind}: decode its changelog with "
                    "EnvelopeCodec(topic=...) for a topic that names its "
                    + ("parts" if message_traits(kind).composite else "schema")
                )
            topic = Topic(envelope.topic, message_type=envelope.message_type)
            codec = self._by_type.setdefault(envelope.message_type, codec_for(topic))
        return codec

    def _loads(self, s: bytes) -> Any:
        envelope = changelog.decode(s)
        return self.message_codec(envelope).decode(envelope.data)

    def _dumps(self, s: Any) -> bytes:
        raise UnsupportedError(f"EnvelopeCodec only decodes: {_READ_ONLY}")


codecs.register(CODEC_NAME, EnvelopeCodec())


class SowTable(GlobalTable):
    """A Faust ``GlobalTable`` holding one SOW topic's records: SowKey (str) -> decoded
    message, read from the topic's changelog (:attr:`SowTopic.changelog_topic`) on every
    partition, by every worker of the app.

    Declare it with :func:`sow_table`. It applies upserts and tombstones as they arrive
    (buffer size 1, so a change shows as soon as its record is read), skips control
    records, and forgets a partition's keys at a reset record, as the SOW's replica does.
    It never declares (creates) the changelog topic and never writes to it: setting or
    deleting a key raises UnsupportedError. It keeps its rows in memory and reads the
    changelog from the start when the worker starts.
    """

    def __init__(self, app: AppT, *, topic: SowTopic, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.sow_topic = topic
        self.envelopes = EnvelopeCodec(topic=topic)
        #: Records whose envelope or message could not be decoded (each one is logged).
        self.undecodable = 0
        self._partition_of: dict[str, int] = {}

    def _changelog_topic_name(self) -> str:
        return self.sow_topic.changelog_topic

    def _new_changelog_topic(
        self,
        *,
        retention: Seconds | None = None,
        compacting: bool | None = None,
        deleting: bool | None = None,
    ) -> TopicT:
        # Not internal: Faust declares (creates) its internal topics, and this one is
        # created by the SOW processor with the settings it needs. Raw bytes: control
        # records are neither SowKeys nor envelopes, so apply_changelog_batch decodes.
        return self.app.topic(
            self._changelog_topic_name(),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.partitions,
            acks=False,
            internal=False,
            maxsize=131_072,  # as Faust's own: changelog reads commit no offsets
            allow_empty=True,
        )

    async def on_start(self) -> None:
        """Check that Kafka lets the app read its group and the changelog
        (:func:`~processor.faust.preflight.check_permissions`: a refusal raises
        KafkaSecurityError, which stops the worker), then start the store only: the SOW
        processor creates and owns the changelog topic."""
        await check_permissions(self.app, self._changelog_topic_name())
        await self.add_runtime_dependency(self.data)

    def apply_changelog_batch(self, batch: Iterable[EventT[Any]]) -> None:
        """Apply changelog records in offset order: an envelope sets its SowKey, a
        tombstone removes it, a reset record empties its partition; other control records
        are skipped. Called by Faust's recovery, for the initial read and every later one."""
        store = self.data
        for event in batch:
            message = event.message
            key, value, partition = message.key, message.value, message.partition
            if key is None:
                continue
            if key.startswith(changelog.CONTROL_PREFIX):
                if key == changelog.RESET_KEY:
                    self._forget_partition(partition)
                continue
            sow_key = key.decode()
            if value is None:
                store.pop(sow_key, None)
                self._partition_of.pop(sow_key, None)
                continue
            try:
                record = self.envelopes.loads(value)
            except SowError as exc:
                self.undecodable += 1
                logger.error(
                    "SOW table %s: skipped %s/%d/%d (SowKey %s): %s",
                    self.name,
                    message.topic,
                    partition,
                    message.offset,
                    sow_key,
                    exc,
                )
                continue
            store[sow_key] = record
            self._partition_of[sow_key] = partition

    def _forget_partition(self, partition: int) -> None:
        store = self.data
        gone = [k for k, p in self._partition_of.items() if p == partition]
        for sow_key in gone:
            store.pop(sow_key, None)
            del self._partition_of[sow_key]

    def on_key_set(self, key: Any, value: Any) -> None:
        raise UnsupportedError(_READ_ONLY)

    def on_key_del(self, key: Any) -> None:
        raise UnsupportedError(_READ_ONLY)

    def on_clear(self) -> None:
        raise UnsupportedError(_READ_ONLY)

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedError(_READ_ONLY)


def sow_table(app: AppT, topic: SowTopic, *, name: str | None = None, **options: Any) -> SowTable:
    """Declare a :class:`SowTable` over ``topic``'s changelog in ``app`` (at module
    level, as Faust tables are declared) and return it.

    ``topic`` is the SOW topic as the SOW serves it (its ``kafka_topic``, partitions and
    message type; load it from the same topology file). The app must be configured with
    ``processing_guarantee="exactly_once"``: that makes its consumer read committed records
    only, and the SOW writes its changelog in transactions, some of which abort. ``name``
    defaults to ``sow-<topic name>``; ``options`` go to Faust's Table (``help``,
    ``on_changelog_event``, ...). Raises ConfigurationError otherwise.
    """
    guarantee: Any = app.conf.processing_guarantee  # typed as the class in faust
    if guarantee != ProcessingGuarantee.EXACTLY_ONCE:
        raise ConfigurationError(
            f"a SOW table reads committed records only: configure the Faust app "
            f"{app.conf.id!r} with processing_guarantee='exactly_once' "
            f"(it has {guarantee.value!r})"
        )
    table = SowTable(
        app,
        topic=topic,
        name=name or f"sow-{topic.name}",
        beacon=app.tables.beacon,
        partitions=topic.partitions,
        store="memory://",
        is_global=True,
        recovery_buffer_size=1,
        standby_buffer_size=1,
        **options,
    )
    app.tables.add(table)
    return table


__all__ = ["CODEC_NAME", "EnvelopeCodec", "SowTable", "sow_table"]
