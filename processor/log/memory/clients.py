"""The clients of a :class:`~processor.log.memory.broker.MemoryLog`: one per interface of
:mod:`processor.log`, so the real engine loop, commit protocol and replica run on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from processor.errors import (
    MessageTooLargeError,
    RecordTooLargeError,
    SowError,
)
from processor.log import (
    LogPosition,
    LogRecord,
    MaybeHeaders,
    OnAssign,
    OnRevoke,
    Payload,
    TailState,
    TopicPartitionKey,
)
from processor.log.memory.broker import BATCH, OFFSET_BEGINNING, OFFSET_END, MemoryLog, MemoryRecord


def _start(log: MemoryLog, tp: TopicPartitionKey, offset: int) -> int:
    """A real offset for a logical one (the start or the end of the partition)."""
    if offset == OFFSET_BEGINNING or offset < OFFSET_BEGINNING:
        return 0
    if offset == OFFSET_END:
        return log.stable_end(*tp)
    return offset


def _poll(
    log: MemoryLog,
    positions: Mapping[TopicPartitionKey, int],
    most: int,
    timeout_s: float,
) -> list[MemoryRecord]:
    """Up to ``most`` visible records from the positions on, in partition order, waiting
    up to ``timeout_s`` for the first."""
    deadline = time.monotonic() + timeout_s
    while True:
        out: list[MemoryRecord] = []
        for (topic, partition), position in positions.items():
            out += log.read(topic, partition, position, 1 << 62, most - len(out))
            if len(out) >= most:
                break
        remaining = deadline - time.monotonic()
        if out or remaining <= 0:
            return out
        log.wait(min(remaining, 0.05))


class MemoryInputLog:
    """The processor's input (:class:`processor.log.InputLog`): every partition of the
    topics, as one static instance takes them; offsets committed through transactions."""

    def __init__(self, log: MemoryLog, group: str) -> None:
        self._log = log
        self._group = group
        self._positions: dict[TopicPartitionKey, int] = {}
        self._held: set[TopicPartitionKey] = set()

    def subscribe(self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke) -> None:
        partitions = [(t, p) for t in topics for p in range(self._log.partition_count(t))]
        committed = {tp: self._log.committed(self._group, *tp) for tp in partitions}
        starts = on_assign(partitions, committed)
        for tp in partitions:
            if tp not in starts:
                self._place(tp, None)
            elif starts[tp] is None:
                self._held.add(tp)
            else:
                self._place(tp, starts[tp])

    def _place(self, tp: TopicPartitionKey, start: int | None) -> None:
        """Fetch ``tp`` from ``start`` (a logical offset too), None: where committed."""
        if start is None:
            committed = self._log.committed(self._group, *tp)
            start = committed if committed >= 0 else OFFSET_BEGINNING
        self._positions[tp] = _start(self._log, tp, start)

    def resume(self, starts: Mapping[TopicPartitionKey, int | None]) -> None:
        for tp, start in starts.items():
            self._held.discard(tp)
            self._place(tp, start)

    def consume(self, max_records: int, timeout_s: float) -> Sequence[MemoryRecord]:
        records = _poll(self._log, self._positions, max_records, timeout_s)
        for record in records:
            self._positions[(record.topic(), record.partition())] = record.offset() + 1
        return records

    def rewind(self, starts: Mapping[TopicPartitionKey, int]) -> None:
        self._positions.update(starts)

    def group_metadata(self) -> object:
        return self._group

    def lag(self) -> Mapping[TopicPartitionKey, int]:
        return {
            tp: max(self._log.stable_end(*tp) - position, 0)
            for tp, position in list(self._positions.items())
        }

    def quiet(self, topic: str, partition: int) -> bool:
        position = self._positions.get((topic, partition))
        return position is not None and self._log.end(topic, partition) <= position

    def group_state(self) -> str:
        return ""

    def close(self) -> None:
        self._positions.clear()


class MemoryTransactionalLog:
    """The processor's output (:class:`processor.log.TransactionalLog`). Constructing one
    fences the previous producer of the same transactional id. ``close`` leaves an open
    transaction open, as a crashed process does, until the next producer of the id."""

    commit_settle_s = 0.0  # a commit is complete when it returns

    def __init__(self, log: MemoryLog, transactional_id: str) -> None:
        self._log = log
        self._id = transactional_id
        self._epoch = log.init_producer(transactional_id)
        self._tracked: dict[TopicPartitionKey, int] = {}
        self.raw_produce: Callable[..., None] = self.produce

    def drain(self) -> None:
        """Nothing is queued: every produce is written at once."""

    def produce_error(self, exc: Exception) -> SowError | None:
        return exc if isinstance(exc, SowError) else None

    def begin(self) -> None:
        self._tracked = {}

    def produce(
        self, topic: str, value: Payload, key: Payload, partition: int, headers: MaybeHeaders = None
    ) -> None:
        self._log.produce_in(self._id, self._epoch, topic, partition, key, value, headers)

    def produce_tracked(self, topic: str, value: bytes | None, key: bytes, partition: int) -> None:
        offset = self._log.produce_in(self._id, self._epoch, topic, partition, key, value, None)
        self._tracked[(topic, partition)] = offset

    def send_offsets(self, offsets: Mapping[TopicPartitionKey, int], group: object) -> None:
        self._log.add_offsets(self._id, self._epoch, str(group), offsets)

    def commit(self) -> dict[TopicPartitionKey, int]:
        self._log.end_transaction(self._id, self._epoch, commit=True)
        return dict(self._tracked)

    def abort(self) -> None:
        self._log.end_transaction(self._id, self._epoch, commit=False)

    def close(self) -> None:
        """Nothing to release (an open transaction stays open: see the class docstring)."""


class MemoryReader:
    """Reads partitions of a :class:`MemoryLog` between offsets: restores and replays
    (:class:`processor.log.PartitionReader`) and bookmark replays and the history index
    (:class:`processor.log.ChangelogReader`)."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log
        self.last_end_offset = -1

    def read_to_end(
        self, topic: str, partition: int, start: int
    ) -> Iterator[Sequence[MemoryRecord]]:
        end = self._log.stable_end(topic, partition)
        self.last_end_offset = end
        yield from self.read_range(topic, partition, start, end)

    def read_range(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[Sequence[MemoryRecord]]:
        position = start
        while position < end:
            batch = self._log.read(topic, partition, position, end, BATCH)
            if not batch:
                return
            position = batch[-1].offset() + 1
            yield batch

    def end_offset_estimate(self, topic: str, partition: int) -> int | None:
        return self._log.stable_end(topic, partition)

    def earliest_offset(self, topic: str, partition: int) -> int:
        return 0

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        end = self._log.stable_end(topic, partition)
        for batch in self.read_range(topic, partition, 0, end):
            for record in batch:
                if record.timestamp()[1] >= timestamp_ms:
                    return record.offset()
        return end

    def close(self) -> None:
        """Nothing to release."""


class MemoryChangelogTail:
    """Follows partitions of a :class:`MemoryLog` (:class:`processor.log.ChangelogTail`);
    a partition whose end falls below the tail's position is read again from 0."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log
        self._position: dict[TopicPartitionKey, int] = {}
        self._at_end: dict[TopicPartitionKey, bool] = {}
        self._confirmed: dict[TopicPartitionKey, float | None] = {}

    def assign(self, partitions: Sequence[tuple[str, int, int]]) -> None:
        for topic, partition, offset in partitions:
            self.seek(topic, partition, _start(self._log, (topic, partition), offset))

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._position[(topic, partition)] = offset
        self._at_end[(topic, partition)] = False
        self._confirmed.setdefault((topic, partition), None)

    def consume(self, max_records: int, timeout_s: float) -> Sequence[MemoryRecord]:
        for tp, position in list(self._position.items()):
            if self._log.stable_end(*tp) < position:
                self.seek(tp[0], tp[1], 0)
        records = _poll(self._log, self._position, max_records, timeout_s)
        for record in records:
            self._position[(record.topic(), record.partition())] = record.offset() + 1
        now = time.monotonic()
        for (topic, partition), reached in list(self._position.items()):
            end = self._log.stable_end(topic, partition)
            position = reached
            if position < end and not self._log.read(topic, partition, position, end, 1):
                # Only transaction markers and aborted records lie between: skip them.
                self._position[(topic, partition)] = position = end
            self._at_end[(topic, partition)] = position >= end
            if position >= end:
                self._confirmed[(topic, partition)] = now
        return records

    def states(self) -> Mapping[TopicPartitionKey, TailState]:
        return {
            tp: TailState(
                position, self._log.stable_end(*tp), self._at_end[tp], self._confirmed[tp]
            )
            for tp, position in self._position.items()
        }

    def close(self) -> None:
        self._position.clear()


class MemoryEndOffsets:
    """Where partitions end (:class:`processor.log.EndOffsets`)."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log

    def ends(
        self, partitions: Sequence[TopicPartitionKey], timeout_s: float
    ) -> Mapping[TopicPartitionKey, int]:
        return {tp: self._log.stable_end(*tp) for tp in partitions}

    def close(self) -> None:
        """Nothing to release."""


class _Delivered:
    """A delivery whose results are all known (:class:`processor.log.Delivery`)."""

    def __init__(self, results: list[LogPosition | Exception]) -> None:
        self._results = results

    def wait(self, timeout_s: float) -> bool:
        return True

    def results(self) -> list[LogPosition | Exception]:
        return self._results


class MemoryLogWriter:
    """Writes commands to a :class:`MemoryLog` (:class:`processor.log.LogWriter`): each
    record is written when submitted, outside any transaction."""

    def __init__(self, log: MemoryLog) -> None:
        self._log = log
        self.max_record_bytes = log.max_record_bytes

    def submit(self, records: Iterable[LogRecord]) -> _Delivered:
        results: list[LogPosition | Exception] = []
        for topic, key, value, partition, headers in records:
            try:
                results.append(
                    (topic, partition, self._log.append(topic, partition, key, value, headers))
                )
            except RecordTooLargeError as exc:
                results.append(MessageTooLargeError(str(exc)))
        return _Delivered(results)

    def close(self) -> None:
        """Nothing to release."""
