"""A queue partition's decisions (processor/queues/ledger.py), rule by rule as seed 002 and
the spec's section 6 state them, then a property: under any sequence of operations an
at-least-once queue loses no message and leases each to one subscription at a time, and
an at-most-once queue never delivers a message twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.queues.ledger import (
    Change,
    Ledger,
    Outcome,
    QueueMessage,
    QueueRules,
    priority_of,
)
from processor.topology.queue_spec import FairnessModel, Leasing, QueueSemantics


def msg(n: int, **fields: Any) -> QueueMessage:
    return QueueMessage(f"m{n}".encode(), n, **fields)


def leased(outcomes: list[Outcome]) -> list[tuple[bytes, str]]:
    return [(o.bookmark, o.subscriptions[0]) for o in outcomes if o.change is Change.LEASED]


def test_oldest_first_and_one_message_per_default_backlog() -> None:
    ledger = Ledger(QueueRules())
    for n in (3, 1, 2):
        ledger.enqueue(msg(n), 0)
    assert leased(ledger.subscribe("a", 0)) == [(b"m1", "a")]
    assert leased(ledger.acknowledge([b"m1"], "a", 0)) == [(b"m2", "a")]
    assert [m.bookmark for m in ledger.messages()] == [b"m2", b"m3"]


def test_priority_is_unsigned_64_bit_highest_first_ties_by_age_null_lowest() -> None:
    assert priority_of(-1) == 2**64 - 1
    assert priority_of(7.9) == 7
    assert priority_of("9") is None
    assert priority_of(None) is None
    assert priority_of(True) is None
    ledger = Ledger(QueueRules(max_per_subscription_backlog=10))
    for n, value in enumerate([5, None, -1, 5, 0]):
        ledger.enqueue(msg(n, priority=priority_of(value)), 0)
    order = leased(ledger.subscribe("a", 0, max_backlog=10))
    assert [b for b, _ in order] == [b"m2", b"m0", b"m3", b"m4", b"m1"]


def test_proportional_fairness_picks_the_lowest_leased_to_backlog_ratio() -> None:
    """The spec's example: Inky 1/2, Blinky 3/4, Clyde 4/10 -> Clyde."""
    ledger = Ledger(QueueRules(max_per_subscription_backlog=10))
    n = 0
    for name, backlog, held in (("inky", 2, 1), ("blinky", 4, 3), ("clyde", 10, 4)):
        ledger.subscribe(
            name, 0, max_backlog=backlog, matches=lambda m, me=name: m.data in (me, None)
        )
        for _ in range(held):
            ledger.enqueue(msg(n, data=name), 0)
            n += 1
    held_now = [ledger.subscription(name).held for name in ("inky", "blinky", "clyde")]
    assert [len(h) for h in held_now] == [1, 3, 4]  # type: ignore[union-attr]
    assert leased(ledger.enqueue(msg(999), 0)) == [(b"m999", "clyde")]


def test_round_robin_and_fast() -> None:
    robin = Ledger(QueueRules(fairness=FairnessModel.ROUND_ROBIN, max_per_subscription_backlog=5))
    fast = Ledger(QueueRules(fairness=FairnessModel.FAST, max_per_subscription_backlog=5))
    for ledger in (robin, fast):
        for name in "abc":
            ledger.subscribe(name, 0, max_backlog=5)
    got_robin = [leased(robin.enqueue(msg(n), 0))[0][1] for n in range(5)]
    got_fast = [leased(fast.enqueue(msg(n), 0))[0][1] for n in range(5)]
    assert got_robin == ["a", "b", "c", "a", "b"]
    assert got_fast == ["a"] * 5


def test_backlogs_the_subscribers_capped_by_the_queues_and_max_backlog() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=3, max_backlog=4))
    for n in range(10):
        ledger.enqueue(msg(n), 0)
    assert len(leased(ledger.subscribe("a", 0, max_backlog=100))) == 3  # capped at 3
    assert len(leased(ledger.subscribe("b", 0, max_backlog=2))) == 1  # MaxBacklog 4 in all
    assert ledger.leased == 4


def test_a_filter_skips_messages_for_other_subscribers() -> None:
    ledger = Ledger(QueueRules())
    ledger.enqueue(msg(1, data={"k": "x"}), 0)
    ledger.enqueue(msg(2, data={"k": "y"}), 0)
    assert leased(ledger.subscribe("y", 0, matches=lambda m: m.data["k"] == "y")) == [(b"m2", "y")]


def test_an_expired_lease_returns_and_max_deliveries_expires_it() -> None:
    ledger = Ledger(QueueRules(lease_period_ms=100, max_deliveries=2))
    ledger.enqueue(msg(1), 0)
    first = ledger.subscribe("a", 0)
    assert first[0].deadline_ms == 100
    second = ledger.tick(100)
    assert [o.change for o in second] == [Change.RETURNED, Change.LEASED]
    third = ledger.tick(200)
    assert [(o.change, o.reason) for o in third] == [
        (Change.EXPIRED, "delivered 2 times (MaxDeliveries)")
    ]
    assert len(ledger) == 0
    assert not ledger.subscription("a").held


def test_max_cancels_expires_on_the_nth_cancel() -> None:
    ledger = Ledger(QueueRules(max_cancels=2))
    ledger.enqueue(msg(1), 0)
    ledger.subscribe("a", 0)
    assert [o.change for o in ledger.cancel([b"m1"], "a", 0)] == [Change.RETURNED, Change.LEASED]
    assert [(o.change, o.reason) for o in ledger.cancel([b"m1"], "a", 0)] == [
        (Change.EXPIRED, "cancelled 2 times (MaxCancels)")
    ]


def test_strict_leasing_refuses_an_ack_by_another_subscription_sublet_allows_it() -> None:
    for leasing, acked in ((Leasing.STRICT, False), (Leasing.SUBLET, True)):
        ledger = Ledger(QueueRules(leasing=leasing))
        ledger.enqueue(msg(1), 0)
        ledger.subscribe("a", 0)
        outcomes = ledger.acknowledge([b"m1"], "b", 0)
        assert (Outcome(Change.ACKED, b"m1") in outcomes) is acked
        assert (ledger.message(b"m1") is None) is acked


def test_at_most_once_removes_when_sent_and_the_ack_frees_the_slot() -> None:
    ledger = Ledger(
        QueueRules(semantics=QueueSemantics.AT_MOST_ONCE, fairness=FairnessModel.ROUND_ROBIN)
    )
    ledger.enqueue(msg(1), 0)
    ledger.enqueue(msg(2), 0)
    assert leased(ledger.subscribe("a", 0)) == [(b"m1", "a")]
    assert ledger.message(b"m1") is None
    assert ledger.cancel([b"m1"], "a", 0) == []
    assert ledger.expire([b"m2"], "a", 0) == []
    assert leased(ledger.disconnect("a", 0)) == []  # nothing returns
    assert leased(ledger.subscribe("a", 0)) == [(b"m2", "a")]
    assert leased(ledger.acknowledge([b"m2"], "a", 0)) == []
    assert ledger.subscription("a").free == 1  # type: ignore[union-attr]


def test_a_disconnect_returns_its_leases_to_the_others() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=2))
    ledger.subscribe("a", 0, max_backlog=2)
    ledger.enqueue(msg(1), 0)
    ledger.enqueue(msg(2), 0)
    ledger.subscribe("b", 0, max_backlog=2)
    outcomes = ledger.disconnect("a", 0)
    assert [o.change for o in outcomes].count(Change.RETURNED) == 2
    assert sorted(leased(outcomes)) == [(b"m1", "b"), (b"m2", "b")]


def test_a_message_expires_at_its_time_even_while_leased() -> None:
    ledger = Ledger(QueueRules())
    ledger.enqueue(msg(1, expires_ms=50), 0)
    ledger.enqueue(msg(2), 0)
    ledger.subscribe("a", 0)
    outcomes = ledger.tick(50)
    assert [(o.change, o.bookmark) for o in outcomes] == [
        (Change.EXPIRED, b"m1"),
        (Change.LEASED, b"m2"),
    ]


def test_a_barrier_waits_for_every_earlier_ack_then_goes_to_all_matching() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=5))
    ledger.subscribe("a", 0, max_backlog=5)
    ledger.subscribe("b", 0, max_backlog=5, matches=lambda m: not m.barrier)
    ledger.enqueue(msg(1), 0)
    ledger.enqueue(msg(2, barrier=True), 0)
    later = ledger.enqueue(msg(3), 0)
    assert leased(later) == []  # behind the barrier
    outcomes = ledger.acknowledge([b"m1"], None, 0)
    assert outcomes[1] == Outcome(Change.BARRIER, b"m2", ("a",))
    assert leased(outcomes) == [(b"m3", "a")]  # a's backlog ignored the barrier


def test_an_ack_before_the_message_arrives_is_kept_for_deferred_ack_expiration() -> None:
    ledger = Ledger(QueueRules(deferred_ack_ms=1000))
    ledger.acknowledge([b"m1", b"m2"], None, 0)
    assert ledger.enqueue(msg(1), 999) == [Outcome(Change.ACKED, b"m1")]
    ledger.tick(1000)
    assert ledger.enqueue(msg(2), 1000) == []
    assert ledger.message(b"m2") is not None


def test_an_enqueue_tries_only_the_new_message_when_nothing_else_changed() -> None:
    """A subscriber whose filter skips the backlog is not asked about the whole backlog
    at every enqueue (the cost stays linear in the messages)."""
    asked = [0]

    def only_a(message: QueueMessage) -> bool:
        asked[0] += 1
        return bool(message.data == "A")

    ledger = Ledger(QueueRules())
    ledger.subscribe("a", 0, matches=only_a)
    for n in range(2_000):
        ledger.enqueue(msg(n, data="B"), n)
    assert asked[0] == 2_000
    assert leased(ledger.enqueue(msg(9_999, data="A"), 3_000)) == [(b"m9999", "a")]


def test_a_message_past_its_expiration_is_never_leased() -> None:
    ledger = Ledger(QueueRules())
    ledger.subscribe("a", 0)
    outcomes = ledger.enqueue(msg(1, expires_ms=5), 10)
    assert [o.change for o in outcomes] == [Change.EXPIRED]
    ledger.enqueue(msg(2, expires_ms=50), 10)  # leased to a at once
    ledger.enqueue(msg(3, expires_ms=50), 10)
    assert [o.change for o in ledger.acknowledge([b"m2"], "a", 100)] == [
        Change.ACKED,
        Change.EXPIRED,
    ]


def test_a_subscriber_with_max_backlog_0_gets_barrier_messages_only() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=5))
    ledger.subscribe("watcher", 0, max_backlog=0)
    assert leased(ledger.enqueue(msg(1), 0)) == []
    outcomes = ledger.enqueue(msg(2, barrier=True), 0)
    assert outcomes == []  # behind m1, which nobody can take
    ledger.subscribe("worker", 0)
    outcomes = ledger.acknowledge([b"m1"], "worker", 0)
    assert Outcome(Change.BARRIER, b"m2", ("watcher", "worker")) in outcomes


def test_max_backlog_counts_unacknowledged_deliveries_of_an_at_most_once_queue() -> None:
    ledger = Ledger(
        QueueRules(
            semantics=QueueSemantics.AT_MOST_ONCE,
            fairness=FairnessModel.ROUND_ROBIN,
            max_backlog=1,
        )
    )
    ledger.subscribe("a", 0)
    ledger.subscribe("b", 0)
    delivered = [leased(ledger.enqueue(msg(n), 0)) for n in range(3)]
    assert delivered == [[(b"m0", "a")], [], []]
    assert leased(ledger.acknowledge([b"m0"], "a", 0)) == [(b"m1", "b")]


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "subscribe", "ack", "cancel", "tick", "disconnect", "expire"]),
        st.integers(0, 5),
        st.integers(1, 3),
    ),
    max_size=60,
)


def test_target_queue_depth_keeps_only_the_oldest_messages_active() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=10, target_queue_depth=2))
    for n in range(4):
        ledger.enqueue(msg(n), 0)
    assert leased(ledger.subscribe("a", 0, max_backlog=10)) == [(b"m0", "a"), (b"m1", "a")]
    assert leased(ledger.enqueue(msg(4), 0)) == []  # beyond the active two
    assert leased(ledger.acknowledge([b"m0"], "a", 0)) == [(b"m2", "a")]


def test_a_barrier_with_no_matching_subscriber_waits_for_one() -> None:
    ledger = Ledger(QueueRules(max_per_subscription_backlog=10))
    ledger.enqueue(msg(0, barrier=True), 0)
    ledger.enqueue(msg(1), 0)
    assert ledger.subscribe("a", 0, max_backlog=10, matches=lambda m: not m.barrier) == []
    assert len(ledger) == 2  # kept: nobody took it
    outcomes = ledger.subscribe("b", 0, max_backlog=10)
    assert [(o.change, o.bookmark, o.subscriptions) for o in outcomes] == [
        (Change.BARRIER, b"m0", ("b",)),
        (Change.LEASED, b"m1", ("a",)),
    ]


def test_restore_takes_back_leases_subscriptions_and_deferred_acks() -> None:
    rules = QueueRules(max_per_subscription_backlog=10, lease_period_ms=100)
    ledger = Ledger(rules)
    held = msg(0, holder="a", deadline_ms=50, deliveries=1)
    orphan = msg(1, holder="gone", deadline_ms=50, deliveries=1)
    ledger.restore([("a", 10, lambda _m: True)], [held, msg(2), orphan])
    ledger.keep_deferred_acks({b"m9": 1_000})
    assert ledger.leased == 1  # a's lease; the orphan's returned
    assert ledger.subscription("a").held == {b"m0"}  # type: ignore[union-attr]
    assert leased(ledger.dispatch(0)) == []  # paused until its service is heard
    assert leased(ledger.resume(["a"], 0)) == [(b"m1", "a"), (b"m2", "a")]
    assert [o.change for o in ledger.tick(50)] == [Change.RETURNED, Change.LEASED]
    assert ledger.enqueue(msg(9), 10) == [Outcome(Change.ACKED, b"m9")]


def test_a_restored_subscription_gets_nothing_until_resumed_not_even_a_barrier() -> None:
    """A subscription restored after a restart may have died with it: at-most-once would
    lose what it is sent (issue 31 item 1)."""
    rules = QueueRules(semantics=QueueSemantics.AT_MOST_ONCE, max_per_subscription_backlog=5)
    ledger = Ledger(rules)
    ledger.restore([("dead", 5, lambda _m: True)], [msg(0), msg(1, barrier=True), msg(2)])
    assert ledger.dispatch(0) == []
    outcomes = ledger.subscribe("new", 0, max_backlog=5)
    assert [(o.change, o.bookmark, o.subscriptions) for o in outcomes] == [
        (Change.LEASED, b"m0", ("new",)),
        (Change.BARRIER, b"m1", ("new",)),  # not to the paused one
        (Change.LEASED, b"m2", ("new",)),
    ]
    assert ledger.resume(["dead"], 0) == []  # resumed: nothing left for it


@settings(max_examples=200, deadline=None)
@given(
    operations=OPERATIONS,
    semantics=st.sampled_from(list(QueueSemantics)),
    fairness=st.sampled_from(list(FairnessModel)),
    barriers=st.booleans(),
)
def test_no_message_is_lost_or_held_twice(
    operations: list[tuple[str, int, int]],
    semantics: QueueSemantics,
    fairness: FairnessModel,
    barriers: bool,
) -> None:
    """(Priority and barriers exclude each other, as in AMPS.)"""
    if semantics is QueueSemantics.AT_MOST_ONCE:
        fairness = FairnessModel.ROUND_ROBIN
    ledger = Ledger(
        QueueRules(
            semantics=semantics,
            fairness=fairness,
            lease_period_ms=50,
            max_per_subscription_backlog=3,
            max_deliveries=4,
            max_cancels=3,
        )
    )
    now, enqueued = 0, 0
    settled: set[bytes] = set()  # acknowledged or expired
    delivered: dict[bytes, int] = {}
    widest: dict[str, int] = {}  # the largest backlog each subscription was given
    for name, a, b in operations:
        now += 10
        subscription = f"s{a % 3}"
        if name == "enqueue":  # some with a priority, some expiring, some barriers
            priority = None if a < 3 or barriers else a
            expires = now + 25 * b if a == 5 else None
            barrier = barriers and a == 4
            message = msg(enqueued, priority=priority, expires_ms=expires, barrier=barrier)
            outcomes = ledger.enqueue(message, now)
            enqueued += 1
        elif name == "subscribe":  # a replaced subscription keeps its leases
            widest[subscription] = max(widest.get(subscription, 0), b)
            outcomes = ledger.subscribe(subscription, now, max_backlog=b)
        elif name == "ack":
            outcomes = ledger.acknowledge([f"m{a}".encode()], subscription, now)
        elif name == "cancel":
            outcomes = ledger.cancel([f"m{a}".encode()], subscription, now)
        elif name == "expire":
            outcomes = ledger.expire([f"m{a}".encode()], subscription, now)
        elif name == "tick":
            outcomes = ledger.tick(now + 40 * b)
        else:
            outcomes = ledger.disconnect(subscription, now)
        for outcome in outcomes:
            if outcome.change is Change.LEASED:
                delivered[outcome.bookmark] = delivered.get(outcome.bookmark, 0) + 1
            if outcome.change in (Change.ACKED, Change.EXPIRED, Change.BARRIER):
                assert outcome.bookmark not in settled
                settled.add(outcome.bookmark)
        for message in ledger.messages():
            if message.holder is not None:
                holder = ledger.subscription(message.holder)
                assert holder is not None
                assert message.bookmark in holder.held
        for sub in ("s0", "s1", "s2"):
            found = ledger.subscription(sub)
            assert found is None or len(found.held) <= min(widest[sub], 3)
    held = {m.bookmark for m in ledger.messages()}
    if semantics is QueueSemantics.AT_LEAST_ONCE:
        # every message is held, acknowledged or expired: none lost
        for n in range(enqueued):
            bookmark = f"m{n}".encode()
            assert (bookmark in held) != (bookmark in settled), bookmark
    else:
        assert all(count == 1 for count in delivered.values()), delivered
        for n in range(enqueued):  # held, delivered once, or expired undelivered
            bookmark = f"m{n}".encode()
            places = (bookmark in held, bookmark in delivered, bookmark in settled)
            assert sum(places) == 1, (bookmark, places)


def _delivery_order(ledger: Ledger) -> list[bytes]:
    """What one subscriber with a backlog of 1, acknowledging each lease, receives."""
    order: list[bytes] = []
    outcomes = ledger.subscribe("a", 0)
    while outcomes:
        sent = [o.bookmark for o in outcomes if o.change in (Change.LEASED, Change.BARRIER)]
        order.extend(sent)
        leases = [o.bookmark for o in outcomes if o.change is Change.LEASED]
        outcomes = ledger.acknowledge(leases, "a", 0) if leases else []
    return order


def expected_order(stream: list[tuple[int | None, bool]]) -> list[bytes]:
    """The model: a barrier splits the stream; before it, every older message by
    priority (highest first, NULL lowest, ties by age); then the barrier; and so on."""
    order: list[bytes] = []
    segment: list[tuple[tuple[int, int], bytes]] = []
    for n, (priority, barrier) in enumerate(stream):
        if barrier:
            order.extend(b for _, b in sorted(segment))
            order.append(f"m{n}".encode())
            segment = []
        else:
            segment.append(((1 if priority is None else -priority, n), f"m{n}".encode()))
    return order + [b for _, b in sorted(segment)]


@settings(max_examples=300, deadline=None)
@given(
    stream=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.booleans()), max_size=30),
    barriers=st.booleans(),
)
def test_priority_or_barriers_follow_the_model(
    stream: list[tuple[int | None, bool]], barriers: bool
) -> None:
    """A queue has a Priority or a BarrierExpression (they exclude each other)."""
    stream = [(None, b) if barriers else (p, False) for p, b in stream]
    ledger = Ledger(QueueRules())
    for n, (priority, barrier) in enumerate(stream):
        ledger.enqueue(msg(n, priority=priority, barrier=barrier), 0)
    assert _delivery_order(ledger) == expected_order(stream)
