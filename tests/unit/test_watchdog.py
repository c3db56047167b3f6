"""The stuck-processor rules (processor/engine/watchdog.py), sample by sample: the clock is
passed in, so no test waits. The integration tests (test_stuck_processor.py) run the same
judge against a real consumer and broker."""

from __future__ import annotations

from processor.engine.watchdog import LoopReport, StallJudge

TP = ("orders", 0)


def report(
    now: float,
    position: int,
    end: int | None,
    *,
    beat: float | None = None,
    group: str = "",
    applied: int = 0,
) -> LoopReport:
    return LoopReport(
        applied=applied,
        beat=now if beat is None else beat,
        phase="fetching",
        positions={TP: position},
        ends=None if end is None else {TP: end},
        group_state=group,
        asked_at=now,
    )


def test_an_idle_processor_with_a_trailing_marker_is_not_stuck() -> None:
    judge = StallJudge(5.0)
    for second in range(30):  # position 10, end 11 (a commit marker), forever
        assert judge.judge(report(second, 10, 11), second) is None


def test_records_that_arrive_and_stay_unconsumed_are_stuck_after_the_limit() -> None:
    judge = StallJudge(5.0)
    assert judge.judge(report(0, 10, 10), 0) is None
    assert judge.judge(report(1, 10, 50), 1) is None  # records arrived at 1
    assert judge.judge(report(5, 10, 90), 5) is None
    verdict = judge.judge(report(6, 10, 90), 6)
    assert (
        verdict == "orders[0] has records up to offset 89 but its position has stayed at 10 for 5s"
    )


def test_a_position_that_moves_is_never_stuck_however_far_behind() -> None:
    judge = StallJudge(5.0)
    for second in range(30):
        assert judge.judge(report(second, second * 10, 10_000 + second * 100), second) is None


def test_a_blocked_loop_is_stuck_at_the_limit() -> None:
    judge = StallJudge(5.0)
    assert judge.judge(report(4.9, 0, 0, beat=0), 4.9) is None
    assert judge.judge(report(5, 0, 0, beat=0), 5) == (
        "its poll loop has been blocked in fetching for 5s"
    )


def test_a_blocked_loop_on_a_silent_broker_names_both() -> None:
    judge = StallJudge(5.0)
    assert judge.judge(report(0, 0, 0), 0) is None  # answered at 0
    assert judge.judge(report(3, 0, None, beat=1), 4) is None
    assert judge.judge(report(5, 0, None, beat=1), 6) == (
        "its poll loop has been blocked in fetching for 5s, and the broker has not answered for 6s"
    )


def test_a_silent_broker_counts_from_its_last_answer() -> None:
    judge = StallJudge(5.0)
    assert judge.judge(report(0, 0, 0), 0) is None  # answered at 0
    assert judge.judge(report(2, 0, None), 3) is None
    assert judge.judge(report(4, 0, None), 5) == "the broker has not answered for 5s"
    assert judge.judge(report(6, 0, 0), 6) is None  # answers again


def test_out_of_the_group_is_stuck_only_when_it_lasts() -> None:
    judge = StallJudge(5.0)
    assert judge.judge(report(0, 0, 0, group="up/wait-join"), 0) is None
    assert judge.judge(report(3, 0, 0), 3) is None  # a rebalance that ended
    assert judge.judge(report(4, 0, 0, group="up/wait-sync"), 4) is None
    assert judge.judge(report(9, 0, 0, group="up/wait-sync"), 9) == (
        "its consumer has not been a joined group member for 5s (group state up/wait-sync)"
    )


def test_a_reset_starts_over() -> None:
    judge = StallJudge(5.0)
    judge.judge(report(0, 10, 10), 0)
    judge.judge(report(1, 10, 20), 1)
    judge.reset()
    assert judge.judge(report(6, 10, 20), 6) is None  # the new consumer gets its own time
    assert judge.judge(report(12, 10, 20), 12) is None  # nothing new arrived since


def test_a_partition_waiting_behind_a_backlog_the_processor_applies_is_not_stuck() -> None:
    """A view's input waits behind its underlying topic's records the consumer fetched
    first: the processor applies all along, so it is busy, not stuck; once it applies
    nothing for the limit, the waiting partition is stuck again."""
    judge = StallJudge(5.0)
    assert judge.judge(report(0, 10, 10, applied=0), 0) is None
    for second in range(1, 20):  # records wait at 10, the processor applies elsewhere
        assert judge.judge(report(second, 10, 50, applied=second * 1000), second) is None
    for second in range(20, 24):  # it applied last at 19
        assert judge.judge(report(second, 10, 50, applied=19_000), second) is None
    verdict = judge.judge(report(24, 10, 50, applied=19_000), 24)
    assert verdict is not None
    assert "has stayed at 10 for 5s" in verdict
