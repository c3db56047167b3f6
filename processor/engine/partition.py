"""The state of one SOW topic partition inside the processor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from processor.changelog import EnvelopeWriter
from processor.engine.publishers import PublisherSequences
from processor.keys import KeyFunction
from processor.messages import Codec
from processor.state import Store
from processor.topology.model import Durability, SowTopic


@dataclass(slots=True, eq=False)
class PartitionState:
    """A store partition: the store, its uncommitted changes and where its inputs stand.

    ``pending`` holds the current transaction's writes (SowKey -> envelope, None for a
    delete); reads during a batch check it before the store. ``progress`` holds the next
    input offset per log topic reached in the current transaction; ``applied`` the next
    input offset per log topic as of the last commit (where each input resumed, then
    every committed ``progress``). Each PROGRESS record carries ``applied`` with
    ``progress`` on top, not ``progress`` alone: compaction keeps only a partition's
    latest PROGRESS record, which must therefore say how far *every* input of the
    partition was applied, also when its transaction read only one of them (the
    repartition topic) or none (expiry).

    ``due`` holds the current transaction's changes to the due index (index key -> b""
    to add, None to drop; :mod:`processor.engine.expiry`), written in the same commit;
    ``due_floor`` is an index key below which the store holds no index entries, as far
    as the expirer knows (b"": unknown), so its seeks skip the entries it deleted.

    ``publishers`` is duplicate detection: the highest sequence applied per publisher on
    this partition's input, committed state and this transaction's together
    (:class:`~processor.engine.publishers.PublisherSequences`). Like ``pending`` it is only
    valid while the transaction can still commit: after a failed transaction the processor
    drops the whole PartitionState and reopens it from the store, whose meta column holds
    one entry per publisher as of the last commit.
    """

    topic: SowTopic
    partition: int
    store: Store
    codec: Codec
    key_function: KeyFunction | None
    writers: dict[str, EnvelopeWriter]
    pending: dict[bytes, bytes | None] = field(default_factory=dict)
    progress: dict[str, int] = field(default_factory=dict)
    applied: dict[str, int] = field(default_factory=dict)
    due: dict[bytes, bytes | None] = field(default_factory=dict)
    due_floor: bytes = b""
    #: Next input offset per log topic that recovery found applied in the changelog.
    log_next: dict[str, int] = field(default_factory=dict)
    publishers: PublisherSequences = field(init=False)

    def __post_init__(self) -> None:
        self.publishers = PublisherSequences(self.store)

    def discard(self) -> None:
        """Forget the current transaction's changes (it was aborted and its batch will be
        read again): back to what the store holds, as of the last commit."""
        self.pending.clear()  # cleared in place: the applier's routes hold this dict
        self.progress.clear()
        self.due.clear()
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

    def lookup(self, sow_key: bytes) -> bytes | None:
        """The current envelope of a SowKey, including this transaction's writes."""
        if sow_key in self.pending:
            return self.pending[sow_key]
        return self.store.get(sow_key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every current (SowKey, envelope), including this transaction's writes.

        The caller must not change ``pending`` while iterating.
        """
        pending = self.pending
        for sow_key, envelope in self.store.items():
            if sow_key not in pending:
                yield sow_key, envelope
        for sow_key, written in pending.items():
            if written is not None:
                yield sow_key, written


def make_writers(topic: SowTopic, partition: int) -> dict[str, EnvelopeWriter]:
    """Envelope writers for the partition's two log topics (input and repartition)."""
    return {
        log_topic: EnvelopeWriter(topic.name, topic.message_type, log_topic, partition)
        for log_topic in (topic.kafka_topic, topic.repartition_topic)
    }
