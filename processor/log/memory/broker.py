"""The in-process broker: partitions, transactions with markers, producer epochs, group offsets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from processor.errors import (
    BrokerError,
    FencedError,
    RecordTooLargeError,
)
from processor.keys import partition_for
from processor.log import (
    Headers,
    TopicPartitionKey,
    TopicSpec,
)
from processor.log.records import LogRecord

#: Kafka's logical offsets: the start and the end of a partition.
OFFSET_BEGINNING = -2
OFFSET_END = -1
#: Kafka's default ``message.max.bytes``.
DEFAULT_MAX_RECORD_BYTES = 1_048_588
#: Most records one read returns.
BATCH = 20_000


class MemoryRecord(LogRecord):
    """One record of a :class:`MemoryLog` partition (the :class:`processor.log.Record`
    protocol; its timestamp is its create time). ``control`` marks a transaction marker;
    ``aborted`` a record of an aborted transaction; ``owner`` the (transactional id,
    epoch) of an open transaction."""

    __slots__ = ("aborted", "control", "owner")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        time_ms: int,
    ) -> None:
        super().__init__(topic, partition, offset, key, value, headers, (1, time_ms))
        self.control = False
        self.aborted = False
        self.owner: tuple[str, int] | None = None


@dataclass
class _Transaction:
    """A transactional id's open transaction: the first offset it wrote per partition
    (what holds the last stable offset back) and the group offsets it will commit."""

    epoch: int
    first: dict[TopicPartitionKey, int] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)


class MemoryLog:
    """The in-process broker (module docstring). ``clock`` gives record times (seconds)."""

    def __init__(
        self,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_record_bytes = max_record_bytes
        self.clock = clock
        self.changed = threading.Condition()
        self._partitions: dict[TopicPartitionKey, list[MemoryRecord]] = {}
        self._counts: dict[str, int] = {}
        self._epochs: dict[str, int] = {}
        self._open: dict[str, _Transaction] = {}
        self._group_offsets: dict[tuple[str, str, int], int] = {}

    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        """Create the topics that do not exist yet (an existing topic keeps its records)."""
        with self.changed:
            for spec in specs:
                if spec.name not in self._counts:
                    self._counts[spec.name] = spec.partitions
                    for partition in range(spec.partitions):
                        self._partitions[(spec.name, partition)] = []

    def partition_count(self, topic: str) -> int:
        with self.changed:
            if topic not in self._counts:
                raise BrokerError(f"topic {topic} does not exist; create it first")
            return self._counts[topic]

    def _records(self, topic: str, partition: int) -> list[MemoryRecord]:
        try:
            return self._partitions[(topic, partition)]
        except KeyError:
            raise BrokerError(f"{topic}[{partition}] does not exist; create the topic") from None

    def end(self, topic: str, partition: int) -> int:
        """The high watermark: the offset the next record written gets (records of open
        transactions below it)."""
        with self.changed:
            return len(self._records(topic, partition))

    def stable_end(self, topic: str, partition: int) -> int:
        """The last stable offset: readers see the records below it."""
        with self.changed:
            return self._stable_end(topic, partition)

    def _stable_end(self, topic: str, partition: int) -> int:
        end = len(self._records(topic, partition))
        for transaction in self._open.values():
            first = transaction.first.get((topic, partition))
            if first is not None:
                end = min(end, first)
        return end

    def read(
        self, topic: str, partition: int, start: int, end: int, most: int
    ) -> list[MemoryRecord]:
        """Up to ``most`` committed data records at ``start <= offset < end`` (and below
        the last stable offset)."""
        with self.changed:
            stop = min(end, self._stable_end(topic, partition))
            records = self._records(topic, partition)
            out = []
            for record in records[max(start, 0) : stop]:
                if not (record.control or record.aborted):
                    out.append(record)
                    if len(out) >= most:
                        break
            return out

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> int:
        """Write one record outside any transaction (an idempotent producer); its offset."""
        with self.changed:
            offset = self._append(topic, partition, key, value, headers).offset()
            self.changed.notify_all()
            return offset

    def _append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
    ) -> MemoryRecord:
        size = len(key or b"") + len(value or b"") + sum(len(n) + len(v) for n, v in headers or ())
        if size > self.max_record_bytes:
            raise RecordTooLargeError(
                f"the {size:,}-byte record for {topic}[{partition}] is over the log's limit "
                f"of {self.max_record_bytes:,} bytes"
            )
        if partition < 0:  # Kafka's "any partition": the default partitioner's choice
            count = self._counts.get(topic)
            if count is None:
                raise BrokerError(f"topic {topic} does not exist; create it first")
            partition = partition_for(key, count) if key else 0
        records = self._records(topic, partition)
        record = MemoryRecord(
            topic, partition, len(records), key, value, headers, int(self.clock() * 1000)
        )
        records.append(record)
        return record

    def lose(self, topic: str) -> None:
        """Empty every partition of ``topic``, as a broker that lost its log: offsets
        start again at 0 and readers past the end read it again from there."""
        with self.changed:
            for partition in range(self._counts[topic]):
                self._partitions[(topic, partition)] = []
            self.changed.notify_all()

    def committed(self, group: str, topic: str, partition: int) -> int:
        """The group's committed offset for a partition (-1: none)."""
        with self.changed:
            return self._group_offsets.get((group, topic, partition), -1)

    # Transactions: the producer side of MemoryTransactionalLog.

    def init_producer(self, transactional_id: str) -> int:
        """A new epoch for the id: the older producer is fenced and its open transaction
        aborted."""
        with self.changed:
            epoch = self._epochs.get(transactional_id, -1) + 1
            self._epochs[transactional_id] = epoch
            if transactional_id in self._open:
                self._end(transactional_id, commit=False)
            return epoch

    def _check(self, transactional_id: str, epoch: int) -> None:
        if self._epochs.get(transactional_id) != epoch:
            raise FencedError(
                f"transactional id {transactional_id!r} was taken over by a newer producer "
                f"(epoch {self._epochs.get(transactional_id)}, this one {epoch})"
            )

    def produce_in(
        self,
        transactional_id: str,
        epoch: int,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
    ) -> int:
        """Write a record in the id's open transaction (opened by its first record)."""
        with self.changed:
            self._check(transactional_id, epoch)
            transaction = self._open.setdefault(transactional_id, _Transaction(epoch))
            record = self._append(topic, partition, key, value, headers)
            record.owner = (transactional_id, epoch)
            transaction.first.setdefault((topic, record.partition()), record.offset())
            return record.offset()

    def add_offsets(
        self,
        transactional_id: str,
        epoch: int,
        group: str,
        offsets: Mapping[TopicPartitionKey, int],
    ) -> None:
        with self.changed:
            self._check(transactional_id, epoch)
            transaction = self._open.setdefault(transactional_id, _Transaction(epoch))
            for (topic, partition), offset in offsets.items():
                transaction.offsets[(group, topic, partition)] = offset

    def end_transaction(self, transactional_id: str, epoch: int, commit: bool) -> None:
        """Commit or abort the id's open transaction (nothing open: nothing to do)."""
        with self.changed:
            self._check(transactional_id, epoch)
            if transactional_id in self._open:
                self._end(transactional_id, commit)

    def _end(self, transactional_id: str, commit: bool) -> None:
        transaction = self._open.pop(transactional_id)
        owner = (transactional_id, transaction.epoch)
        for topic, partition in transaction.first:
            records = self._records(topic, partition)
            for record in records[transaction.first[(topic, partition)] :]:
                if record.owner == owner:
                    record.owner = None
                    record.aborted = not commit
            marker = self._append(topic, partition, None, None, None)
            marker.control = True
        if commit:
            self._group_offsets.update(transaction.offsets)
        self.changed.notify_all()

    def wait(self, timeout_s: float) -> None:
        """Block until something changes or the timeout (call without the lock)."""
        if timeout_s > 0:
            with self.changed:
                self.changed.wait(timeout_s)
