"""Derived topics: SOW topics whose records the processor computes from other topics'
changes instead of reading them from publishers (views, :mod:`processor.views`).

A derived topic's input is a Kafka topic that only the processor writes: listeners of
the topics it derives from (:class:`~processor.engine.transaction.ChangeListener`)
produce to it in the transactions of the changes. The engine reads that input like any
other and hands each partition's records, in runs, to the topic's
:class:`DerivedPartition`, which writes the derived records into the batch (and, through
:meth:`~processor.engine.transaction.PartitionBatch.put_state`, the state it keeps beside
them). What it writes commits with its input offsets, exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Protocol, runtime_checkable

from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch, Transaction
from processor.log import Record

#: Where a record that cannot be applied goes: the dead-letter topic, with the reason
#: (it raises when the failure is the broker's or the store's, not the record's).
Rejects = Callable[[Record, Exception], None]


class DerivedPartition(Protocol):
    """One partition of a derived topic in the processor; not thread-safe (the
    processor's loop owns it).

    An optional attribute ``pipelines`` (False when absent) says whether its
    transactions may commit in the background while the next batch is applied
    (:mod:`processor.engine.pipeline`): True only for a partition that reads its
    committed state when it is opened or after :meth:`discard`, and otherwise only
    through ``PartitionBatch.lookup`` (which sees the batch in flight), never
    ``get_state`` or its store directly.
    """

    #: (state key, value): the version of the definition its state was computed by. A
    #: partition whose state has another version starts afresh before it applies
    #: anything (:func:`processor.engine.feeding.reset_steps`).
    version: tuple[bytes, bytes]

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        """Apply a run of the partition's input records (offset order) into ``batch``."""
        ...

    def discard(self) -> None:
        """Forget what an aborted transaction changed (its records will come again)."""
        ...


class DerivedTopic(Protocol):
    """Makes the partitions of one derived topic."""

    def open(self, state: PartitionState) -> DerivedPartition:
        """The derived partition of a store partition, opened after its recovery began
        (it reads the store lazily)."""
        ...


@runtime_checkable
class Ticking(Protocol):
    """A derived partition with work due at times rather than on input (a conflated
    topic writes its pending records once per interval). The processor asks
    :meth:`due` after every batch and every idle wait (at most ``IDLE_WAIT_S`` apart)
    and, when it is, calls :meth:`tick` in a transaction."""

    def due(self, now_ms: int) -> bool:
        """Whether work is due by ``now_ms``."""
        ...

    def tick(self, batch: PartitionBatch, now_ms: int, reject: Rejects) -> None:
        """Do the work due, into ``batch``; what fails for one record's own reasons goes
        to ``reject`` (as the input record that brought it) and the rest is done."""
        ...


#: The store partitions this processor owns and has recovered, by (SOW topic, partition).
Owned = Mapping[tuple[str, int], PartitionState]


class Timed(Protocol):
    """Work due at times on the store partitions of SOW topics (actions on a schedule,
    message condition timeouts: :mod:`processor.actions`), done by whichever processor
    owns each partition, in a transaction. The processor asks :meth:`due` after every
    batch and every idle wait (at most ``IDLE_WAIT_S`` apart) and, when it is, calls
    :meth:`run` at the start of the next transaction. What it writes (through the
    partitions' batches: ``put_state``, ``produce``, ``write``) commits exactly once
    with it."""

    def due(self, owned: Owned, now_ms: int) -> bool:
        """Whether work is due by ``now_ms`` on any of ``owned`` (cheap: called often)."""
        ...

    def run(self, transaction: Transaction, owned: Owned) -> None:
        """Do the work due at the transaction's time on ``owned``, into its batches."""
        ...


def due_timers(
    timers: Sequence[Timed],
    states: Owned,
    recovering: Container[tuple[str, int]],
    now_ms: int,
) -> tuple[list[Timed], Owned]:
    """The timers with work due by ``now_ms``, and the partitions they act on: those of
    ``states`` not ``recovering`` (nothing is computed without timers)."""
    if not timers:
        return [], {}
    owned = {key: state for key, state in states.items() if key not in recovering}
    return [timer for timer in timers if timer.due(owned, now_ms)], owned


@runtime_checkable
class Direct(Protocol):
    """A derived partition that takes its changes in the transaction that makes them,
    when this processor owns it, instead of through its input topic (a view of one topic).

    Its input may still hold changes an earlier owner of an underlying partition sent
    before this processor took that partition; a later change must not overtake them. So
    after every assignment the processor writes a *barrier* to its input
    (:meth:`barrier`), and until the partition reads it back (``ready``) the changes made
    here wait in its state, in order, to be applied as it reads the barrier."""

    #: Whether it has read back its latest barrier.
    ready: bool
    #: Whether a barrier must be written (set after an assignment).
    barrier_due: bool

    def barrier(self) -> tuple[bytes, list[tuple[str, bytes]]]:
        """A new barrier (key, headers) for its input partition; until it is read back,
        :attr:`ready` is False."""
        ...


@runtime_checkable
class Closing(Protocol):
    """A derived partition told when the processor closes it (revoked, or dropped at
    the end), after its last transaction."""

    def close(self) -> None:
        """The partition is closed: it applies nothing more here."""
        ...
