"""The query service's read replica: follows every changelog into memory.

One applier thread (:meth:`Replica.run`) reads the changelogs and keeps one
:class:`~processor.replica.table.SowTable` per SOW topic current.

Guarantees, per changelog partition:

* **In order, one transaction at a time.** Records are applied in offset order, in
  units (:mod:`processor.replica.units`): one processor transaction, a RESET, or what a
  fetch-confirmed partition end closes. A unit is applied under the replica's lock in
  one piece: no query sees part of one. Units of different partitions are independent.
* **Change events.** Each applied change becomes a
  :class:`~processor.changelog.events.ChangeEvent` (old and new envelope, changelog
  position, reason). The listeners registered when a unit is applied (under the lock)
  are called with its events in order, on the applier thread, after the lock is
  released: a listener registered together with a read (:meth:`Replica.read_and_listen`)
  gets exactly the changes its read did not see, with no gap and no duplicate.
  Listeners must return quickly (the applier waits for them) and may call any method
  of the replica; one that raises is logged and unregistered.
* **Caught up.** From the start of :meth:`run` until every changelog partition has been
  read to the end a fetch showed (partition EOF, not ListOffsets, which some brokers
  under-report), the replica is catching up: :meth:`caught_up` is False and
  :meth:`catch_up_status` says how far along it is. A replica fed by :meth:`apply`
  alone (tests, benchmarks) counts as caught up.
* **Staleness.** :meth:`staleness_ms` is how long ago fetches last confirmed that the
  replica had every committed record of every partition (0 within
  :data:`~processor.replica.catchup.CURRENT_S`); while the broker does not answer,
  queries still answer from memory and staleness grows.
* **Snapshots.** With a snapshot directory, the replica's records and the position
  vector they reflect are written there (see :mod:`processor.replica.snapshot`) every
  ``snapshot_interval_s`` when something changed, and when it stops (whole units
  only); on start it loads the snapshot and tails the changelogs from its positions.
  An unusable snapshot is ignored with a warning and the changelogs are replayed from
  offset 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from processor.changelog import CONTROL_PREFIX, PROGRESS_KEY, RESET_KEY, decode_progress
from processor.changelog import events as change
from processor.changelog.events import ChangeEvent, ChangeReason, Listener, ListenerHandle
from processor.changelog.live import LiveDone, LiveUnit
from processor.errors import ReplicaStoppedError
from processor.expr import FieldInput
from processor.log import (
    ChangelogReader,
    ChangelogTail,
    LogPosition,
    Record,
    TopicPartitionKey,
    read_ready,
)
from processor.messages import codec_for
from processor.progress import progress
from processor.queues.state import STATES_KEY
from processor.replica import snapshot
from processor.replica.catchup import CatchUp
from processor.replica.deletes import RecentDeletes
from processor.replica.history import HistoryIndex
from processor.replica.live import LiveIntake, input_offset, records_of, within
from processor.replica.queue_states import QueueStates
from processor.replica.table import SowTable
from processor.replica.units import Unit, UnitCutter, units_of
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)
Events = list[ChangeEvent] | None

#: Most records one read of the changelogs returns.
BATCH = 10_000
#: How long the applier blocks for a record when none is there.
IDLE_WAIT_S = 0.05
SNAPSHOT_INTERVAL_S = 60.0

T = TypeVar("T")


class Replica:
    """In-memory copy of every SOW topic, kept current from the changelogs.

    Thread-safety: ``run`` (or, without it, ``apply``) is the only writer; every other
    method may be called from any thread. Readers run under the lock.
    """

    def __init__(
        self,
        topology: Topology,
        tail: Callable[[], ChangelogTail],
        snapshot_dir: Path | None = None,
        snapshot_interval_s: float = SNAPSHOT_INTERVAL_S,
        reader: Callable[[], ChangelogReader] | None = None,
    ) -> None:
        self.topology = topology
        #: Opens a reader of past changelog records (bookmark replays, the history
        #: backfill); None: this replica cannot replay.
        self.open_reader = reader
        #: Past versions of the History topics' records (:mod:`processor.replica.history`),
        #: recorded as changes are applied; read it under the lock (``read``).
        self.history = HistoryIndex(topology, reader)
        self._tail_factory = tail
        self._snapshot_dir = snapshot_dir
        self._by_changelog: dict[str, SowTopic] = {
            t.changelog_topic: t for t in topology.topics.values()
        }
        self._tables: dict[str, SowTable] = {
            t.name: SowTable(t, codec_for(t)) for t in topology.topics.values()
        }
        partitions = [
            (t.changelog_topic, p) for t in topology.topics.values() for p in range(t.partitions)
        ]
        #: Next changelog offset per partition, as applied (the position vector).
        self._changelog_next: dict[TopicPartitionKey, int] = dict.fromkeys(partitions, 0)
        self._units = UnitCutter(partitions)
        self._log_next: dict[tuple[str, int], int] = {}
        #: The last record applied per changelog partition, and the check that a loaded
        #: snapshot's changelogs are the ones it was taken from.
        self._last_record: dict[TopicPartitionKey, snapshot.RecordMark] = {}
        self._check = snapshot.LogCheck({})
        #: Delete command position -> how many records it removed.
        self._deletes = RecentDeletes()
        self._listeners = change.Listeners()
        self._changed = threading.Condition()
        #: Held by whoever applies and delivers (the tail, live units): in order.
        self._writing = threading.Lock()
        #: Units handed over by the processor beside this replica (:mod:`.live`).
        self.live = LiveIntake(self._changelog_next, self._log_next)
        self._stop = threading.Event()
        self._catch_up = CatchUp(partitions)
        self._dirty = False
        writer = snapshot.SnapshotWriter
        self._snapshots = (
            writer(snapshot_dir, topology, snapshot_interval_s) if snapshot_dir else None
        )
        self.applied = 0
        #: SOW topic -> [publishes, deletes] applied since start (for metrics).
        self.changes_by_topic: dict[str, list[int]] = {t: [0, 0] for t in self._tables}
        self.queue_states = QueueStates()

    # -- the applier -------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run`` to return; thread-safe."""
        self._stop.set()

    def start_catching_up(self) -> None:
        """Count as catching up from now until ``run`` reached every partition's end
        (``run`` calls it; call it before starting ``run``'s thread so no query can
        slip in first)."""
        with self._changed:
            self._catch_up.begin()

    def hold_catch_up(self) -> None:
        """Not caught up, whatever is read, until :meth:`release_catch_up`: the writer of
        the changelogs (the processor) has not restored them yet. Thread-safe."""
        with self._changed:
            self._catch_up.hold()

    def release_catch_up(self) -> None:
        """End :meth:`hold_catch_up`: caught up once every changelog partition is read to
        an end fetched from now on. Thread-safe."""
        with self._changed:
            self._catch_up.release()
            self._changed.notify_all()

    def run(self) -> None:
        """Load the snapshot, then apply changelog records until stopped; write a
        snapshot on the way out."""
        self.start_catching_up()
        tail = self._tail_factory()
        try:
            early = None
            if self._snapshot_dir is not None:
                early = snapshot.peek(self._snapshot_dir, self.topology)
            if early is not None:
                # Fetching starts while the snapshot loads.
                tail.assign(
                    [
                        (t, p, o)
                        for (t, p), o in snapshot.starts(self._changelog_next, *early).items()
                    ]
                )
            self._load_snapshot()
            # History is complete within the Window even after a snapshot: what the
            # snapshot holds only as the latest state is read from the changelogs.
            self.history.backfill(self._changelog_next)
            starts = snapshot.starts(
                self._changelog_next, self._changelog_next, self._check.waiting
            )
            if early is None or starts != snapshot.starts(self._changelog_next, *early):
                tail.assign([(t, p, o) for (t, p), o in starts.items()])
            self._units.start(starts)
            last_report = time.monotonic()
            while not self._stop.is_set():
                self._advance(read_ready(tail, BATCH, IDLE_WAIT_S), tail)
                now = time.monotonic()
                if not self._catch_up.done and now - last_report >= 1.0:
                    last_report = now
                    log.info("%s", self.catch_up_status(), extra=self.catch_up_progress())
                snapshots = self._snapshots
                if snapshots is not None and self._dirty and snapshots.due(now):
                    snapshots.write_in_background(*self._snapshot_copy())
        finally:
            tail.close()
            if self._snapshots is not None and self._dirty:
                self._snapshots.write(*self._snapshot_copy())

    def _advance(self, records: Sequence[Record], tail: ChangelogTail) -> None:
        """Cut the records read into units, apply the complete ones, note partition ends."""
        if self._check:
            records, mismatched = self._check.filter(records, tail.states())
            for changelog, partition in mismatched:
                tail.seek(changelog, partition, 0)
        states = tail.states()
        units, ends, restarted = self._units.cut(records, states)
        if restarted:
            # The input log was most likely lost with the changelog: progress read from
            # the old changelog (or a snapshot of it) no longer says where the
            # processor is.
            with self._changed:
                for changelog, partition in restarted:
                    topic = self._by_changelog[changelog]
                    for log_topic in (topic.kafka_topic, topic.repartition_topic):
                        self._log_next.pop((log_topic, partition), None)
        self._catch_up.saw(states)
        if units or self._catch_up.needs(ends):
            self._apply_units(units, ends)

    def apply(self, records: Sequence[Record]) -> None:
        """Apply records at once, as one unit per changelog partition, without waiting
        for PROGRESS records: feeding a replica by hand (tests, benchmarks)."""
        self._apply_units(units_of(records, self._changelog_next), {})

    def _apply_units(
        self,
        units: Sequence[Unit],
        ends: Mapping[TopicPartitionKey, int],
        live: tuple[Sequence[LiveUnit], Sequence[LiveDone], bool] = ((), (), False),
    ) -> None:
        """Apply units, then the live units that follow (.live), under the lock; deliver
        their events outside it, in order."""
        deliveries: list[list[ChangeEvent]] = []
        with self._writing:
            with self._changed:
                listeners = self._listeners.current()

                def apply(unit: Unit, is_live: bool = False) -> None:
                    events: Events = [] if listeners else None
                    self._apply_unit(unit, events, is_live)
                    if events:
                        deliveries.append(events)

                def apply_live(tp: TopicPartitionKey, unit: LiveUnit) -> None:
                    apply(Unit(tp, records_of(unit)), True)

                for unit in units:
                    apply(unit)
                for tp, position in ends.items():  # past the markers, which carry no records
                    if not self._units.pending[tp] and position > self._changelog_next[tp]:
                        self._changelog_next[tp] = position
                for tp in {unit.partition for unit in units} | set(ends):
                    if self.live.pending(tp):
                        self.live.release(tp, apply_live)
                self.live.take(*live, apply_live)
                if ends:
                    self._catch_up.reached_end(ends, sum(len(t) for t in self._tables.values()))
                self._changed.notify_all()
            if deliveries:
                self._listeners.deliver(listeners, deliveries)

    def apply_live(
        self, units: Sequence[LiveUnit], dones: Sequence[LiveDone], ended: bool = False
    ) -> None:
        """Take what the processor beside this replica handed over before its commits
        (:mod:`processor.replica.live`): apply what follows what is held, hold the rest."""
        self._apply_units((), {}, (units, dones, ended))

    def _apply_unit(self, unit: Unit, events: Events, live: bool = False) -> None:
        tp = unit.partition
        changelog, partition = tp
        topic = self._by_changelog[changelog]
        table = self._tables[topic.name]
        records = unit.records
        if unit.restart_at is not None:
            first = records[0].offset() if records else unit.restart_at
            self._reset(table, partition, (changelog, partition, first), events)
            self._changelog_next[tp] = first
            self._last_record.pop(tp, None)
        envelopes = table.envelopes
        recorder = self.history.recorder(topic.name, partition) if self.history else None
        publishes = deletes = 0
        # Once live units came, the records below ``floor`` are here, as committed; those
        # of input positions below ``window`` were handed over live (.live).
        floor = self.live.confirmed.get(tp, 0) if self.live.applied and not live else 0
        covered = None if live else self.live.covered(tp)
        window = None if live else self.live.window(topic.kafka_topic, partition)
        for record in records:
            key = record.key() or b""
            value = record.value()
            if key.startswith(CONTROL_PREFIX):
                if key == PROGRESS_KEY and value is not None:
                    for log_topic, log_partition, nxt in decode_progress(value):
                        if nxt > self._log_next.get((log_topic, log_partition), -1):
                            self._log_next[(log_topic, log_partition)] = nxt
                elif key == RESET_KEY:
                    self._reset(table, partition, (changelog, partition, record.offset()), events)
                elif key.startswith(STATES_KEY) and topic.queue is not None and value:
                    self.queue_states.note_batch(topic.name, partition, value)
                continue
            if record.offset() < floor or (covered and within(covered, record.offset())):
                continue
            if window is not None:
                offset = input_offset(record, topic.kafka_topic)
                if offset is not None and offset < window:
                    self.live.repeated += 1
                    continue
            if recorder is not None:
                recorder(key, record.timestamp()[1], record.offset(), value)
            if value is None:
                deletes += 1
                old = envelopes.get(key)
                if table.delete(key):
                    if topic.queue is not None:  # a message left: its state too
                        self.queue_states.note(topic.name, partition, key, None)
                    reason = self._deletes.note(record)
                    if events is not None:
                        position = (changelog, partition, record.offset())
                        events.append(ChangeEvent(topic.name, key, old, None, position, reason))
            else:
                publishes += 1
                if events is not None:
                    position = (changelog, partition, record.offset())
                    old = envelopes.get(key)
                    events.append(
                        ChangeEvent(topic.name, key, old, value, position, ChangeReason.PUBLISH)
                    )
                table.put(key, value)
            self.applied += 1
        if records:
            counts = self.changes_by_topic[topic.name]
            counts[0] += publishes
            counts[1] += deletes
            last = records[-1]
            if last.offset() >= self._changelog_next[tp]:
                self._changelog_next[tp] = last.offset() + 1
            if not live:
                self.live.confirm(tp, last.offset() + 1)
                self._last_record[tp] = (last.offset(), last.timestamp()[1], last.key() or b"")
            self._dirty = True

    def _reset(
        self, table: SowTable, partition: int, position: LogPosition, events: Events
    ) -> None:
        """Drop every record of one partition of a table (and of a queue, their states)."""
        self._dirty = True
        table.reset_partition(partition, position, events)
        self.queue_states.forget(table.topic.name, partition)

    # -- catching up and staleness -----------------------------------------------------

    def caught_up(self) -> bool:
        """True once every changelog partition was read to its end since ``run`` began
        (and always for a replica that does not follow changelogs)."""
        return self._catch_up.caught_up

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Block until ``caught_up()`` or the timeout; return whether it is."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._catch_up.caught_up:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
        return True

    def catch_up_status(self) -> str:
        """How far along catching up is, for errors and the log."""
        with self._changed:
            records = sum(len(t) for t in self._tables.values())
            return self._catch_up.status(self._units.read_next, records)

    def catch_up_progress(self) -> dict[str, object]:
        """The ``extra`` of a catching-up log line (:mod:`processor.progress`)."""
        with self._changed:
            return progress(*self._catch_up.figures(self._units.read_next))

    def record_counts(self) -> dict[str, int]:
        """Records per SOW topic, as applied."""
        with self._changed:
            return {name: len(table) for name, table in self._tables.items()}

    def changelog_lag(self) -> dict[str, int]:
        """Changelog records per SOW topic that fetches showed committed and the replica
        has not applied yet (read but waiting for the rest of their transaction
        included); 0 for a topic whose partitions are current or not fetched yet."""
        with self._changed:
            read_next = dict(self._units.read_next)
            pending = {tp: len(records) for tp, records in self._units.pending.items()}
        names = {changelog: topic.name for changelog, topic in self._by_changelog.items()}
        return self._catch_up.lag(read_next, pending, names, list(self._tables))

    def staleness_ms(self) -> int:
        """How long ago fetches last confirmed that the replica had every committed
        changelog record (see :meth:`CatchUp.staleness_ms`)."""
        return self._catch_up.staleness_ms()

    # -- listeners ---------------------------------------------------------------------

    def listen(self, listener: Listener) -> ListenerHandle:
        """Call ``listener`` with the events of every unit applied from now on."""
        with self._changed:
            return self._listeners.register(listener)

    # -- reads -------------------------------------------------------------------------

    def reached(self, positions: Iterable[LogPosition]) -> bool:
        """True when the processor has applied every given log position and this replica
        has applied the changelog records it produced for them."""
        with self._changed:
            return all(self._log_next.get((t, p), -1) > o for t, p, o in positions)

    def wait_for(self, positions: Sequence[LogPosition], timeout_s: float) -> bool:
        """Read-your-writes: block until ``reached(positions)`` (PROGRESS records) or the
        timeout; return whether reached. :meth:`stop` ends every wait: ReplicaStoppedError."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(self._log_next.get((t, p), -1) > o for t, p, o in positions):
                if self._stop.is_set():
                    raise ReplicaStoppedError()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
        return True

    def deleted(self, positions: Iterable[LogPosition]) -> int:
        """How many records these delete commands removed (recent deletes only)."""
        with self._changed:
            return self._deletes.count(positions)

    def build_memo_indexes(self, topic: SowTopic, fields: Sequence[FieldInput]) -> None:
        """Create the topic's missing memo indexes for ``fields``, holding the lock only
        to copy the records and install the result (:meth:`SowTable.build_memo`)."""
        self._tables[topic.name].build_memo(fields, self._changed)

    def read(
        self, topics: Sequence[SowTopic], reader: Callable[[list[SowTable]], T]
    ) -> tuple[T, list[LogPosition]]:
        """Run ``reader`` over the topics' tables under the lock; return its result and
        the position vector it read (the next offset of each changelog partition).

        ``reader`` must not keep references to the tables' mutable contents past its
        return: the applier changes them as soon as the lock is released.
        """
        with self._changed:
            result = reader([self._tables[t.name] for t in topics])
            vector = [
                (t.changelog_topic, p, self._changelog_next[(t.changelog_topic, p)])
                for t in topics
                for p in range(t.partitions)
            ]
        return result, vector

    # -- snapshots ---------------------------------------------------------------------

    def _load_snapshot(self) -> None:
        if self._snapshot_dir is None:
            return
        loaded = snapshot.load_or_replay(self._snapshot_dir, self.topology)
        if loaded is None:
            return
        with self._changed:
            if not snapshot.restore_tables(loaded, self._tables, self._snapshot_dir):
                self._tables = {
                    t.name: SowTable(t, codec_for(t)) for t in self.topology.topics.values()
                }
                return
            self.queue_states.restore(loaded.tables)
            positions = (self._changelog_next, self._log_next, self._last_record)
            self._check = snapshot.restore_positions(loaded, *positions)

    def _snapshot_copy(
        self,
    ) -> tuple[snapshot.Records, snapshot.Positions, snapshot.Positions, snapshot.Marks]:
        """What a snapshot holds, copied (on the applier thread, between units)."""
        self._dirty = False
        tables = {name: table.export() for name, table in self._tables.items()}
        self.queue_states.export(tables)
        positions, log_next = dict(self._changelog_next), dict(self._log_next)
        return tables, positions, log_next, dict(self._last_record)
