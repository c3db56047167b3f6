"""Delivery at apply time: the processor hands its changes to the replica beside it before
the Kafka commit (issue 34; the unit format and why it is safe: :mod:`processor.changelog.live`).

AMPS delivers in this order: the message is durable in the transaction log, then it is
delivered. Here the input record is durable in Kafka before the processor reads it, and
applying it is deterministic: a processor killed before its commit applies the same input
to the same committed state again and writes the same changes. So a partition batch's
changelog records can be handed over as soon as the batch is applied (one Kafka
transaction sooner than through the changelog), at the offsets they will have, and the
replica and its subscriptions need not wait for the commit.

Where determinism does not hold, the change waits for the commit and comes through the
changelog (:func:`live_refusal` says why, per topic; per batch, :meth:`LiveFeed.send`):

* **expiration**: deletes happen at times of the processor's clock, and a restarted
  processor could expire a record before it applies the publish that replaced it;
* **Preprocessing and Enrichment**: their expressions may read the clock (``NOW()``);
* **derived topics** (views, conflated topics, queues): their input interleaves several
  partitions, and timers drive conflation and queue leases; their order is the fetch's;
* **History topics**: a historical query reads the changelog records' write times;
* **re-keyed records**: records that reach a partition through the repartition topic
  interleave with the input topic's in fetch order, so a batch that read the repartition
  topic, or whose repartition partition has records not yet read, waits for its commit;
* **a partition's changes before its offsets are known**: after the processor takes a
  partition, or a transaction of it fails, the offset of its last PROGRESS record is not
  known. The processor learns it at once by committing a transaction of PROGRESS records
  alone for those partitions (:meth:`LiveFeed.unplaced`), before input arrives; a batch
  applied before that commit lands waits for its own commit.

The apply time in a live record's envelope is that of its first application: after a
processor crash the committed record of the same change carries the time of the second,
and the replica keeps the first until the record changes again.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from processor.changelog.events import ChangeEvent, Listener
from processor.changelog.live import LiveDone, LiveRecordData, LiveUnit
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch, Transaction, tombstone_headers
from processor.log import LogRecord, TopicPartitionKey
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

#: Whether a log partition holds no record beyond what the processor has read:
#: ``quiet(log_topic, partition)`` (:meth:`processor.log.InputLog.quiet`).
Quiet = Callable[[str, int], bool]


class LiveSink(Protocol):
    """Where live units go: the replica beside the processor, in this process or another."""

    def send(
        self,
        units: Sequence[LiveUnit],
        dones: Sequence[LiveDone],
        ended: bool = False,
        handed: Sequence[LogRecord] = (),
    ) -> None:
        """Take the units of an applied transaction, or the dones of a committed one
        (``ended``: the units sent before may never be committed: a new pipeline), and
        the records it ``handed`` over (``PartitionBatch.hand_over``: a queue's
        at-least-once leases); must not block (drop what cannot be taken: the changelog
        brings it later)."""
        ...


def live_refusal(topic: SowTopic) -> str | None:
    """Why a topic's changes wait for their commit (None: they are delivered live)."""
    if topic.derived:
        return "a derived topic (view, conflated topic or queue)"
    if topic.expiration_s is not None:
        return "expiration"
    if topic.preprocessing or topic.enrichment:
        return "Preprocessing or Enrichment"
    if topic.history is not None:
        return "History"
    return None


class LiveFeed:
    """The change listener of every live topic, and what it hands to a :class:`LiveSink`.

    The processor's loop calls :meth:`send` once a transaction is applied (before its
    commit), :meth:`committed` once it committed, :meth:`failed` when it did not, and
    :meth:`reset` when its pipeline starts. Single-threaded: the processor's loop.
    """

    needs_old = False

    def __init__(self, topology: Topology, sink: LiveSink, units: bool = True) -> None:
        """``units``: hand over the changes of the topics that allow it (else only the
        records handed over, ``PartitionBatch.hand_over``)."""
        topics = topology.topics.items() if units else ()
        self.topics = [name for name, t in topics if live_refusal(t) is None]
        self._live = set(self.topics)
        self._sink = sink
        #: This run of the processor: transactions are (run, number).
        self._run = time.time_ns() // 1000
        self._numbers = itertools.count()
        self._quiet: Quiet = lambda topic, partition: False
        #: Per partition whose changelog this pipeline knows: the offset its next record
        #: gets, and the offset of the record the next unit follows.
        self._next: dict[PartitionState, int] = {}
        self._after: dict[PartitionState, int] = {}
        #: The events of each batch of the transaction being applied.
        self._events: dict[PartitionBatch, list[ChangeEvent]] = {}
        #: Per transaction not committed yet: its number, and per partition sent live the
        #: offset its PROGRESS record will have (known once prepared; -1 until then).
        self._numbered: dict[Transaction, tuple[int, int]] = {}
        self._expected: dict[Transaction, dict[PartitionState, int]] = {}
        #: Batches of the transaction being applied that wrote records before their
        #: offsets were known, and how many.
        self._unsent: set[PartitionBatch] = set()
        self._counts: dict[PartitionBatch, int] = {}
        #: Records handed over live, units the sink took, records handed over as they
        #: are (``hand_over``), and partition batches kept for their commit, by why
        #: (monitoring, tests).
        self.records = 0
        self.units = 0
        self.handed = 0
        self.kept: Counter[str] = Counter()

    def listen(self, batch: PartitionBatch) -> Listener:
        events: list[ChangeEvent] = []
        self._events[batch] = events
        return events.extend

    def reset(self, quiet: Quiet) -> None:
        """A new pipeline: nothing known of where its transactions land, and the
        replica drops what the last one handed over and did not commit (a new run)."""
        self._new_run()
        self._quiet = quiet
        for known in (self._next, self._after, self._events, self._numbered, self._expected):
            known.clear()
        self._unsent.clear()
        self._counts.clear()

    def unplaced(self, states: Sequence[PartitionState]) -> list[PartitionState]:
        """The partitions of live topics among ``states`` whose next offset is not known:
        a transaction that touches them (with no change: one PROGRESS record each)
        places them when it commits (:meth:`committed`). ``states``: every partition the
        processor owns; what the feed knew of partitions it no longer owns goes."""
        owned = set(states)
        for gone in [state for state in self._next if state not in owned]:
            self._forget(gone)
        return [
            state for state in states if state.topic.name in self._live and state not in self._next
        ]

    def send(self, transaction: Transaction) -> None:
        """Hand what the transaction applied since the last call to the sink: call after
        :meth:`Transaction.flush`, before the commit, as often as the transaction grows."""
        number = self._numbered.get(transaction)
        if number is None:
            number = self._numbered[transaction] = (self._run, next(self._numbers))
            self._expected[transaction] = {}
        units = []
        for batch, events in self._events.items():
            unit = self._unit(batch, events, number, transaction.now_ms)
            events.clear()
            if unit is not None:
                units.append(unit)
                self._expected[transaction][batch.state] = -1
        handed, transaction.handed = transaction.handed, []
        if units or handed:
            self.units += len(units)
            self.handed += len(handed)
            self._sink.send(units, (), handed=handed)

    def _unit(
        self,
        batch: PartitionBatch,
        events: list[ChangeEvent],
        number: tuple[int, int],
        now_ms: int,
    ) -> LiveUnit | None:
        if not events:
            return None
        state = batch.state
        base = None if batch in self._unsent else self._next.get(state)
        repartition = state.topic.repartition_topic
        kept = (
            "offsets not known"
            if base is None
            else "derived state"
            if batch.meta
            else "re-keyed records"
            if repartition in batch.progress or not self._quiet(repartition, state.partition)
            else None
        )
        if kept is not None:
            self.kept[kept] += 1
            if base is None:  # counted, to place them once the offsets are known
                self._unsent.add(batch)
                self._counts[batch] = self._counts.get(batch, 0) + len(events)
            else:  # the next unit follows them, which the changelog brings
                self._next[state] = base + len(events)
                self._after[state] = base + len(events) - 1
            return None
        assert base is not None
        records: list[LiveRecordData] = [_record(event) for event in events]
        after = self._after[state]
        self._next[state] = base + len(records)
        self._after[state] = base + len(records) - 1
        self.records += len(records)
        return LiveUnit(
            state.topic.changelog_topic,
            state.partition,
            number,
            after,
            base,
            now_ms,
            records,
            [(topic, state.partition, nxt) for topic, nxt in batch.progress.items()],
        )

    def prepared(self, transaction: Transaction, publishers: Mapping[PartitionState, int]) -> None:
        """The transaction's records are all produced (``publishers``: the publisher
        records each partition got before its PROGRESS record): where its PROGRESS
        records land, and its next transaction's records, when all it wrote went live."""
        expected = self._expected.setdefault(transaction, {})
        for batch in transaction.batches:
            state = batch.state
            if state.topic.name not in self._live:
                continue
            nxt = self._next.get(state)
            if batch in self._unsent or nxt is None:
                self._forget(state)
                expected.pop(state, None)
                continue
            end = nxt + publishers.get(state, 0)
            if state in expected:
                expected[state] = end
            self._next[state] = end + 2  # after the PROGRESS record, the commit marker
        self._events.clear()
        self._unsent.clear()
        self._counts.clear()

    def _place(self, state: PartitionState, end: int) -> None:
        """Offsets known from a commit whose PROGRESS record is at ``end``: the batch of
        the partition being applied (if any) wrote its records after it."""
        written = 0
        for batch in self._events:
            if batch.state is state and batch in self._unsent:
                written = self._counts.pop(batch, 0)
                self._unsent.discard(batch)
        self._next[state] = end + 2 + written
        self._after[state] = end + 1 + written if written else end

    def committed(self, transaction: Transaction, ends: Mapping[TopicPartitionKey, int]) -> None:
        """The transaction committed, its PROGRESS records at ``ends``: check the offsets
        its units were sent at, and tell the sink what became durable."""
        number = self._numbered.pop(transaction, None)
        expected = self._expected.pop(transaction, {})
        dones = []
        for batch in transaction.batches:
            state = batch.state
            end = ends.get((state.topic.changelog_topic, state.partition))
            if end is None or state.topic.name not in self._live:
                continue
            if state not in self._next:  # the first transaction: from here on, known
                self._place(state, end)
            predicted = expected.get(state)
            if predicted is None:
                continue
            if end != predicted:
                log.error(
                    "changelog %s[%d]: the transaction's records did not land where expected "
                    "(PROGRESS at %d, expected %d): another writer? Its changes reach the "
                    "replica through the changelog until the next commit",
                    state.topic.changelog_topic,
                    state.partition,
                    end,
                    predicted,
                )
                self._forget(state)
                continue
            assert number is not None
            progress = [(topic, state.partition, nxt) for topic, nxt in state.applied.items()]
            dones.append(
                LiveDone(state.topic.changelog_topic, state.partition, number, end, progress)
            )
        if dones:
            self._sink.send((), dones)

    def _new_run(self) -> None:
        """Tell the sink that what was handed over and not committed may never be."""
        self._run = time.time_ns() // 1000
        self._sink.send((), (), ended=True)

    def failed(self, transaction: Transaction) -> None:
        """The transaction was aborted: some of its records took offsets in the log and
        some may not have, so where the next transaction of its partitions lands is no
        longer known, and the units handed over are of a run that ended."""
        self._new_run()
        for batch in transaction.batches:
            self._forget(batch.state)
        self._numbered.pop(transaction, None)
        self._expected.pop(transaction, None)
        self._events.clear()
        self._unsent.clear()
        self._counts.clear()

    def _forget(self, state: PartitionState) -> None:
        self._next.pop(state, None)
        self._after.pop(state, None)


def _record(event: ChangeEvent) -> LiveRecordData:
    """The changelog record of a change, as :meth:`PartitionBatch.write` writes it."""
    if event.new is not None:
        return (event.sow_key, event.new, None)
    return (event.sow_key, None, tombstone_headers(event.reason, *event.position))
