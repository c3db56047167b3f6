"""The query service's read replica: follows every changelog into memory.

One applier thread applies changelog records in offset order into one
:class:`~processor.query.table.SowTable` per SOW topic, which keeps its indexes current.
Queries run under the replica's lock, so they read a consistent state, together with the
position vector it reflects (the next changelog offset per changelog partition).
Read-your-writes: ``wait_for`` blocks until the processor's progress, as published in
the changelog's PROGRESS control records, has passed given transaction-log positions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from processor.changelog import (
    CONTROL_PREFIX,
    POSITION_HEADER,
    PROGRESS_KEY,
    RESET_KEY,
    decode_progress,
    parse_position,
)
from processor.expr import FieldInput
from processor.log import ChangelogTail, Record
from processor.messages import codec_for
from processor.query.table import SowTable
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

LogPosition = tuple[str, int, int]
#: How many recent delete commands the replica remembers (to count a SowDelete's effect).
RECENT_DELETES = 100_000

T = TypeVar("T")


class Replica:
    """In-memory copy of every SOW topic, kept current from the changelogs.

    Thread-safety: ``run`` is the only writer; every other method may be called from any
    thread. Readers run under the lock, so they never see a half-applied batch.
    """

    def __init__(self, topology: Topology, tail: Callable[[], ChangelogTail]) -> None:
        self.topology = topology
        self._tail_factory = tail
        self._by_changelog: dict[str, SowTopic] = {
            t.changelog_topic: t for t in topology.topics.values()
        }
        self._tables: dict[str, SowTable] = {
            t.name: SowTable(t, codec_for(t)) for t in topology.topics.values()
        }
        self._changelog_next: dict[tuple[str, int], int] = {
            (t.changelog_topic, p): 0 for t in topology.topics.values() for p in range(t.partitions)
        }
        self._log_next: dict[tuple[str, int], int] = {}
        #: Delete command position -> how many records it removed.
        self._deleted: OrderedDict[LogPosition, int] = OrderedDict()
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
                table = self._tables[topic.name]
                key = record.key() or b""
                value = record.value()
                if key.startswith(CONTROL_PREFIX):
                    if key == PROGRESS_KEY and value is not None:
                        for log_topic, log_partition, nxt in decode_progress(value):
                            if nxt > self._log_next.get((log_topic, log_partition), -1):
                                self._log_next[(log_topic, log_partition)] = nxt
                    elif key == RESET_KEY:
                        table.reset_partition(partition)
                    continue
                if value is None:
                    if table.delete(key):
                        self._remember_delete(record)
                else:
                    table.put(key, value)
                self.applied += 1
            self._changed.notify_all()

    def _remember_delete(self, record: Record) -> None:
        for name, raw in record.headers() or ():
            if name == POSITION_HEADER:
                position = parse_position(raw)
                deleted = self._deleted
                deleted[position] = deleted.get(position, 0) + 1
                if len(deleted) > RECENT_DELETES:
                    deleted.popitem(last=False)
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
        """How many records these delete commands removed (recent deletes only)."""
        with self._changed:
            return sum(self._deleted.get(position, 0) for position in positions)

    def build_memo_indexes(self, topic: SowTopic, fields: Sequence[FieldInput]) -> None:
        """Create the topic's missing memo indexes for ``fields`` while holding the lock
        only to copy the record map and to install the result: the messages are decoded
        without it, so the applier and other queries go on meanwhile."""
        with self._changed:
            table = self._tables[topic.name]
            missing = [f for f in dict.fromkeys(fields) if f.steps not in table.memo]
            if not missing:
                return
            snapshot = dict(table.envelopes)
        columns = table.memo_values(missing, snapshot)
        with self._changed:
            table.install_memo(missing, snapshot, columns)

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
