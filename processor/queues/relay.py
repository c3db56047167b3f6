"""The relay of a queue over plain topics of several partitions
(:func:`processor.topology.queue_topics.relay_topics`): each partition of the plain topic
sends each publish to the queue's one partition, in the transaction that reads it.

What it sends is what :class:`~processor.queues.feed.QueueFeed` sends for a SOW topic's
publish: the publish as a changelog envelope (its topic, data, publish time, own
expiration and correlation id), keyed by its bookmark (where it was published). The queue
partition takes it from there exactly as a SOW topic's (RecoveryPoint, Filter, priority,
barrier, expiration); a relay keeps nothing in its store.
"""

from __future__ import annotations

from collections.abc import Sequence

from processor.changelog import EnvelopeWriter
from processor.engine.derived import Rejects
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.log import Record
from processor.queues.definition import bookmark_of, publish_options
from processor.topology.model import SowTopic


class QueueRelay:
    """Makes the partitions of one relay (a derived topic of the processor)."""

    def __init__(self, relay: SowTopic, queue: SowTopic, name: str) -> None:
        """``relay``: the relay topic; ``queue``: the queue it feeds; ``name``: the plain
        topic it relays (the topic its publishes were made to)."""
        self.relay, self.queue, self.name = relay, queue, name

    def open(self, state: PartitionState) -> RelayPartition:
        writer = EnvelopeWriter(
            self.name, self.relay.message_type, self.relay.kafka_topic, state.partition
        )
        return RelayPartition(self.queue.kafka_topic, writer)


class RelayPartition:
    """One partition of a relay; not thread-safe (the processor's loop owns it)."""

    #: A relay keeps no state: any version of it may take over any other's partition.
    version = (b"queue-relay", b"1")
    #: It reads nothing: its transactions may commit in the background.
    pipelines = True

    def __init__(self, target: str, writer: EnvelopeWriter) -> None:
        self._target, self._writer = target, writer

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        target, writer, now_ms = self._target, self._writer, batch.now_ms
        for record in records:
            data = record.value()
            if data is None:
                continue  # a tombstone in the plain topic: no message
            offset = record.offset()
            bookmark = bookmark_of(record.topic(), record.partition(), offset)
            published_ms = record.timestamp()[1]
            try:
                own_ms, correlation_id = publish_options(record.headers(), published_ms)
            except Exception as exc:  # reject re-raises what is not this record's failure
                reject(record, exc)
                continue
            envelope = writer.encode(
                offset, bookmark, data, published_ms, now_ms, own_ms, correlation_id
            )
            batch.produce(target, envelope, bookmark, 0)

    def discard(self) -> None:
        """Nothing to forget: what it sent is in the aborted transaction."""
