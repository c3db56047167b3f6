"""Historical SOW: past versions of the records of topics with History (spec 3.13).

The index is the query service's own, next to the read replica's tables: per SowKey of
each History topic, the saved versions ``(time, partition, offset, envelope)`` in order
(``envelope`` None: the record was deleted then). ``time`` is the changelog record's
timestamp (when the processor wrote the change), the clock timestamp bookmarks and
``offsets_for_times`` use too.

* **Granularity g.** At most one version per record per g-long interval (aligned to the
  epoch) is saved: a change in the interval of the record's last saved version replaces
  it. A historical answer is the state at the latest saved point at or before the time
  asked (g = 0 saves every version, and the answer is exact).
* **Window.** Versions are pruned once a newer version of the same record is itself
  older than the Window, so every state within the Window can be answered; the latest
  version of every record is always kept (a deleted record's tombstone goes once it is
  older than the Window). A question about a time before the Window gets an empty SOW.
* **Feeding.** The replica records every change of a History topic as it applies it
  (under its lock, :meth:`HistoryIndex.recorder`); on start, :meth:`HistoryIndex.backfill`
  reads the History topics' changelogs up to where the replica's snapshot left them,
  pruning as it goes, so history is complete within the Window even when the replica
  starts from a snapshot. It reads from the earliest retained offset, not from the
  Window's start: the state a record had when the Window began is its last change
  before it. (On a compacting broker, the part older than ``min.compaction.lag.ms`` holds
  the latest version per key only, which is all the Window needs.) A partition restart
  (transient RESET) is not recorded as deletions.

Thread-safety: recording and reading happen under the replica's lock (``Replica.read``).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.changelog import CONTROL_PREFIX
from processor.changelog.bookmarks import Point
from processor.log import ChangelogReader, TopicPartitionKey
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

#: (time ms, partition, offset, envelope or None when deleted).
Version = tuple[int, int, int, bytes | None]
#: How often (seconds) the applier prunes every record of a topic, at most.
SWEEP_S = 60.0


def _time(version: Version) -> int:
    return version[0]


class TopicHistory:
    """The saved versions of one History topic's records (see the module doc)."""

    def __init__(self, topic: SowTopic) -> None:
        assert topic.history is not None
        self.topic = topic
        self.window_ms = int(topic.history.window_s * 1000)
        self.granularity_ms = int(topic.history.granularity_s * 1000)
        self.versions: dict[bytes, list[Version]] = {}
        self._swept_at = time.monotonic()
        #: Versions held, for metrics and benchmarks.
        self.size = 0

    def record(
        self,
        sow_key: bytes,
        time_ms: int,
        partition: int,
        offset: int,
        envelope: bytes | None,
        now_ms: int | None = None,
    ) -> None:
        """Save a change (called in changelog order per partition)."""
        version: Version = (time_ms, partition, offset, envelope)
        versions = self.versions.get(sow_key)
        if versions is None:
            if envelope is not None:
                self.versions[sow_key] = [version]
                self.size += 1
            return
        g = self.granularity_ms
        last = versions[-1]
        if last[1] == partition and offset <= last[2]:
            # The partition is read again from an earlier offset (its log was lost and
            # replaced, or replayed): the record's history restarts from this change.
            self.size -= len(versions)
            versions.clear()
            if envelope is None:
                del self.versions[sow_key]
                return
            versions.append(version)
            self.size += 1
            return
        if g > 0 and last[0] // g == time_ms // g:
            versions[-1] = version
        else:
            versions.append(version)
            self.size += 1
        self._prune(sow_key, versions, self._cutoff(now_ms))
        if time.monotonic() - self._swept_at >= SWEEP_S:
            self.sweep(now_ms)

    def _cutoff(self, now_ms: int | None) -> int:
        return (now_ms if now_ms is not None else int(time.time() * 1000)) - self.window_ms

    def _prune(self, sow_key: bytes, versions: list[Version], cutoff: int) -> None:
        drop = 0
        while drop + 1 < len(versions) and versions[drop + 1][0] <= cutoff:
            drop += 1
        if drop:
            del versions[:drop]
            self.size -= drop
        if len(versions) == 1 and versions[0][3] is None and versions[0][0] <= cutoff:
            del self.versions[sow_key]
            self.size -= 1

    def sweep(self, now_ms: int | None = None) -> None:
        """Prune every record (the applier does this every :data:`SWEEP_S`)."""
        self._swept_at = time.monotonic()
        cutoff = self._cutoff(now_ms)
        for sow_key, versions in list(self.versions.items()):
            self._prune(sow_key, versions, cutoff)

    def state_at(self, point: Point, now_ms: int | None = None) -> dict[bytes, bytes]:
        """The records as of ``point``: for a time, the latest saved version at or before
        it (empty before the Window); for a position vector, the latest version at or
        before the position of its partition (partitions not listed: none)."""
        state: dict[bytes, bytes] = {}
        if point.timestamp_ms is not None:
            moment = point.timestamp_ms
            if moment < self._cutoff(now_ms):
                return state
            for sow_key, versions in self.versions.items():
                if versions[0][0] > moment:
                    continue
                if versions[-1][0] <= moment:
                    envelope = versions[-1][3]
                else:
                    envelope = versions[bisect.bisect_right(versions, moment, key=_time) - 1][3]
                if envelope is not None:
                    state[sow_key] = envelope
            return state
        vector = point.vector or {}
        changelog = self.topic.changelog_topic
        for sow_key, versions in self.versions.items():
            limit = vector.get((changelog, versions[0][1]))
            if limit is None:
                continue
            found = None
            for version in versions:
                if version[2] > limit:
                    break
                found = version[3]
            if found is not None:
                state[sow_key] = found
        return state


@dataclass(frozen=True, slots=True)
class HistoryRecorder:
    """Records one History topic's changes from the replica's apply path."""

    history: TopicHistory
    partition: int

    def __call__(self, sow_key: bytes, time_ms: int, offset: int, envelope: bytes | None) -> None:
        self.history.record(sow_key, time_ms, self.partition, offset, envelope)


class HistoryIndex:
    """The history of every History topic of a topology (see the module doc).

    ``reader`` opens a changelog reader for :meth:`backfill` (None: no backfill, the
    index holds what the replica applies from now on)."""

    def __init__(
        self, topology: Topology, reader: Callable[[], ChangelogReader] | None = None
    ) -> None:
        self.topics: dict[str, TopicHistory] = {
            t.name: TopicHistory(t) for t in topology.topics.values() if t.history is not None
        }
        self._reader = reader

    def __bool__(self) -> bool:
        return bool(self.topics)

    def recorder(self, topic: str, partition: int) -> HistoryRecorder | None:
        """What the replica calls for each change of ``topic``'s partition (None: the
        topic has no History)."""
        history = self.topics.get(topic)
        return None if history is None else HistoryRecorder(history, partition)

    def backfill(self, positions: Mapping[TopicPartitionKey, int]) -> int:
        """Read each History topic's changelog from its earliest retained offset up to
        ``positions`` (where the replica's tail begins) into the index; return the
        number of changes read. Called by the replica before it tails (nothing else runs
        then)."""
        if not self.topics or self._reader is None:
            return 0
        reader = self._reader()
        read = 0
        try:
            for history in self.topics.values():
                changelog = history.topic.changelog_topic
                for partition in range(history.topic.partitions):
                    end = positions.get((changelog, partition), 0)
                    if end <= 0:
                        continue
                    start = reader.earliest_offset(changelog, partition)
                    for batch in reader.read_range(changelog, partition, start, end):
                        for record in batch:
                            key = record.key() or b""
                            if key.startswith(CONTROL_PREFIX):
                                continue
                            history.record(
                                key,
                                record.timestamp()[1],
                                partition,
                                record.offset(),
                                record.value(),
                            )
                            read += 1
        finally:
            reader.close()
        if read:
            log.info("history: read %d changes of the Window from the changelogs", read)
        return read
