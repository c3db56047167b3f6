"""The transaction log and changelogs: interfaces the engine and query code depend on.

Only the adapters in this package import confluent-kafka. The engine sees records through
the :class:`Record` protocol (which confluent-kafka's ``Message`` satisfies without
wrapping, keeping the hot path free of per-record copies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from processor.errors import SowError

#: The level notices of a lost or truncated log are logged at (see :func:`expect_new_logs`).
_lost_log_level = [logging.WARNING]


def expect_new_logs() -> None:
    """In this process a log that is new at start is normal (the broker's log ends with
    the process that started it): notices that a log was lost or truncated are logged at
    INFO from now on, not WARNING."""
    _lost_log_level[0] = logging.INFO


def lost_log_level() -> int:
    """The level to log a lost or truncated log at."""
    return _lost_log_level[0]


Headers = list[tuple[str, bytes]]
#: Record headers, or none.
MaybeHeaders = Headers | None
#: A record's key or value (None: a tombstone, or no key).
Payload = bytes | None
TopicPartitionKey = tuple[str, int]
#: A record's place in the log: (topic, partition, offset).
LogPosition = tuple[str, int, int]


class Record(Protocol):
    """One record read from a log."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> Headers | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def error(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic the product needs, with its partition count and topic configuration."""

    name: str
    partitions: int
    config: Mapping[str, str]


#: Called with the assigned partitions and the group's committed offsets (-1: none);
#: returns explicit start offsets for some of them (the others resume where committed),
#: or None for a partition to hold (not fetched) until :meth:`InputLog.resume`.
OnAssign = Callable[
    [Sequence[TopicPartitionKey], Mapping[TopicPartitionKey, int]],
    Mapping[TopicPartitionKey, int | None],
]
OnRevoke = Callable[[Sequence[TopicPartitionKey]], None]


class InputLog(Protocol):
    """The consumer side of the processor.

    Two ways to get partitions: as a consumer-group member (``on_assign`` and
    ``on_revoke`` run inside ``consume`` on rebalances), or, in static assignment mode (one
    processor instance owns every partition), all partitions of the topics at once,
    ``on_assign`` running inside ``subscribe``. Both commit offsets through the
    transactions with :meth:`group_metadata` and read them back as ``committed``.

    A group member's callbacks carry either the whole assignment (an eager rebalance:
    ``on_revoke`` of everything held, then ``on_assign`` of the new set) or only what
    changed (an incremental one: the partitions added, or removed, the rest untouched);
    the caller handles both alike, partition by partition.
    """

    def subscribe(self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke) -> None:
        """Join the group (or assign every partition); ``on_assign`` returns explicit start
        offsets, or None to hold a partition back (the others resume where committed)."""
        ...

    def resume(self, starts: Mapping[TopicPartitionKey, int | None]) -> None:
        """Resume held partitions, from the given offset or (None) where committed."""
        ...

    def consume(self, max_records: int, timeout_s: float) -> Sequence[Record]:
        """Up to ``max_records`` records; rebalance callbacks run inside this call."""
        ...

    def rewind(self, starts: Mapping[TopicPartitionKey, int]) -> None:
        """Fetch these assigned partitions again from the given offsets (what was
        consumed after them and not committed is returned again)."""
        ...

    def group_metadata(self) -> object:
        """The consumer group metadata that transactions commit offsets for."""
        ...

    def lag(self) -> Mapping[TopicPartitionKey, int]:
        """Committed records not yet returned by ``consume``, per fetching partition, as
        of the client's latest statistics (about every second; empty before the first).
        Thread-safe: monitoring reads it from other threads."""
        ...

    def quiet(self, topic: str, partition: int) -> bool:
        """Whether this consumer knows that partition holds no record beyond what it
        returned (False when not known: not assigned, or no fetch answered yet); from the
        poll loop's thread."""
        ...

    def group_state(self) -> str:
        """ "" while the consumer is a steady group member (or joins no group), else its
        group state as of the latest statistics, e.g. ``up/wait-join``; thread-safe."""
        ...

    def close(self) -> None: ...


class EndOffsets(Protocol):
    """Asks the broker where partitions end, on a connection of its own (the processor's
    watchdog: it must get an answer while the consumer is stuck)."""

    def ends(
        self, partitions: Sequence[TopicPartitionKey], timeout_s: float
    ) -> Mapping[TopicPartitionKey, int] | None:
        """The read_committed end (last stable offset) of each partition, or None when
        the broker did not answer within ``timeout_s`` (asked even when ``partitions`` is
        empty: then the answer is ``{}`` or None)."""
        ...

    def close(self) -> None: ...


class TransactionalLog(Protocol):
    """The producer side of the processor: everything it writes, in Kafka transactions."""

    #: ``raw_produce(topic, value, key, partition, headers=None)`` with no wrapper: the hot
    #: path's produce. Raises BufferError when the queue is full; call ``drain`` and retry.
    raw_produce: Callable[..., None]

    def drain(self) -> None:
        """Wait briefly for queued records to be sent (after a BufferError)."""
        ...

    def produce_error(self, exc: Exception) -> SowError | None:
        """Translate an exception ``raw_produce`` raised (other than BufferError):
        RecordTooLargeError when that one record is over the size limit (nothing was
        queued), BrokerError or FencedError for a failure of the log, None when the
        exception did not come from the log client."""
        ...

    #: Seconds after a commit before the next transaction should begin writing: a log
    #: that finishes a commit in the background (Kafka writes the transaction markers after
    #: the commit returns) answers a transaction begun sooner with retries. The processor
    #: gathers input meanwhile (0: none needed).
    commit_settle_s: float

    def begin(self) -> None: ...

    def produce(
        self, topic: str, value: Payload, key: Payload, partition: int, headers: MaybeHeaders = None
    ) -> None: ...

    def produce_tracked(self, topic: str, value: bytes | None, key: bytes, partition: int) -> None:
        """Produce a record whose offset ``commit`` reports (one per topic partition)."""
        ...

    def send_offsets(self, offsets: Mapping[TopicPartitionKey, int], group: object) -> None: ...

    def commit(self) -> dict[TopicPartitionKey, int]:
        """Commit; return the offset of the last tracked record per (topic, partition)."""
        ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class PartitionReader(Protocol):
    """Reads a partition from an offset to its end (restores and replays)."""

    #: The end offset the last ``read_to_end`` stopped at (-1 before any).
    last_end_offset: int

    def read_to_end(self, topic: str, partition: int, start: int) -> Iterator[Sequence[Record]]:
        """Batches of records from ``start`` until the end seen when reading began.

        The end is decided from fetched positions (partition EOF), never from a single
        ListOffsets answer. Control records of transactions are skipped.
        """
        ...

    def end_offset_estimate(self, topic: str, partition: int) -> int | None:
        """A rough end offset for progress reporting (may under-report)."""
        ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset at or after a timestamp (the end offset if none)."""
        ...

    def close(self) -> None: ...


class ChangelogReader(Protocol):
    """Reads retained changelog records between offsets (bookmark replays, the history
    index): read_committed, group-less. Not thread-safe: one per reading thread."""

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The earliest offset the partition still retains (its low watermark)."""
        ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose record time is at or after ``timestamp_ms`` (the end
        offset when there is none)."""
        ...

    def read_range(
        self, topic: str, partition: int, start: int, end: int
    ) -> Iterator[Sequence[Record]]:
        """Batches of the records at offsets ``start <= offset < end``, in order; stops
        at the partition's end if that comes first. Transaction markers are skipped."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TailState:
    """What fetches have shown about one followed changelog partition.

    ``position`` is the next offset the tail reads from: past every record ``consume``
    returned and past control records (transaction markers) it skipped. ``end`` is the
    partition's committed end as the latest fetch response reported it (-1: none yet).
    ``at_end`` is True when a fetch answered after the last record ``consume`` returned
    showed nothing more committed (partition EOF): everything committed so far is in the
    caller's hands. ``confirmed_at`` is the ``time.monotonic()`` of the latest fetch
    response that showed the partition had nothing beyond ``position`` (None: never).
    """

    position: int
    end: int
    at_end: bool
    confirmed_at: float | None


class ChangelogTail(Protocol):
    """Follows changelog partitions continuously (the query service's read replica).

    Reads committed data only. "At the end" is decided from fetched positions (partition
    EOF and the end offsets fetch responses carry), never from ListOffsets, which some
    brokers under-report. A partition whose end falls below the tail's position (the
    broker lost its log) is read again from offset 0: its next records, or its state's
    ``position``, go backwards.
    """

    def assign(self, partitions: Sequence[tuple[str, int, int]]) -> None:
        """Read these (topic, partition, start offset) from now on."""
        ...

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read an assigned partition from ``offset`` on (records fetched before are
        dropped; its state's ``position`` becomes ``offset``)."""
        ...

    def consume(self, max_records: int, timeout_s: float) -> Sequence[Record]:
        """Up to ``max_records`` data records, in offset order per partition, waiting up
        to ``timeout_s`` for the first. Partition-end events and errors a retry cures are
        not returned: they update :meth:`states` (and the log)."""
        ...

    def states(self) -> Mapping[TopicPartitionKey, TailState]:
        """Each assigned partition's state as of the records ``consume`` returned so far."""
        ...

    def close(self) -> None: ...


def read_ready(tail: ChangelogTail, most: int, wait_s: float) -> Sequence[Record]:
    """Up to ``most`` records: what the tail already holds, else whatever arrives within
    ``wait_s`` (a read waits for all it asks for, so it waits for one record only and
    then takes what came with it). The adaptive read of every tail that follows a log
    live."""
    records = tail.consume(most, 0)
    if records:
        return records
    records = tail.consume(1, wait_s)
    if records:
        return [*records, *tail.consume(most - 1, 0)]
    return records


@dataclass(frozen=True, slots=True)
class ProcessorConnections:
    """Factories for the processor's log clients (built by a log backend, processor.app)."""

    input_log: Callable[[], InputLog]
    transactional_log: Callable[[], TransactionalLog]
    reader: Callable[[], PartitionReader]
    #: Where the input partitions end, for the watchdog (None: no watchdog).
    end_offsets: Callable[[], EndOffsets] | None = None


LogRecord = tuple[str, bytes | None, bytes | None, int, Headers | None]
"""A record to write: (topic, key, value, partition, headers)."""


class Delivery(Protocol):
    """The outcome of records handed to a :class:`LogWriter`, filled in as the broker
    acknowledges them. Thread-safe."""

    def wait(self, timeout_s: float) -> bool:
        """Block until every record is acknowledged or failed; False on timeout."""
        ...

    def results(self) -> list[tuple[str, int, int] | Exception]:
        """Per record, in submission order: its (topic, partition, offset), or the error
        that refused it (a :class:`processor.errors.SowError`). Only after ``wait`` said
        True."""
        ...


class LogWriter(Protocol):
    """Writes commands to the log asynchronously (the publish and delete gateway).

    ``submit`` never waits for the broker: records join the producer's batches (a small
    linger lets concurrent callers share produce requests) and the returned Delivery
    fills in as acknowledgements arrive. Thread-safe.
    """

    #: The largest record (key + value + headers) the writer accepts, in bytes.
    max_record_bytes: int

    def submit(self, records: Iterable[LogRecord]) -> Delivery:
        """Hand records to the producer and return at once; ``records`` is read once, in
        step with producing (a generator need not be materialised). A record the producer refuses
        (over ``max_record_bytes``: MessageTooLargeError; queue full for long: BrokerError)
        is not written and its result is that error; the others are unaffected."""
        ...

    def close(self) -> None: ...
