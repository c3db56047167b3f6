"""The query service's read replica: follows every changelog into memory.

One applier thread applies changelog records in offset order. Queries read a consistent
snapshot under the replica's lock, together with the position vector it reflects (the next
changelog offset per changelog partition). Read-your-writes: ``wait_for`` blocks until the
processor's progress, as published in the changelog's PROGRESS control records, has passed
given transaction-log positions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from processor.changelog import (
    CONTROL_PREFIX,
    POSITION_HEADER,
    PROGRESS_KEY,
    RESET_KEY,
    decode_progress,
    parse_position,
)
from processor.log import ChangelogTail, Record
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

LogPosition = tuple[str, int, int]
#: How many recent deletes the replica remembers (to count a SowDelete's effect).
RECENT_DELETES = 1_000_000


class Replica:
    """In-memory copy of every SOW topic, kept current from the changelogs.

    Thread-safety: ``run`` is the only writer; every other method may be called from any
    thread. Snapshots are copies, so readers never see a half-applied batch.
    """

    def __init__(self, topology: Topology, tail: Callable[[], ChangelogTail]) -> None:
        self.topology = topology
        self._tail_factory = tail
        self._by_changelog: dict[str, SowTopic] = {
            t.changelog_topic: t for t in topology.topics.values()
        }
        self._records: dict[tuple[str, int], dict[bytes, bytes]] = {
            (t.name, p): {} for t in topology.topics.values() for p in range(t.partitions)
        }
        self._changelog_next: dict[tuple[str, int], int] = {
            (t.changelog_topic, p): 0 for t in topology.topics.values() for p in range(t.partitions)
        }
        self._log_next: dict[tuple[str, int], int] = {}
        self._deleted: OrderedDict[LogPosition, bytes] = OrderedDict()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self.applied = 0

    def stop(self) -> None:
        """Ask ``run`` to return; thread-safe."""
        self._stop.set()

    def run(self) -> None:
        """Apply changelog records until stopped."""
        tail = self._tail_factory()
        try:
            tail.assign([(topic, p, 0) for (topic, p) in self._changelog_next])
            while not self._stop.is_set():
                records = tail.consume(10000, 0.1)
                if records:
                    self.apply(records)
        finally:
            tail.close()

    def apply(self, records: Sequence[Record]) -> None:
        """Apply records of any changelog partitions in order (the applier thread only)."""
        with self._changed:
            for record in records:
                if record.error() is not None:
                    continue
                changelog = record.topic()
                partition = record.partition()
                topic = self._by_changelog.get(changelog)
                if topic is None:
                    continue
                self._changelog_next[(changelog, partition)] = record.offset() + 1
                records_of = self._records[(topic.name, partition)]
                key = record.key() or b""
                value = record.value()
                if key.startswith(CONTROL_PREFIX):
                    if key == PROGRESS_KEY and value is not None:
                        for log_topic, log_partition, nxt in decode_progress(value):
                            if nxt > self._log_next.get((log_topic, log_partition), -1):
                                self._log_next[(log_topic, log_partition)] = nxt
                    elif key == RESET_KEY:
                        records_of.clear()
                    continue
                if value is None:
                    if records_of.pop(key, None) is not None:
                        self._remember_delete(record, key)
                else:
                    records_of[key] = value
                self.applied += 1
            self._changed.notify_all()

    def _remember_delete(self, record: Record, key: bytes) -> None:
        for name, raw in record.headers() or ():
            if name == POSITION_HEADER:
                self._deleted[parse_position(raw)] = key
                if len(self._deleted) > RECENT_DELETES:
                    self._deleted.popitem(last=False)
                return

    def reached(self, positions: Iterable[LogPosition]) -> bool:
        """True when the processor has applied every given log position and this replica
        has applied the changelog records it produced for them."""
        with self._changed:
            return all(self._log_next.get((t, p), -1) > o for t, p, o in positions)

    def wait_for(self, positions: Sequence[LogPosition], timeout_s: float) -> bool:
        """Block until ``reached(positions)`` or the timeout; return whether it was reached."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(self._log_next.get((t, p), -1) > o for t, p, o in positions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
        return True

    def deleted(self, positions: Iterable[LogPosition]) -> int:
        """How many of these delete commands removed a record (recent deletes only)."""
        with self._changed:
            return sum(1 for position in positions if position in self._deleted)

    def snapshot(
        self, topic: SowTopic, sow_keys: Sequence[bytes] = ()
    ) -> tuple[list[tuple[bytes, bytes]], list[LogPosition]]:
        """A consistent copy of a topic's records (or of the given SowKeys only), with the
        position vector it reflects: the next offset of each changelog partition."""
        with self._changed:
            partitions = [self._records[(topic.name, p)] for p in range(topic.partitions)]
            if sow_keys:
                found: list[tuple[bytes, bytes]] = []
                for key in dict.fromkeys(sow_keys):
                    for records in partitions:
                        value = records.get(key)
                        if value is not None:
                            found.append((key, value))
                            break
                rows = found
            else:
                rows = [item for records in partitions for item in records.items()]
            vector = [
                (topic.changelog_topic, p, self._changelog_next[(topic.changelog_topic, p)])
                for p in range(topic.partitions)
            ]
        return rows, vector

    def count(self, topic: SowTopic) -> int:
        """How many records a topic holds now."""
        with self._changed:
            return sum(len(self._records[(topic.name, p)]) for p in range(topic.partitions))
