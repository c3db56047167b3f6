"""The replica's side of live units (:mod:`processor.changelog.live`): which to apply, when,
and which committed changelog records they already stand for.

Per changelog partition, a unit is applied only right after what the replica holds: when
its ``after`` (the previous transaction's PROGRESS record) is below the replica's next
offset and its ``base`` is not. A unit that comes early (the changelog tail has not brought
the previous transaction yet) is held until the tail has; one the tail went past is
dropped (the tail brought its records). A :class:`~processor.changelog.live.LiveDone` moves
the next offset past the transaction's control records and commit marker, and carries the
input positions the transaction reached (``processed`` acknowledgements).

Records the tail brings below the next offset were handed over live: dropped. After a
processor crash, the live records of its last, uncommitted transaction are in the tables,
and the restarted processor commits the same changes again at other offsets: while the
live input positions are ahead of the committed ones (:meth:`LiveIntake.window`), a
committed record whose input position is below them is dropped too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from processor import changelog
from processor.changelog.live import LiveDone, LiveUnit
from processor.log import Record, TopicPartitionKey
from processor.log.records import LogRecord

#: Units held per changelog partition at most (past it, the oldest are dropped: the
#: changelog brings their records).
MAX_HELD = 256


class LiveIntake:
    """Held units and dones, and how far live units reached each input, over the
    replica's position vectors: ``changelog_next`` (next offset per changelog partition)
    and ``log_next`` (next input offset the committed PROGRESS records reached). Guarded
    by the replica's lock."""

    def __init__(
        self,
        changelog_next: dict[TopicPartitionKey, int],
        log_next: dict[tuple[str, int], int],
    ) -> None:
        self._changelog_next, self._log_next = changelog_next, log_next
        self._held: dict[TopicPartitionKey, deque[LiveUnit]] = {}
        self._dones: dict[tuple[TopicPartitionKey, tuple[int, int]], LiveDone] = {}
        #: The transactions whose live units were applied and whose commit was not
        #: confirmed yet, per changelog partition; the processor run they come from.
        self._unconfirmed: dict[TopicPartitionKey, set[tuple[int, int]]] = {}
        self._run = -1
        #: Per changelog partition, the offset below which every record is in the
        #: replica as committed: brought by the tail, or live and confirmed by a done.
        self.confirmed: dict[TopicPartitionKey, int] = {}
        #: The next input offset per (log topic, partition) that live units reached.
        self._reached: dict[tuple[str, int], int] = {}
        #: Per changelog partition, the offsets [base, end) of the units applied and not
        #: confirmed yet: the tail's records there are those (:meth:`covered`).
        self._ranges: dict[TopicPartitionKey, deque[tuple[int, int]]] = {}
        #: Units applied and dropped, and records the changelog brought again after a
        #: processor crash, dropped (monitoring, tests).
        self.applied = 0
        self.dropped = 0
        self.repeated = 0

    def take(
        self,
        units: Sequence[LiveUnit],
        dones: Sequence[LiveDone],
        ended: bool,
        apply: Callable[[TopicPartitionKey, LiveUnit], None],
    ) -> None:
        """Hold the units, and ``apply`` those that follow what the replica holds; move
        the positions for the dones of applied units. ``ended``: first drop what the
        processor run before held (:meth:`ended`)."""
        if ended:
            self.ended()
        for unit in units:
            tp = (unit.changelog, unit.partition)
            if unit.transaction[0] != self._run:
                self._new_run(unit.transaction[0])
            if tp in self._changelog_next:
                self._offer(unit)
                self.release(tp, apply)
        for done in dones:
            tp = (done.changelog, done.partition)
            if tp in self._changelog_next and self._offer_done(done):
                self._done(tp, done)

    def release(
        self, tp: TopicPartitionKey, apply: Callable[[TopicPartitionKey, LiveUnit], None]
    ) -> None:
        """``apply`` the held units of ``tp`` that follow what the replica holds now."""
        while (found := self._next_unit(tp, self._changelog_next[tp])) is not None:
            unit, done = found
            apply(tp, unit)
            if done is not None:
                self._done(tp, done)

    def ended(self) -> None:
        """The processor handing units over is gone: what it did not commit may never
        be, and the next one's records land elsewhere. Held units and dones go."""
        self._new_run(-1)

    def _new_run(self, run: int) -> None:
        for held in self._held.values():
            while held:
                self._forget(held.popleft())
        self._dones.clear()
        self._unconfirmed.clear()
        self._ranges.clear()  # what the run did not commit may not have reached the log
        self._run = run

    def confirm(self, tp: TopicPartitionKey, next_offset: int) -> None:
        """The tail brought the records of ``tp`` below ``next_offset``."""
        if next_offset > self.confirmed.get(tp, 0):
            self.confirmed[tp] = next_offset
            ranges = self._ranges.get(tp)
            while ranges and ranges[0][1] <= next_offset:
                ranges.popleft()

    def covered(self, tp: TopicPartitionKey) -> deque[tuple[int, int]] | None:
        """The offsets of ``tp`` that live units of the processor's current run gave the
        replica and no commit confirmed yet: its tail skips its records there without
        reading them. The run's transactions commit each unit's records where it said
        (:meth:`processor.engine.live.LiveFeed.committed` checks); a transaction that
        fails ends the run, and what it produced may never have reached the log, so the
        next run's records may take those offsets (:meth:`_new_run` forgets them)."""
        return self._ranges.get(tp)

    def _done(self, tp: TopicPartitionKey, done: LiveDone) -> None:
        """A transaction whose live units of ``tp`` were applied committed."""
        self._changelog_next[tp] = max(self._changelog_next[tp], done.end + 1)
        self.confirm(tp, done.end + 1)
        log_next = self._log_next
        for log_topic, log_partition, nxt in done.progress:
            if nxt > log_next.get((log_topic, log_partition), -1):
                log_next[(log_topic, log_partition)] = nxt

    def _offer(self, unit: LiveUnit) -> None:
        held = self._held.setdefault((unit.changelog, unit.partition), deque())
        if len(held) >= MAX_HELD:
            self._forget(held.popleft())
        held.append(unit)

    def _offer_done(self, done: LiveDone) -> bool:
        """True when ``done`` is for a transaction whose units of the partition were
        applied (apply it now); kept for a held unit of its transaction; else dropped."""
        tp = (done.changelog, done.partition)
        unconfirmed = self._unconfirmed.get(tp)
        if unconfirmed is not None and done.transaction in unconfirmed:
            unconfirmed.discard(done.transaction)
            return True
        if any(unit.transaction == done.transaction for unit in self._held.get(tp, ())):
            self._dones[(tp, done.transaction)] = done
        return False

    def pending(self, tp: TopicPartitionKey) -> bool:
        return bool(self._held.get(tp))

    def _next_unit(
        self, tp: TopicPartitionKey, next_offset: int
    ) -> tuple[LiveUnit, LiveDone | None] | None:
        """The held unit to apply now at ``next_offset``, with its done if it came; None
        when there is none (or it must wait for the tail)."""
        held = self._held.get(tp)
        while held:
            unit = held[0]
            if next_offset > unit.base:
                self._forget(held.popleft())  # the tail brought its records already
                continue
            if next_offset <= unit.after:
                return None  # the previous transaction is not here yet
            held.popleft()
            self._unconfirmed.setdefault(tp, set()).add(unit.transaction)
            ranges = self._ranges.setdefault(tp, deque())
            ranges.append((unit.base, unit.base + len(unit.records)))
            for topic, partition, nxt in unit.reached:
                if nxt > self._reached.get((topic, partition), -1):
                    self._reached[(topic, partition)] = nxt
            self.applied += 1
            return unit, self._dones.pop((tp, unit.transaction), None)
        return None

    def _forget(self, unit: LiveUnit) -> None:
        self.dropped += 1
        self._dones.pop(((unit.changelog, unit.partition), unit.transaction), None)

    def window(self, log_topic: str, partition: int) -> int | None:
        """The next input offset live units reached on ``log_topic[partition]`` while it
        is ahead of what the committed PROGRESS records say (a processor died before its
        commit); None otherwise."""
        reached = self._reached.get((log_topic, partition))
        if reached is None or reached <= self._log_next.get((log_topic, partition), -1):
            return None
        return reached


def input_offset(record: Record, log_topic: str) -> int | None:
    """The offset of the input record of ``log_topic`` behind a changelog record (None:
    another input, or not known)."""
    value = record.value()
    if value is not None:
        envelope = changelog.decode(value)
        return envelope.log_offset if envelope.log_topic == log_topic else None
    for name, raw in record.headers() or ():
        if name == changelog.POSITION_HEADER:
            topic, _, offset = changelog.parse_position(raw)
            return offset if topic == log_topic else None
    return None


def within(ranges: Iterable[tuple[int, int]], offset: int) -> bool:
    """Whether ``offset`` is in one of the ``[base, end)`` ranges (:meth:`LiveIntake.covered`)."""
    return any(base <= offset < end for base, end in ranges)


def records_of(unit: LiveUnit) -> list[Record]:
    """The unit's records at the offsets they will have (create time: the apply time)."""
    stamp = (1, unit.timestamp_ms)  # TIMESTAMP_CREATE_TIME
    return [
        LogRecord(unit.changelog, unit.partition, unit.base + i, key, value, headers, stamp)
        for i, (key, value, headers) in enumerate(unit.records)
    ]
