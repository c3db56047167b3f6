"""The processor's batches: applied, handed over live, committed; pipelined (issue 34).

A batch is applied and committed in turn, one Kafka transaction at a time, as the commit
protocol says (:mod:`processor.engine.commit`), unless its transaction is simple (below):
then its commit runs on a thread of its own (:class:`InFlight`) while the loop goes on
applying what arrives into the next transaction (and, with a live feed,
:mod:`processor.engine.live`, hands it over at once): only the Kafka commit itself is
serial. A record that arrives during a commit no longer waits for it to be delivered,
and a queue's acknowledgements are applied while the leases before them commit.

What makes it safe:

* **Only simple transactions are committed in the background**: every batch is of a
  live topic (no expiration, no derived state) or of a derived partition that reads
  what it committed only through the batch (:attr:`DerivedPartition.pipelines`: a
  queue and its relay; not a view or a conflated topic). Any other commits on the loop,
  as before.
* **The next transaction reads what the one in flight wrote**: each partition's batch in
  flight is its :attr:`PartitionState.inflight` until it is in the store; the
  publishers' sequences it took are still seen (:meth:`PublisherSequences.take`).
* **Its records wait**: the Kafka transaction of the next batch begins only once the
  previous one committed; until then what it produces is held (:class:`GatedProduce`)
  and then produced in order.
* **Anything else first settles**: a rebalance callback, a recovery step, offsets or
  barriers written in a transaction of their own, and the loop's end wait for the commit
  in flight and commit the batch being gathered (:meth:`Batches.settle`).
* **Failures**: a commit that fails in the background fails the pipeline, which starts
  again from the committed offsets; one whose offsets the group refused reads both
  batches again (:mod:`processor.engine.refusals`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from processor.engine.apply import Applier
from processor.engine.assignment import Assignment
from processor.engine.commit import CrashHook, Prepared, finish, prepare
from processor.engine.derived import DerivedPartition, Owned, Ticking, Timed
from processor.engine.expiry import Expirer
from processor.engine.live import LiveFeed
from processor.engine.partition import PartitionState
from processor.engine.refusals import GroupRefusals
from processor.engine.transaction import Listeners, Produce, Transaction, TransactionStatus
from processor.errors import BrokerError, StaleGroupError
from processor.log import InputLog, Record, TopicPartitionKey, TransactionalLog

log = logging.getLogger(__name__)


class GatedProduce:
    """The transactions' produce: straight to the producer, or held while the previous
    transaction commits (:meth:`hold`, then :meth:`release` once the next one began)."""

    def __init__(self, produce: Produce) -> None:
        self._produce = produce
        self._held: list[tuple[Any, ...]] | None = None

    def __call__(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        held = self._held
        if held is None:
            self._produce(topic, value, key, partition, headers)
        else:
            held.append((topic, value, key, partition, headers))

    def hold(self) -> None:
        self._held = []

    def release(self) -> None:
        """Produce what was held, in order. A record the producer refuses now (it would
        have been dead-lettered when produced at once) fails the pipeline, which applies
        it again from the committed offsets without holding it."""
        held, self._held = self._held, None
        for record in held or ():
            try:
                self._produce(*record)
            except Exception as exc:  # re-raised as the pipeline's failure, see above
                raise BrokerError(f"a record held during a commit was refused: {exc}") from exc

    def discard(self) -> None:
        self._held = None


@dataclass
class Gathered:
    """A transaction being applied, with the records and offsets it took so far."""

    transaction: Transaction
    counted: tuple[int, int, int]
    records: list[Record] = field(default_factory=list)
    offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)


class InFlight:
    """A prepared transaction committing (:func:`finish`) on a thread of its own."""

    def __init__(
        self, gathered: Gathered, prepared: Prepared, group: object, finishing: Callable[..., Any]
    ) -> None:
        self.gathered = gathered
        self.ends: dict[TopicPartitionKey, int] = {}
        self.error: BaseException | None = None
        self.finished_at = float("inf")
        self._finish = partial(finishing, prepared, offsets=gathered.offsets, group=group)
        self._thread = threading.Thread(target=self._run, name="sow-commit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.ends = self._finish()
        except BaseException as exc:  # handed to the loop, which raises it (landed())
            self.error = exc
        finally:
            self.finished_at = time.monotonic()

    def done(self, settle_s: float = 0.0) -> bool:
        """Whether the commit returned, ``settle_s`` ago at least (the broker writes
        its markers meanwhile: a transaction begun at once waits for them anyway)."""
        return not self._thread.is_alive() and time.monotonic() >= self.finished_at + settle_s

    def wait(self) -> None:
        self._thread.join()


def simple(
    transaction: Transaction,
    live: LiveFeed | None,
    derivations: Mapping[tuple[str, int], DerivedPartition],
) -> bool:
    """Whether the transaction may commit in the background (module doc)."""
    topics = () if live is None else live.topics
    for batch in transaction.batches:
        state = batch.state
        if batch.due:
            return False
        derivation = derivations.get((state.topic.name, state.partition))
        if derivation is not None and getattr(derivation, "pipelines", False):
            continue
        if state.topic.name not in topics or batch.meta:
            return False
    return True


class Batches:
    """One pipeline's batches (module doc). ``landed(records, offsets)`` is told of every
    committed transaction. Single-threaded but for the commit thread it starts."""

    def __init__(
        self,
        producer: TransactionalLog,
        consumer: InputLog,
        applier: Applier,
        assignment: Assignment,
        gate: GatedProduce,
        live: LiveFeed | None,
        refusals: GroupRefusals,
        crash: CrashHook | None,
        landed: Callable[[int, dict[TopicPartitionKey, int]], None],
        pipelined: bool = True,
    ) -> None:
        self._producer, self._consumer, self._applier = producer, consumer, applier
        self._assignment, self._gate, self._live = assignment, gate, live
        self._refusals, self._crash, self._landed = refusals, crash, landed
        self._pipelined = pipelined
        self._number = -1
        self.open: Gathered | None = None
        self.inflight: InFlight | None = None

    @property
    def idle(self) -> bool:
        """Nothing gathered, nothing committing."""
        return self.open is None and self.inflight is None

    def apply(
        self,
        records: Sequence[Record],
        now: tuple[int, int, Listeners],
        expire: Callable[[Transaction], None],
        work: bool = True,
    ) -> None:
        """Apply ``records`` (and expiries and timers, ``expire``) into the transaction
        being gathered; commit it, or hand it to a commit thread, unless one still runs.
        ``now``: the transaction number, apply time and listeners of a new one; without
        ``work`` (no records, nothing due), only land a commit that finished."""
        if work and self.open is None:
            number, now_ms, listeners = now
            number = self._number = max(number, self._number + 1)  # one in flight, one open
            local = self._assignment.local()
            transaction = Transaction(number, now_ms, listeners, self._gate, local)
            self.open = Gathered(transaction, self._applier.counters())
            if self.inflight is None:
                self._producer.begin()
            else:
                self._gate.hold()
            expire(transaction)
        gathered = self.open
        if gathered is not None and records:
            gathered.offsets.update(self._applier.apply(gathered.transaction, records))
            gathered.records.extend(records)
        if self.inflight is not None:
            if gathered is not None and records and self._live is not None:
                gathered.transaction.flush()
                self._live.send(gathered.transaction)
            if not self.inflight.done(self._producer.commit_settle_s) or not self._land():
                return
        if self.open is not None:
            self._commit()

    def unplaced(self) -> list[PartitionState]:
        """When nothing is being committed or recovered, the live partitions whose
        offsets the feed does not know (:meth:`LiveFeed.unplaced`): the next transaction
        touches them (after an assignment, one transaction places all)."""
        if self._live is None or not self.idle or self._assignment.recoveries:
            return []
        return self._live.unplaced(list(self._assignment.states.values()))

    def settle(self) -> None:
        """Wait for the commit in flight, then commit what was gathered, on this thread."""
        if self.inflight is not None:
            self.inflight.wait()
            if not self._land():
                return
        if self.open is not None:
            self._commit(background=False)

    def abandon(self) -> None:
        """The pipeline ends on a failure: let the commit thread finish with the stores
        before they close (its outcome no longer matters)."""
        if self.inflight is not None:
            self.inflight.wait()
            self.inflight = None
        self._gate.discard()
        self.open = None

    def _land(self) -> bool:
        """Take the committed transaction's outcome; then begin the gathered one. False
        when the group refused its offsets: both are read again."""
        inflight, self.inflight = self.inflight, None
        assert inflight is not None
        gathered = inflight.gathered
        for batch in gathered.transaction.batches:
            if batch.state.inflight is batch.writes:
                batch.state.inflight = None
        if isinstance(inflight.error, StaleGroupError):
            self._read_again(inflight.error, gathered, self.open)
            return False
        if inflight.error is not None:
            raise inflight.error
        if self._live is not None:
            self._live.committed(gathered.transaction, inflight.ends)
        self._landed(len(gathered.records), gathered.offsets)
        if self.open is not None:
            self._producer.begin()
            self._gate.release()
        return True

    def _commit(self, background: bool = True) -> None:
        gathered, self.open = self.open, None
        assert gathered is not None
        transaction, live = gathered.transaction, self._live
        if not transaction.batches:
            self._producer.abort()
            self._landed(len(gathered.records), gathered.offsets)
            return
        sent = None if live is None else partial(live.send, transaction)
        prepared = prepare(transaction, self._producer, self._crash, sent)
        if live is not None:
            counts = {state: len(taken) for state, taken in prepared.publishers.items()}
            live.prepared(transaction, counts)
        group = self._consumer.group_metadata()
        derivations = self._assignment.derivations
        if background and self._pipelined and simple(transaction, live, derivations):
            for batch in transaction.batches:
                batch.state.inflight = batch.writes
            self.inflight = InFlight(gathered, prepared, group, self._finishing)
            return
        try:
            ends = self._finishing(prepared, offsets=gathered.offsets, group=group)
        except StaleGroupError as exc:
            self._read_again(exc, gathered, None)
            return
        if live is not None:
            live.committed(transaction, ends)
        self._landed(len(gathered.records), gathered.offsets)

    def _finishing(
        self, prepared: Prepared, offsets: dict[TopicPartitionKey, int], group: object
    ) -> dict[TopicPartitionKey, int]:
        return finish(prepared, self._producer, offsets, group, self._crash)

    def _read_again(
        self, exc: StaleGroupError, committing: Gathered, gathering: Gathered | None
    ) -> None:
        """The group refused the offsets of ``committing``: abort, and read it and what
        was gathered after it again (:meth:`Assignment.read_again`)."""
        records = list(committing.records)
        for gathered in (committing, gathering):
            if gathered is not None and self._live is not None:
                self._live.failed(gathered.transaction)
        if gathering is not None:
            records += gathering.records
            if gathering.transaction.status is TransactionStatus.STARTED:
                gathering.transaction.fail()
        self.open = None
        self._gate.discard()
        self._refusals.refused(self._producer, exc)
        self._assignment.read_again(records)
        self._applier.restore_counters(committing.counted)


def expire_and_tick(
    expirer: Expirer,
    expiring: list[PartitionState],
    ticking: list[tuple[PartitionState, Ticking]],
    now_ms: int,
    reject: Callable[..., None],
    placing: Sequence[PartitionState],
    timed: tuple[Sequence[Timed], Owned],
    transaction: Transaction,
) -> None:
    """A new transaction's expiries and timers (:meth:`Batches.apply`), the partitions it
    places (:meth:`Batches.unplaced`) and the timed work due (``timed``: what is due, on
    which partitions)."""
    for state in placing:
        transaction.batch(state)
    timers, owned = timed
    for timer in timers:  # before the expiries: a timeout due first is acted on first
        timer.run(transaction, owned)
    if expiring:
        expirer.expire(transaction, expiring)
    for state, derivation in ticking:
        derivation.tick(transaction.batch(state), now_ms, reject)
