"""Whether the read replica has caught up with the changelogs, and how stale it is.

Both are decided from what fetches showed (:class:`~processor.log.TailState`), never
from ListOffsets, which some brokers under-report (ARCHITECTURE.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping

from processor.log import TailState, TopicPartitionKey

log = logging.getLogger(__name__)

#: Confirmed this recently, the replica is current (staleness 0).
CURRENT_S = 0.5


class CatchUp:
    """Catch-up and staleness of one replica over a fixed set of changelog partitions.

    A replica that follows changelogs is catching up from :meth:`begin` until every
    partition was read to the end a fetch showed; one that never follows (fed by hand in
    tests and benchmarks) counts as caught up and current. Not locked: the replica
    calls the updating methods under its lock; the others read single attributes.
    """

    def __init__(self, partitions: Collection[TopicPartitionKey]) -> None:
        self.partitions = frozenset(partitions)
        self.following = False
        self.done = False
        self.started = time.monotonic()
        self.reached: set[TopicPartitionKey] = set()
        self.states: Mapping[TopicPartitionKey, TailState] = {}
        #: Held: not caught up whatever was read (see :meth:`hold`).
        self.held = False

    def begin(self) -> None:
        """Count as catching up from now (idempotent)."""
        if not self.following:
            self.following = True
            self.started = time.monotonic()

    @property
    def caught_up(self) -> bool:
        # No changelog at all (a topology of plain topics only): nothing to catch up on.
        return (self.done or not self.following or not self.partitions) and not self.held

    def hold(self) -> None:
        """Count as catching up until :meth:`release`, whatever is read meanwhile: the
        changelogs may not hold the SOW yet (its processor is still restoring it, or
        re-publishing a lost log)."""
        self.held = True

    def release(self) -> None:
        """End a hold: caught up again once every partition is read to an end a fetch
        shows from now on (what was written before the release, all of it)."""
        self.held = False
        self.done = False
        self.reached.clear()
        self.started = time.monotonic()

    def saw(self, states: Mapping[TopicPartitionKey, TailState]) -> None:
        """The tail's latest partition states (for staleness and progress)."""
        self.states = states

    def needs(self, ends: Collection[TopicPartitionKey]) -> bool:
        """Whether partition ends just seen are news (a partition's first end)."""
        return not self.reached.issuperset(ends)

    def reached_end(self, ends: Collection[TopicPartitionKey], records: int) -> None:
        """Partitions read to their end; ``records`` is the replica's size, for the log."""
        self.reached.update(ends)
        if not self.done and not self.held and self.reached >= self.partitions:
            self.done = True
            log.info(
                "the replica caught up with the changelogs: %s records in %.1fs",
                f"{records:,}",
                time.monotonic() - self.started,
            )

    def status(self, read_next: Mapping[TopicPartitionKey, int], records: int) -> str:
        """How far along catching up is (for errors and the log)."""
        if self.caught_up:
            return "the replica is caught up with the changelogs"
        behind = 0
        for tp, state in self.states.items():
            if tp not in self.reached and state.end >= 0:
                behind += max(state.end - read_next.get(tp, 0), 0)
        estimate = f"; about {behind:,} changelog records to go" if behind else ""
        return (
            f"the replica is catching up with the changelogs: {records:,} records loaded in "
            f"{time.monotonic() - self.started:.1f}s, {len(self.reached)} of "
            f"{len(self.partitions)} changelog partitions read to their end{estimate}"
        )

    def figures(self, read_next: Mapping[TopicPartitionKey, int]) -> tuple[int, int | None]:
        """Catching up as (changelog offsets read, offsets to read in all), summed over
        partitions, for a progress bar; the total is None until every partition's end
        was fetched once."""
        done = sum(read_next.get(tp, 0) for tp in self.partitions)
        ends = [self.states[tp].end for tp in self.partitions if tp in self.states]
        if len(ends) < len(self.partitions) or min(ends, default=0) < 0:
            return done, None
        return done, max(sum(ends), done)

    def lag(
        self,
        read_next: Mapping[TopicPartitionKey, int],
        pending: Mapping[TopicPartitionKey, int],
        names: Mapping[str, str],
        topics: Collection[str],
    ) -> dict[str, int]:
        """Records per topic that fetches showed committed and were not applied yet:
        ``read_next`` and ``pending`` (read, not applied) per changelog partition,
        ``names``: the topic of each changelog."""
        lag = dict.fromkeys(topics, 0)
        for tp, state in self.states.items():
            name = names.get(tp[0])
            if name is None or state.end < 0:
                continue
            read = max(state.position, read_next.get(tp, 0))
            lag[name] += max(state.end - read, 0) + pending.get(tp, 0)
        return lag

    def staleness_ms(self) -> int:
        """How long ago fetches last confirmed that every partition had nothing the
        replica lacks (the oldest partition counts; never confirmed: since ``begin``);
        0 when within ``CURRENT_S`` or when not following."""
        if not self.following:
            return 0
        now = time.monotonic()
        oldest = now
        states = self.states
        for tp in self.partitions:
            state = states.get(tp)
            confirmed = None if state is None else state.confirmed_at
            oldest = min(oldest, self.started if confirmed is None else confirmed)
        age = now - oldest
        return 0 if age <= CURRENT_S else int(age * 1000)
