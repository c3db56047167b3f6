"""How the processor takes its next batch (Processor._next_batch): what is fetched at
once; else the first record within the idle wait, with what came alongside; and, within
the log's commit settle after a commit, what arrives until the settle ends."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from processor.engine.processor import Processor


class Script:
    """An input log answering ``consume`` from a script, noting each call."""

    def __init__(self, *answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[int, float]] = []

    def consume(self, max_records: int, timeout_s: float) -> list[Any]:
        self.calls.append((max_records, timeout_s))
        return self.answers.pop(0) if self.answers else []


def next_batch(script: Script, max_batch: int = 10, settled_in_s: float = 0.0) -> list[Any]:
    loop: Any = SimpleNamespace(
        _max_batch=max_batch,
        _settled_at=time.monotonic() + settled_in_s,
        IDLE_WAIT_S=Processor.IDLE_WAIT_S,
    )
    return list(Processor._next_batch(loop, script))  # type: ignore[arg-type]


def test_what_is_fetched_is_taken_at_once_and_topped_up_without_waiting() -> None:
    script = Script([1, 2], [3])
    assert next_batch(script) == [1, 2, 3]
    assert script.calls == [(10, 0), (8, 0.0)]


def test_an_idle_loop_waits_for_the_first_record_then_takes_what_came_with_it() -> None:
    script = Script([], [1], [2, 3])
    assert next_batch(script) == [1, 2, 3]
    assert script.calls == [(10, 0), (1, Processor.IDLE_WAIT_S), (9, 0.0)]
    nothing = Script([], [])
    assert next_batch(nothing) == []
    assert len(nothing.calls) == 2


def test_within_the_commit_settle_the_batch_gathers_until_it_ends() -> None:
    script = Script([1], [2])
    assert next_batch(script, settled_in_s=0.003) == [1, 2]
    (_, first), (missing, waited) = script.calls
    assert (first, missing) == (0, 9)
    assert 0.0 < waited <= 0.003


def test_a_full_batch_or_a_batch_of_one_does_not_wait() -> None:
    full = Script(list(range(10)))
    assert len(next_batch(full, settled_in_s=1.0)) == 10
    assert full.calls == [(10, 0)]
    one = Script([], [1])
    assert next_batch(one, max_batch=1, settled_in_s=1.0) == [1]
    assert one.calls == [(1, 0), (1, Processor.IDLE_WAIT_S)]
