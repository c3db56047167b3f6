"""How long a query waits for ``min_position`` or a catch-up (processor/server/service.py):
the client's deadline decides, not a server-side cap."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from processor.server.calls import wait_budget


@dataclass
class _Deadline:
    """What the wait reads of a gRPC call's context: its time remaining."""

    remaining: float | None

    def time_remaining(self) -> float | None:
        return self.remaining


def test_a_long_deadline_is_waited_for_whole_less_room_to_answer() -> None:
    assert wait_budget(_Deadline(120.0), 0.0) == pytest.approx(119.75)


def test_what_the_request_asks_for_wins() -> None:
    assert wait_budget(_Deadline(120.0), 5.0) == 5.0


def test_no_deadline_leaves_the_default_to_the_query_engine() -> None:
    assert wait_budget(_Deadline(None), 0.0) == 0.0


def test_a_short_deadline_keeps_a_tenth_to_answer() -> None:
    assert wait_budget(_Deadline(1.0), 0.0) == pytest.approx(0.9)
