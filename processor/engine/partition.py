"""The state of one SOW topic partition inside the processor."""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.changelog import EnvelopeWriter
from processor.engine.publishers import PublisherSequences
from processor.engine.shaping import Shaping
from processor.keys import KeyFunction
from processor.messages import Codec
from processor.state import Store
from processor.topology.model import Durability, SowTopic


@dataclass(slots=True, eq=False)
class PartitionState:
    """A store partition: the store and where its inputs stand between transactions.

    A transaction's changes live in its :class:`~processor.engine.transaction.PartitionBatch`
    until they commit. ``applied`` is the next input offset per log topic as of the last
    commit (where each input resumed, then every committed batch's ``progress``). Each
    PROGRESS record carries ``applied`` with the batch's ``progress`` on top, not
    ``progress`` alone: compaction keeps only a partition's latest PROGRESS record, which
    must therefore say how far *every* input of the partition was applied, also when its
    transaction read only one of them (the repartition topic) or none (expiry).

    ``due_floor`` is a due-index key below which the store holds no index entries, as far
    as the expirer knows (b"": unknown), so its seeks skip the entries it deleted.

    ``publishers`` is duplicate detection: the highest sequence applied per publisher on
    this partition's input, committed state and the current transaction's together
    (:class:`~processor.engine.publishers.PublisherSequences`). After a failed transaction
    :meth:`discard` reloads it from the store, whose meta column holds one entry per
    publisher as of the last commit.
    """

    topic: SowTopic
    partition: int
    store: Store
    codec: Codec
    key_function: KeyFunction | None
    writers: dict[str, EnvelopeWriter]
    #: The topic's Preprocessing and Enrichment (None: it has neither).
    shaping: Shaping | None = None
    applied: dict[str, int] = field(default_factory=dict)
    due_floor: bytes = b""
    #: Next input offset per log topic that recovery found applied in the changelog.
    log_next: dict[str, int] = field(default_factory=dict)
    #: The writes of this partition's batch whose commit is in flight, until they are in
    #: the store (pipelined commits, :mod:`processor.engine.pipeline`); None: none.
    inflight: dict[bytes, bytes | None] | None = None
    publishers: PublisherSequences = field(init=False)

    def __post_init__(self) -> None:
        self.publishers = PublisherSequences(self.store)

    def discard(self) -> None:
        """Forget what an aborted transaction changed (its batch will be read again):
        back to what the store holds, as of the last commit."""
        self.due_floor = b""
        self.publishers = PublisherSequences(self.store)
        self.publishers.load()

    @property
    def transient(self) -> bool:
        return self.topic.durability is Durability.TRANSIENT

    def accept_sequence(self, publisher: str, sequence: int) -> bool:
        """Note (publisher, sequence) as applied and return True, or return False for a
        duplicate: a sequence not above the highest this partition applied for it."""
        return self.publishers.accept(publisher, sequence)


def make_writers(topic: SowTopic, partition: int) -> dict[str, EnvelopeWriter]:
    """Envelope writers for the partition's log topics (input and repartition)."""
    return {
        log_topic: EnvelopeWriter(topic.name, topic.message_type, log_topic, partition)
        for log_topic in (topic.kafka_topic, topic.repartition_topic)
    }
