"""Standby stores: warm copies of the store partitions a processor does not own.

As Kafka Streams' standby replicas (``num.standby.replicas``): a group-mode processor with
``standby=all`` follows the changelog of every persistent store partition of its topology
that it does not own, writing it into the same store files (``state_dir/<topic>/<partition>``)
it would use as their owner. When the group gives it one of those partitions, the standby's
open store is handed to the owner's recovery, which replays only the changelog past the
store's position instead of the whole changelog. When a partition is taken away, its store
becomes a standby and stays warm.

librdkafka's Python client cannot plug in a custom partition assignor, so the group does
not know where the warm copies are: "all" is the only placement. Every standby-enabled
processor other than the owner holds a warm copy of every partition; the cost is disk and
changelog reads (each standby reads every changelog once). Transient topics have no standby
(their stores start empty by design).

The work runs in the processor's poll loop (:meth:`Standby.step`, a bounded chunk of
changelog records per call, never waiting), after recovery and beside the input, so it
never holds up a poll. Not thread-safe: the poll loop's thread calls every method.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from processor.engine.recovery import Restored, replay_batch
from processor.log import ChangelogTail, Record, lost_log_level
from processor.state import CHANGELOG_OFFSET, Store, offset_from
from processor.topology.model import Durability, SowTopic, Topology

log = logging.getLogger(__name__)

#: A store partition: (SOW topic name, partition).
StoreKey = tuple[str, int]


@dataclass(slots=True, eq=False)
class Follower:
    """One standby store partition: its store, the changelog offset it reflects, and what
    its replayed records show about the input (handed to the owner's recovery)."""

    topic: SowTopic
    partition: int
    store: Store
    position: int
    restored: Restored = field(default_factory=Restored)
    unfinished: list[Record] = field(default_factory=list)

    def log_next(self) -> dict[str, int]:
        """Next input offset per log topic the replayed changelog shows applied."""
        for record in self.unfinished:
            self.restored.saw_change(record)
        self.unfinished.clear()
        return dict(self.restored.log_next)


class Standby:
    """The standby store partitions of one processor pipeline.

    ``follow`` sets which partitions to keep warm (every persistent one not owned),
    ``take`` hands one to its new owner, ``give`` takes a revoked owner's store back,
    ``step`` applies the next chunk of changelog records, ``close`` closes everything.
    A store is open at most once: it is either here or with the owner.
    """

    #: Changelog records one ``step`` applies at most.
    CHUNK = 5000

    def __init__(
        self,
        topology: Topology,
        open_store: Callable[[SowTopic, int], Store],
        tail: Callable[[], ChangelogTail],
    ) -> None:
        transient = Durability.TRANSIENT
        self._topics = [t for t in topology.topics.values() if t.durability is not transient]
        self._by_changelog = {t.changelog_topic: t for t in self._topics}
        self._open_store = open_store
        self._new_tail = tail
        self._tail: ChangelogTail | None = None
        self._followers: dict[StoreKey, Follower] = {}
        #: Partitions whose changelog went back below the store (a lost log): not followed
        #: again; their owner's recovery decides what to do.
        self._stopped: set[StoreKey] = set()
        self._dirty = False
        #: Changelog records written into standby stores (monitoring, tests).
        self.records = 0

    @property
    def partitions(self) -> list[StoreKey]:
        """The store partitions kept warm now."""
        return sorted(self._followers)

    def follow(self, owned: set[StoreKey]) -> None:
        """Keep a warm copy of every persistent store partition not in ``owned``, opening
        the stores it lacks. A standby still held for a partition in ``owned`` is closed:
        the caller takes the stores it now owns with :meth:`take` before calling this."""
        wanted = {(t.name, p) for t in self._topics for p in range(t.partitions)}
        wanted -= owned
        wanted -= self._stopped
        for key in [k for k in self._followers if k not in wanted]:
            self._followers.pop(key).store.close()
            self._dirty = True
        by_name = {t.name: t for t in self._topics}
        for name, partition in sorted(wanted - set(self._followers)):
            store = self._open_store(by_name[name], partition)
            self._add(by_name[name], partition, store)
        if self._dirty:
            log.info(
                "standby stores: %s",
                ", ".join(f"{t}[{p}]" for t, p in self.partitions) or "none",
            )

    def take(self, key: StoreKey) -> tuple[Store, dict[str, int]] | None:
        """Hand the standby store of ``key`` to its new owner: the open store and the next
        input offset per log topic its changelog shows applied. None when there is none."""
        follower = self._followers.pop(key, None)
        if follower is None:
            return None
        self._dirty = True
        return follower.store, follower.log_next()

    def give(self, topic: SowTopic, partition: int, store: Store) -> None:
        """Keep a revoked partition's store (committed state only) warm from now on."""
        if topic.durability is Durability.TRANSIENT or (topic.name, partition) in self._stopped:
            store.close()
            return
        self._add(topic, partition, store)

    def _add(self, topic: SowTopic, partition: int, store: Store) -> None:
        position = offset_from(store.get_meta(CHANGELOG_OFFSET))
        self._followers[(topic.name, partition)] = Follower(topic, partition, store, position)
        self._dirty = True

    def step(self) -> bool:
        """Apply up to ``CHUNK`` changelog records that are already fetched (never waits);
        True when it applied a full chunk (more are probably waiting)."""
        if self._dirty:
            self._reassign()
        if self._tail is None:
            return False
        records = self._tail.consume(self.CHUNK, 0)
        if not records:
            return False
        batches: dict[tuple[str, int], list[Record]] = {}
        for record in records:
            batches.setdefault((record.topic(), record.partition()), []).append(record)
        for (changelog, partition), batch in batches.items():
            topic = self._by_changelog[changelog]
            follower = self._followers.get((topic.name, partition))
            if follower is None:
                continue  # handed over since the fetch
            if batch[0].offset() < follower.position:
                self._stop_following(follower, batch[0].offset())
                continue
            expiring = topic.expiration_s is not None
            follower.position = replay_batch(
                follower.store, batch, follower.restored, follower.unfinished, expiring
            )
            self.records += len(batch)
        return len(records) >= self.CHUNK

    def _stop_following(self, follower: Follower, offset: int) -> None:
        key = (follower.topic.name, follower.partition)
        log.log(
            lost_log_level(),
            "standby %s[%d]: the changelog went back to offset %d below the store's %d (the "
            "broker lost or truncated the log); no longer following it: its owner's "
            "recovery keeps the store and republishes it",
            key[0],
            key[1],
            offset,
            follower.position,
        )
        self._stopped.add(key)
        self._followers.pop(key)
        follower.store.close()
        self._dirty = True

    def behind(self) -> int | None:
        """Changelog records the standby stores lag behind the ends the latest fetches
        showed; None while an end is not known yet (or the partitions just changed)."""
        if self._dirty:
            return None
        if self._tail is None:
            return 0
        states = self._tail.states()
        lag = 0
        for follower in self._followers.values():
            state = states.get((follower.topic.changelog_topic, follower.partition))
            if state is None or state.end < 0:
                return None
            # The end counts transaction markers the store's position never passes.
            if not state.at_end:
                lag += max(state.end - follower.position, 0)
        return lag

    def _reassign(self) -> None:
        """Follow exactly the current standby partitions, each from its store's position."""
        self._dirty = False
        if self._tail is not None:
            self._tail.close()
            self._tail = None
        if not self._followers:
            return
        self._tail = self._new_tail()
        self._tail.assign(
            [(f.topic.changelog_topic, f.partition, f.position) for f in self._followers.values()]
        )

    def close(self) -> None:
        """Close the changelog tail and every standby store."""
        if self._tail is not None:
            self._tail.close()
            self._tail = None
        for follower in self._followers.values():
            follower.store.close()
        self._followers.clear()
