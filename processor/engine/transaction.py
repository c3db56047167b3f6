"""The transaction object: one batch of log records applied as a unit, and its cache.

A :class:`Transaction` owns what the batch changed until it commits: per store partition
a :class:`PartitionBatch` holding the batch's writes (which reads see before the store),
its due-index changes and how far it read each input. Every call checks the transaction's
status: once it failed or completed, its batches refuse reads and writes
(TransactionStateError), so a failed batch can never leak into the next one. The commit
protocol (:func:`processor.engine.commit.commit`) writes the batches to the stores.

Writing a record: :meth:`PartitionBatch.write` is the one way a record of a SOW topic (or
of a derived topic) changes. It produces the changelog record in the transaction (the
envelope, or a tombstone whose headers say why: ``sow.reason`` and the ``sow.position`` of
the command behind it), caches the write for the commit, and records the change event.
Every record the transaction produces goes through its ``produce``, made by
:func:`retrying` over the producer's raw one: the one place that waits while the
producer's queue is full.

Change events: every write of a record (publish, delete, expiry) is also a
:class:`~processor.changelog.events.ChangeEvent` (old value, new value, position,
reason). The :class:`ChangeListener` objects of the record's topic each give every batch
a :data:`~processor.changelog.events.Listener`, the interface the read replica's
listeners implement too; the batch hands it its changes, in log order, as the commit
begins (:meth:`Transaction.flush`). Expiry's due index is one
(:class:`processor.engine.expiry.DueIndex`); views and queues plug in the same way, and
may write to the batch they listen to, and produce to the log in the transaction
(:meth:`PartitionBatch.produce`), so what they derive commits exactly once with the
change. A derived topic (a view) also keeps state beside its records
(:meth:`PartitionBatch.put_state`): changelog control records under ``STATE_PREFIX``,
restored into the store's meta column, written there at commit with the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any, Protocol

from processor.changelog import (
    DELETED,
    EXPIRED,
    POSITION_HEADER,
    REASON_HEADER,
    STATE_PREFIX,
    format_position,
)
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.partition import PartitionState
from processor.errors import TransactionStateError
from processor.log import Headers, LogRecord


class TransactionStatus(Enum):
    """STARTED -> PREPARED -> COMPLETE, or FAILED from any state. FAILED is final."""

    STARTED = "started"
    PREPARED = "prepared"
    COMPLETE = "complete"
    FAILED = "failed"


_STARTED = TransactionStatus.STARTED


class ChangeListener(Protocol):
    """Fed the changes the engine makes to one SOW topic, inside the transactions that
    make them (single-threaded: the processor's loop)."""

    #: Whether the listener reads ``event.old``: the engine reads a record's previous
    #: value only when a listener of its topic needs it (else ``old`` is None).
    needs_old: bool

    def listen(self, batch: PartitionBatch) -> Listener:
        """The listener of one partition's batch: called once, before the batch commits,
        with its changes in log order. It may change ``batch`` (its own entries), never
        another partition's."""
        ...


#: The change listeners of each SOW topic, by topic name.
Listeners = Mapping[str, Sequence[ChangeListener]]

#: Produces one record in the transaction: ``produce(topic, value, key, partition,
#: headers)``, waiting while the producer's queue is full (see :func:`retrying`).
Produce = Callable[[str, bytes | None, bytes | None, int, "list[tuple[str, bytes]] | None"], None]

_EXPIRE = ChangeReason.EXPIRE
#: The headers of the tombstone of an expiry no command caused (offset -1).
_EXPIRED_ALONE = [(REASON_HEADER, EXPIRED)]


def retrying(raw_produce: Callable[..., None], drain: Callable[[], None]) -> Produce:
    """The transactions' produce over a producer's raw ``raw_produce(topic, value, key,
    partition, headers=None)``, which raises BufferError while its queue is full: then
    ``drain`` (wait briefly for queued records to be sent) and try again. Anything else
    ``raw_produce`` raises goes to the caller (a record over the size limit is that
    record's failure: :meth:`processor.engine.dead_letter.DeadLetters.failure`)."""

    def produce(
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        while True:
            try:
                if headers is None:
                    raw_produce(topic, value, key, partition)
                else:
                    raw_produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                drain()

    return produce


#: The derived partitions this processor owns (recovered) that can take changes directly,
#: in the transaction that makes them, by (SOW topic, partition): their state and their
#: logic (:class:`~processor.engine.derived.Direct`), which says when it is ready.
Local = Mapping[tuple[str, int], tuple[PartitionState, Any]]


def _no_log(*_: object) -> None:
    raise TransactionStateError("this transaction has no log to produce to")


class Transaction:
    """One batch: its status and, per store partition it touched, its cache.

    ``now_ms`` is the batch's apply time; ``listeners`` are fed the changes of each topic's
    records; ``produce`` writes to the log in the transaction; ``handed``: the records
    produced that may also be handed over before the commit
    (:meth:`PartitionBatch.hand_over`). Not thread-safe: the processor's loop owns it.
    """

    __slots__ = (
        "_batches",
        "handed",
        "listeners",
        "local",
        "now_ms",
        "number",
        "produce",
        "status",
    )

    def __init__(
        self,
        number: int,
        now_ms: int,
        listeners: Listeners | None = None,
        produce: Produce = _no_log,
        local: Local | None = None,
    ) -> None:
        self.number = number
        self.now_ms = now_ms
        self.listeners: Listeners = listeners or {}
        self.produce = produce
        self.local: Local = local or {}
        self.status = _STARTED
        self._batches: dict[PartitionState, PartitionBatch] = {}
        self.handed: list[LogRecord] = []

    def check_open(self) -> None:
        """Raise TransactionStateError unless the transaction is still being applied."""
        if self.status is not _STARTED:
            raise TransactionStateError(
                f"transaction {self.number} is {self.status.value}: its batch can no longer "
                "be read or changed"
            )

    def batch(self, state: PartitionState) -> PartitionBatch:
        """The cache of ``state`` in this transaction (the partition counts as touched
        from then on: it commits with the transaction)."""
        self.check_open()
        batch = self._batches.get(state)
        if batch is None:
            batch = self._batches[state] = PartitionBatch(self, state)
        return batch

    def flush(self) -> None:
        """Hand every batch's changes to its listeners (the commit's first step), until
        none is left: a listener may change another partition directly (a view's feed,
        :attr:`local`), whose changes then go to its own listeners."""
        while True:
            pending = [batch for batch in self._batches.values() if batch.pending]
            if not pending:
                return
            for batch in pending:
                batch.flush()

    @property
    def batches(self) -> list[PartitionBatch]:
        """The touched partitions' caches, in the order they were first touched."""
        return list(self._batches.values())

    def advance(self, expected: TransactionStatus, new: TransactionStatus) -> None:
        """Move from ``expected`` to ``new``; anything else is a programming error."""
        if self.status is not expected:
            raise TransactionStateError(
                f"transaction {self.number} is {self.status.value}, expected {expected.value}"
            )
        self.status = new

    def fail(self) -> None:
        """Mark the transaction failed (allowed from any state but COMPLETE)."""
        if self.status is TransactionStatus.COMPLETE:
            raise TransactionStateError(f"transaction {self.number} already completed")
        self.status = TransactionStatus.FAILED


class PartitionBatch:
    """One store partition's part of a transaction.

    ``writes`` maps SowKey -> envelope (None: deleted) for records the batch changed;
    ``due`` maps due-index key -> b"" (add) or None (drop); ``meta`` maps a derived
    topic's state keys to their values (None: deleted), see :meth:`put_state`;
    ``progress`` is the next input offset per log topic the batch read. Reads and writes
    check the transaction is open.
    """

    __slots__ = (
        "_changelog",
        "_events",
        "_listeners",
        "_needs_old",
        "_transaction",
        "due",
        "meta",
        "progress",
        "state",
        "writes",
    )

    def __init__(self, transaction: Transaction, state: PartitionState) -> None:
        self._transaction = transaction
        self.state = state
        self.writes: dict[bytes, bytes | None] = {}
        self.due: dict[bytes, bytes | None] = {}
        self.meta: dict[bytes, bytes | None] = {}
        self.progress: dict[str, int] = {}
        self._changelog = state.topic.changelog_topic
        listeners = transaction.listeners.get(state.topic.name, ())
        self._needs_old = any(listener.needs_old for listener in listeners)
        self._listeners: list[Listener] = [listener.listen(self) for listener in listeners]
        self._events: list[ChangeEvent] = []

    @property
    def now_ms(self) -> int:
        """The transaction's apply time."""
        return self._transaction.now_ms

    @property
    def number(self) -> int:
        """The transaction's number (increasing from one transaction to the next)."""
        return self._transaction.number

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Produce one record to the log in this batch's transaction."""
        self._transaction.check_open()
        self._transaction.produce(topic, value, key, partition, headers)

    def hand_over(
        self, topic: str, value: bytes, key: bytes, partition: int, headers: Headers
    ) -> None:
        """:meth:`produce`, and keep the record to hand over before the commit (a live
        feed, :mod:`processor.engine.live`, sends it; without one it is only produced):
        for records whose reader takes each thing they hold once, whichever copy comes
        first, and loses nothing if the transaction aborts (at-least-once leases)."""
        self.produce(topic, value, key, partition, headers)
        self._transaction.handed.append((topic, key, value, partition, headers))

    def put_state(self, key: bytes, value: bytes | None) -> None:
        """Keep ``value`` (None: delete) under ``STATE_PREFIX + key`` for this partition:
        a changelog control record now, the store's meta column at commit (recovery
        restores it from the control record)."""
        full = STATE_PREFIX + key
        self.produce(self._changelog, value, full, self.state.partition)
        self.meta[full] = value

    def get_state(self, key: bytes) -> bytes | None:
        """The value kept under ``STATE_PREFIX + key``, this batch's changes included."""
        full = STATE_PREFIX + key
        meta = self.meta
        if full in meta:
            return meta[full]
        return self.state.store.get_meta(full)

    def write(
        self,
        sow_key: bytes,
        new: bytes | None,
        reason: ChangeReason,
        log_topic: str,
        offset: int,
        expiration_ms: int | None = None,
    ) -> None:
        """Change a SowKey to ``new`` (an envelope; None: deleted), as the record at
        ``offset`` of ``log_topic`` (-1: none, an expiry) makes it: produce its changelog
        record (key the SowKey, value ``new``; a tombstone says why in its headers, see
        :func:`tombstone_headers`), cache the write, and record the change event for the
        topic's listeners. ``expiration_ms``: the new record's expiration (None: never).

        What producing raises (a record over the size limit) leaves the batch unchanged.
        """
        transaction = self._transaction
        if transaction.status is not _STARTED:
            transaction.check_open()
        partition = self.state.partition
        headers = (
            None if new is not None else tombstone_headers(reason, log_topic, partition, offset)
        )
        if not self._listeners:
            transaction.produce(self._changelog, new, sow_key, partition, headers)
            self.writes[sow_key] = new
            return
        old = self.lookup(sow_key) if self._needs_old else None
        transaction.produce(self._changelog, new, sow_key, partition, headers)
        self.writes[sow_key] = new
        position = (log_topic, partition, offset)
        self._events.append(
            ChangeEvent(self.state.topic.name, sow_key, old, new, position, reason, expiration_ms)
        )

    @property
    def pending(self) -> bool:
        """Whether changes wait to be handed to the listeners."""
        return bool(self._events)

    def local(self, topic: str, partition: int) -> tuple[PartitionBatch, Any] | None:
        """The batch and logic of a derived partition this processor owns, which takes
        changes in this transaction (:class:`~processor.engine.derived.Direct`); None:
        send them through its input."""
        found = self._transaction.local.get((topic, partition))
        if found is None:
            return None
        state, logic = found
        return self._transaction.batch(state), logic

    def flush(self) -> None:
        """Hand the changes made since the last flush to the listeners."""
        self._transaction.check_open()
        events, self._events = self._events, []
        if events:
            for listener in self._listeners:
                listener(events)

    def lookup(self, sow_key: bytes) -> bytes | None:
        """The current envelope of a SowKey, this batch's writes included (and those of
        the partition's batch whose commit is in flight, :attr:`PartitionState.inflight`)."""
        if self._transaction.status is not _STARTED:
            self._transaction.check_open()
        writes = self.writes
        if sow_key in writes:
            return writes[sow_key]
        state = self.state
        inflight = state.inflight
        if inflight is not None and sow_key in inflight:
            return inflight[sow_key]
        return state.store.get(sow_key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every current (SowKey, envelope), this batch's writes included (and the batch
        in flight's); the caller must not write while iterating."""
        self._transaction.check_open()
        writes = {**(self.state.inflight or {}), **self.writes}
        for sow_key, envelope in self.state.store.items():
            if sow_key not in writes:
                yield sow_key, envelope
        for sow_key, written in writes.items():
            if written is not None:
                yield sow_key, written

    def reached(self, log_topic: str, next_offset: int) -> None:
        """Note that the batch read ``log_topic`` up to (not including) ``next_offset``."""
        self._transaction.check_open()
        self.progress[log_topic] = next_offset


def tombstone_headers(
    reason: ChangeReason, log_topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """The headers of the changelog tombstone of a delete (``sow.reason: deleted``) or an
    expiry (``expired``), with the ``sow.position`` of the command behind it; an expiry
    no command caused (``offset`` -1, the engine's :mod:`~processor.engine.expiry`) has
    none."""
    if reason is _EXPIRE:
        if offset < 0:
            return _EXPIRED_ALONE
        reason_value = EXPIRED
    else:
        reason_value = DELETED
    return [
        (REASON_HEADER, reason_value),
        (POSITION_HEADER, format_position(log_topic, partition, offset)),
    ]
