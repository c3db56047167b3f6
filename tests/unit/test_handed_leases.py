"""A queue's at-least-once leases reach the query service twice, handed over before
their commit and then committed (issue 34): each is delivered once
(processor/subscriptions/handed.py)."""

from __future__ import annotations

from processor.queues.commands import Delivery
from processor.subscriptions.handed import HandedLeases


def _lease(bookmark: str, deliveries: int = 1, subscription: str = "svc/1") -> Delivery:
    return Delivery(subscription, "lease", bookmark, b"", None, deliveries)


def test_the_committed_twin_of_a_handed_lease_is_dropped_once() -> None:
    leases = HandedLeases()
    leases.handed(_lease("t/0/1"), now=0.0)
    assert not leases.new(_lease("t/0/1"))  # its twin
    assert leases.new(_lease("t/0/1"))  # the same lease made again later: delivered
    assert len(leases) == 0


def test_a_lease_is_known_by_subscription_bookmark_and_count() -> None:
    leases = HandedLeases()
    leases.handed(_lease("t/0/1", deliveries=1), now=0.0)
    assert leases.new(_lease("t/0/1", deliveries=2))  # delivered again: another lease
    assert leases.new(_lease("t/0/1", subscription="svc/2"))  # leased to another
    assert len(leases) == 1


def test_a_committed_copy_with_no_handed_twin_is_not_kept() -> None:
    leases = HandedLeases()
    for n in range(1000):
        assert leases.new(_lease(f"t/0/{n}"))
    assert len(leases) == 0


def test_handed_leases_whose_twin_never_comes_are_forgotten() -> None:
    leases = HandedLeases()
    leases.handed(_lease("t/0/1"), now=0.0)
    leases.handed(_lease("t/0/2"), now=100.0)
    leases.forget_old(now=HandedLeases.KEEP_S + 50.0)
    assert len(leases) == 1
    assert not leases.new(_lease("t/0/2"))
