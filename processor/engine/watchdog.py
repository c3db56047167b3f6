"""Telling a stuck processor from an idle one.

A processor that stops applying must say so within seconds, whatever the broker does: a
consumer that lost its group membership without noticing, a fetch that never returns, a
call into the broker that blocks, a broker that no longer answers. :class:`StallJudge`
decides from what the poll loop and the broker report, sampled about once a second by the
processor's watchdog thread; it keeps no clock of its own (``now`` is passed in), so its
rules are tested without waiting.

The rules, each over ``stall_after_s``:

- **blocked**: the poll loop has not come round (it is stuck inside one call);
- **not consuming**: records arrived in a partition this processor fetches (its end
  offset grew) and its position has not moved since, while the processor applied
  nothing else either (a partition whose records wait behind a backlog the consumer
  already fetched from other partitions, such as a view's input behind its underlying
  topic's, is busy, not stuck);
- **out of the group**: a group member's consumer is not in a steady, joined group;
- **broker silent**: the broker has not answered the watchdog's end-offset query.

A partition's end may move without anything to consume (a transaction marker, an aborted
transaction), so only an end that grows *after* the position last moved counts, and a
restarted consumer starts from a clean slate (:meth:`StallJudge.reset`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from processor.log import EndOffsets, TopicPartitionKey

log = logging.getLogger(__name__)

#: How long a processor may show one of the signs before it is called stuck.
DEFAULT_STALL_AFTER_S = 5.0


@dataclass(frozen=True, slots=True)
class LoopReport:
    """What the watchdog samples: the loop's last turn, where fetching is, and the ends."""

    #: ``time.monotonic()`` of the poll loop's last turn, and what it was doing then.
    beat: float
    phase: str
    #: Next offset to consume per fetching partition (the consumer's position).
    positions: Mapping[TopicPartitionKey, int]
    #: End offset per partition as the broker answered now (None: it did not answer).
    ends: Mapping[TopicPartitionKey, int] | None
    #: The group member's state ("" when steady or not a group member).
    group_state: str = ""
    #: ``time.monotonic()`` when the end offsets were asked for (a silent broker has
    #: been silent at least since then).
    asked_at: float = 0.0
    #: Records the processor has applied so far.
    applied: int = 0


@dataclass(slots=True)
class _Partition:
    position: int
    end: int
    #: When records first arrived after the position last moved (None: none since).
    waiting_since: float | None = None


@dataclass(slots=True)
class StallJudge:
    """Decides, sample by sample, whether the processor is stuck (and why)."""

    stall_after_s: float = DEFAULT_STALL_AFTER_S
    _partitions: dict[TopicPartitionKey, _Partition] = field(default_factory=dict)
    #: When the broker last answered (None: not asked yet).
    _answered_at: float | None = None
    _out_of_group_since: float | None = None
    #: Records applied as last seen, and when that count last grew.
    _applied: int = -1
    _applied_at: float = 0.0

    def reset(self) -> None:
        """Forget every partition (a new consumer starts from its committed offsets)."""
        self._partitions.clear()
        self._answered_at = None
        self._out_of_group_since = None
        self._applied = -1

    def judge(self, report: LoopReport, now: float) -> str | None:
        """None while the processor is working or idle, else what is stuck, in words.

        A blocked loop while the broker does not answer the watchdog either names both
        (the broker is the likely cause), so a frozen broker reads the same whatever the
        loop was doing when it froze.
        """
        silent = self._silence(report, now)
        if report.applied != self._applied:
            self._applied, self._applied_at = report.applied, now
        blocked = now - report.beat
        if blocked >= self.stall_after_s:
            reason = f"its poll loop has been blocked in {report.phase} for {blocked:.0f}s"
            if silent is not None:
                reason += f", and the broker has not answered for {silent:.0f}s"
            return reason
        if report.group_state:
            if self._out_of_group_since is None:
                self._out_of_group_since = now
            out = now - self._out_of_group_since
            if out >= self.stall_after_s:
                return (
                    f"its consumer has not been a joined group member for {out:.0f}s "
                    f"(group state {report.group_state})"
                )
        else:
            self._out_of_group_since = None
        if silent is not None:
            if silent >= self.stall_after_s:
                return f"the broker has not answered for {silent:.0f}s"
            return None
        assert report.ends is not None
        return self._not_consuming(report.positions, report.ends, now)

    def _silence(self, report: LoopReport, now: float) -> float | None:
        """How long the broker has been silent (None: it answered this time)."""
        if report.ends is not None:
            self._answered_at = now
            return None
        if self._answered_at is None:
            self._answered_at = report.asked_at
        return now - self._answered_at

    def _not_consuming(
        self,
        positions: Mapping[TopicPartitionKey, int],
        ends: Mapping[TopicPartitionKey, int],
        now: float,
    ) -> str | None:
        for gone in set(self._partitions) - set(positions):
            del self._partitions[gone]
        worst: tuple[float, TopicPartitionKey, _Partition] | None = None
        for tp, position in positions.items():
            end = ends.get(tp)
            if end is None:
                continue
            seen = self._partitions.get(tp)
            if seen is None or position != seen.position:
                self._partitions[tp] = _Partition(position, end)
                continue
            if end > seen.end and seen.waiting_since is None:
                seen.waiting_since = now
            seen.end = max(seen.end, end)
            if seen.waiting_since is not None:
                waited = now - max(seen.waiting_since, self._applied_at)
                if waited >= self.stall_after_s and (worst is None or waited > worst[0]):
                    worst = (waited, tp, seen)
        if worst is None:
            return None
        waited, (topic, partition), seen = worst
        return (
            f"{topic}[{partition}] has records up to offset {seen.end - 1} but its position "
            f"has stayed at {seen.position} for {waited:.0f}s"
        )


@dataclass(slots=True)
class LoopState:
    """What the processor's poll loop says of itself: written by the loop, read by the
    watchdog thread (each field is replaced whole, so a read sees a consistent value)."""

    #: ``time.monotonic()`` of the loop's last turn, and what it was doing then.
    beat: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    #: Next input offset to apply per fetching partition (where it resumed, then after
    #: each batch).
    positions: dict[TopicPartitionKey, int] = field(default_factory=dict)
    #: Pipelines started so far (the judge starts over with each new consumer).
    pipelines: int = 0
    #: The consumer's group state ("" when steady or groupless).
    group_state: Callable[[], str] = lambda: ""
    #: Records applied so far.
    applied: Callable[[], int] = lambda: 0


class Watchdog:
    """The processor's watchdog thread (:meth:`run`): samples ``loop`` about once a
    second, asks the broker where the partitions end, and tells ``on_stuck`` (once) what
    :class:`StallJudge` finds stuck, and ``on_resumed`` when the processor applies its
    input again (it applied something, or has nothing left to apply)."""

    def __init__(
        self,
        loop: LoopState,
        end_offsets: EndOffsets,
        stall_after_s: float,
        on_stuck: Callable[[str], None],
        on_resumed: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._end_offsets = end_offsets
        self._judge = StallJudge(stall_after_s)
        self._on_stuck = on_stuck
        self._on_resumed = on_resumed

    def run(self, stop: threading.Event) -> None:
        """Judge until ``stop`` is set."""
        loop, judge = self._loop, self._judge
        pipeline = loop.pipelines
        stuck = False
        applied_at_stall = 0
        try:
            while not stop.wait(1.0):
                if loop.pipelines != pipeline:
                    pipeline = loop.pipelines
                    judge.reset()
                positions = dict(loop.positions)
                asked_at = time.monotonic()
                ends = self._end_offsets.ends(sorted(positions), timeout_s=1.0)
                report = LoopReport(
                    beat=loop.beat,
                    phase=loop.phase,
                    positions=positions,
                    ends=ends,
                    group_state=loop.group_state(),
                    asked_at=asked_at,
                    applied=loop.applied(),
                )
                verdict = judge.judge(report, time.monotonic())
                log.debug("watchdog: %s -> %s", report, verdict)
                if verdict is not None and not stuck:
                    stuck, applied_at_stall = True, loop.applied()
                    self._on_stuck(verdict)
                elif verdict is None and stuck:
                    caught_up = ends is not None and all(
                        ends.get(tp, 0) - position <= 1 for tp, position in positions.items()
                    )
                    if loop.applied() > applied_at_stall or (positions and caught_up):
                        stuck = False
                        self._on_resumed()
        finally:
            self._end_offsets.close()
