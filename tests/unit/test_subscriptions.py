"""The subscription hub over a replica fed by hand: fan-out index, shared filters, slow
consumers, no gap between a query and its subscription."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.changelog.events import ChangeEvent, ChangeReason
from processor.errors import SlowConsumerError, TooManySubscriptionsError
from processor.expr import compile as compile_expression
from processor.query.sow import QueryEngine
from processor.replica.replica import Replica
from processor.subscriptions.fanout import TopicIndex
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import ChangeKind, Notice, SubscribeRequest
from processor.subscriptions.subscription import Offer, Subscription
from processor.topology.model import SowTopic, Topology
from tests.unit.log_records import LogRecord

QUOTES = SowTopic("QUOTES", keys=("/id",))
TOPOLOGY = Topology({"QUOTES": QUOTES})


class Feed:
    """Changelog records for QUOTES (one partition)."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.offset = 0
        self.writer = changelog.EnvelopeWriter("QUOTES", "json", QUOTES.kafka_topic, 0)

    def put(self, key: str, message: dict[str, Any] | None) -> None:
        raw = key.encode()
        value = None
        if message is not None:
            value = self.writer.encode(self.offset, raw, orjson.dumps(message), 1, 1)
        self.replica.apply([LogRecord(QUOTES.changelog_topic, 0, self.offset, raw, value)])
        self.offset += 1


@pytest.fixture(params=[True, False], ids=["inline", "dispatcher"])
def hub(request: pytest.FixtureRequest) -> Iterator[tuple[SubscriptionHub, Feed]]:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica), inline=request.param)
    try:
        yield hub, Feed(replica)
    finally:
        hub.close()


def _all(subscription: Subscription, count: int, timeout_s: float = 5.0) -> list[Notice]:
    taken: list[Notice] = []
    deadline = time.monotonic() + timeout_s
    while len(taken) < count and time.monotonic() < deadline:
        taken += subscription.take(1000, 0.05)
    return taken


def _data(delivery: Notice) -> Any:
    return orjson.loads(changelog.data_of(delivery.envelope))


def test_a_change_is_checked_only_against_candidate_filters(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    by_symbol = {
        i: subscriptions.subscribe(
            SubscribeRequest("QUOTES", filter=f"/symbol = 'S{i}' AND /price > 50")
        )
        for i in range(1000)
    }
    twin = subscriptions.subscribe(
        SubscribeRequest("QUOTES", filter="/symbol = 'S7' AND /price > 50")
    )
    listed = subscriptions.subscribe(SubscribeRequest("QUOTES", filter="/symbol IN ('S7', 'S8')"))
    scan = subscriptions.subscribe(SubscribeRequest("QUOTES", filter="/price * /qty > 1000"))
    index = subscriptions._dispatcher._indexes["QUOTES"]
    assert len(index.groups) == 1002  # the twin shares S7's group and its compiled filter
    assert list(index.families) == [("/price * /qty", ">")]
    matched, unmatched = index.route(
        {"symbol": "S7", "price": 60, "qty": 100}, None, lambda: None, True
    )
    assert unmatched == []  # no subscription here remembers what it holds
    assert sorted(g.text for g in matched) == sorted(
        ["/symbol = 'S7' AND /price > 50", "/symbol IN ('S7', 'S8')", "/price * /qty > 1000"]
    )
    feed.put("a", {"symbol": "S7", "price": 60, "qty": 100})
    feed.put("b", {"symbol": "S8", "price": 10, "qty": 1})
    for subscription in (by_symbol[7], twin):
        assert [_data(d)["symbol"] for d in _all(subscription, 1)] == ["S7"]
    assert [_data(d)["symbol"] for d in _all(listed, 2)] == ["S7", "S8"]
    assert [_data(d)["symbol"] for d in _all(scan, 1)] == ["S7"]
    assert by_symbol[8].take(10, 0.05) == []
    for subscription in [*by_symbol.values(), twin, listed, scan]:
        subscriptions.unsubscribe(subscription)
    assert not index.groups
    assert not index.by_field
    assert not index.unindexed
    assert not index.families


def test_an_update_leaving_an_indexed_filter_reaches_its_holder(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    watcher = subscriptions.subscribe(SubscribeRequest("QUOTES", filter="/symbol = 'A'", oof=True))
    feed.put("k", {"symbol": "A"})
    feed.put("k", {"symbol": "B"})  # the new value is not filed under A: the old one is
    kinds = [(d.kind, d.oof_reason and d.oof_reason.value) for d in _all(watcher, 2)]
    assert kinds == [(ChangeKind.PUBLISH, None), (ChangeKind.OOF, "match")]


def test_sow_and_subscribe_starts_exactly_after_its_query(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    for i in range(5):
        feed.put(f"k{i}", {"n": i})
    subscription, phase = subscriptions.sow_and_subscribe(
        SubscribeRequest("QUOTES", batch_size=2, send_deletes=True)
    )
    assert [len(b) for b in phase.batches] == [2, 2, 1]
    assert phase.snapshot == [(QUOTES.changelog_topic, 0, 5)]
    feed.put("k0", {"n": 10})
    feed.put("k1", None)
    deliveries = _all(subscription, 2)
    assert [(d.kind, d.position[2]) for d in deliveries] == [
        (ChangeKind.PUBLISH, 5),
        (ChangeKind.DELETE, 6),
    ]
    assert _data(deliveries[1]) == {"n": 1}  # the state the subscriber held


def test_a_slow_consumer_is_closed_and_others_go_on(hub: tuple[SubscriptionHub, Feed]) -> None:
    subscriptions, feed = hub
    slow = subscriptions.subscribe(SubscribeRequest("QUOTES", max_backlog=3))
    other = subscriptions.subscribe(SubscribeRequest("QUOTES"))
    for i in range(6):
        feed.put(f"k{i}", {"n": i})
    assert len(_all(other, 6)) == 6
    with pytest.raises(SlowConsumerError, match="slow consumer: 4 messages behind"):
        _all(slow, 6)
    deadline = time.monotonic() + 5
    while len(subscriptions) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(subscriptions) == 1  # the closed one no longer costs the dispatcher anything


def test_the_subscription_limit_is_enforced() -> None:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica), max_subscriptions=2)
    try:
        hub.subscribe(SubscribeRequest("QUOTES"))
        hub.subscribe(SubscribeRequest("QUOTES"))
        with pytest.raises(TooManySubscriptionsError, match="another query-service replica"):
            hub.subscribe(SubscribeRequest("QUOTES"))
    finally:
        hub.close()


class _SlowReplay(list[Offer]):
    """Buffered changes whose replay stalls before the first one (to let a concurrent
    offer run, if the subscription let it)."""

    def __init__(self) -> None:
        super().__init__()
        self.replaying = threading.Event()

    def __iter__(self) -> Iterator[Offer]:
        self.replaying.set()
        time.sleep(0.2)
        return super().__iter__()


def test_changes_offered_while_a_subscription_starts_keep_changelog_order() -> None:
    """A change the dispatcher offers while ``start`` replays the buffered ones waits
    for them: the subscriber gets every change in changelog order."""
    writer = changelog.EnvelopeWriter("QUOTES", "json", QUOTES.kafka_topic, 0)

    def event(offset: int, price: int) -> ChangeEvent:
        new = writer.encode(offset, b"k", orjson.dumps({"id": "k", "price": price}), 1, 1)
        return ChangeEvent(
            "QUOTES", b"k", None, new, (QUOTES.changelog_topic, 0, offset), ChangeReason.PUBLISH
        )

    subscription = Subscription(
        SubscribeRequest("QUOTES", oof=True), with_query=True, max_backlog=100
    )
    early = subscription._early = _SlowReplay()
    subscription.offer(event(5, 60), True)
    starter = threading.Thread(target=subscription.start, args=({(QUOTES.changelog_topic, 0): 5},))
    starter.start()
    assert early.replaying.wait(5)
    subscription.offer(event(6, 40), True)
    starter.join(5)
    taken = _all(subscription, 2)
    assert [d.position[2] for d in taken] == [5, 6]
    assert _data(taken[-1])["price"] == 40


@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
def test_a_range_family_matches_exactly_what_each_filter_matches(op: str) -> None:
    """Thresholds sharing one operand are found by bisection; every value, plain numbers
    and the ones that fall back to the filters themselves, gets the same answer as
    evaluating each filter."""
    index = TopicIndex()
    rng = random.Random(7)
    thresholds = [rng.choice([rng.randrange(-50, 50), rng.uniform(-50, 50)]) for _ in range(60)]
    thresholds += [0, 0, 10, 10.0]
    texts = {f"/price * /qty {op} {t!r}" for t in thresholds}
    for text in texts:
        index.group(text, functools.partial(compile_expression, text))
    assert len(index.families) == 1
    assert not index.unindexed
    values: list[Any] = [rng.uniform(-60, 60) for _ in range(50)]
    values += [0, 10, -7, 2**70, float("inf"), float("nan"), None, "12", True, [1]]
    for value in values:
        message = {"price": value, "qty": 1}
        matched, _ = index.route(message, None, lambda: None, True)
        expected = {t for t in texts if compile_expression(t).matches(message)}
        assert {g.text for g in matched} == expected, (value, op)


def _apply_deliveries(state: dict[bytes, bytes], deliveries: list[Notice]) -> None:
    """A subscriber's copy of the records it holds, after these deliveries."""
    for delivery in deliveries:
        if delivery.kind is ChangeKind.PUBLISH:
            state[delivery.sow_key] = changelog.data_of(delivery.envelope)
        else:
            assert delivery.sow_key in state
            del state[delivery.sow_key]


@pytest.mark.parametrize("filter_text", ["/price > 50", "/group = 4 AND /price < 30", ""])
def test_sow_and_subscribe_state_follows_the_table_under_concurrent_units(
    filter_text: str,
) -> None:
    """Units of many changes (a key may change several times in one unit, and be
    deleted) are applied on one thread while two sow_and_subscribe subscriptions with
    OOF start on another: each one's query result plus its deliveries ends equal to the
    table, filtered."""
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica))
    feed = Feed(replica)
    rng = random.Random(4)
    for key in range(200):
        feed.put(f"k{key}", {"id": key, "group": key % 5, "price": rng.randint(0, 100)})
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            records = []
            for _ in range(rng.randrange(1, 50)):
                key = rng.randrange(200)
                raw = f"k{key}".encode()
                message = {"id": key, "group": key % 5, "price": rng.randint(0, 100)}
                value = None
                if rng.random() > 0.1:
                    value = feed.writer.encode(feed.offset, raw, orjson.dumps(message), 1, 1)
                records.append(LogRecord(QUOTES.changelog_topic, 0, feed.offset, raw, value))
                feed.offset += 1
            replica.apply(records)

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        started = []
        for _ in range(2):
            time.sleep(0.1)
            request = SubscribeRequest("QUOTES", filter=filter_text, oof=True, max_backlog=10**6)
            started.append(hub.sow_and_subscribe(request))
        time.sleep(0.3)
    finally:
        stop.set()
        publisher.join()
    try:
        expression = compile_expression(filter_text) if filter_text else None
        expected: dict[bytes, bytes] = {}
        for sow_key, envelope in replica._tables["QUOTES"].envelopes.items():
            data = changelog.data_of(envelope)
            if expression is None or expression.matches(orjson.loads(data)):
                expected[sow_key] = data
        for subscription, phase in started:
            state = {e.sow_key.encode(): e.data for batch in phase.batches for e in batch}

            # The dispatcher may still be working through the last units (a loaded
            # machine): drain until the state settles, then once more for anything extra.
            deadline = time.monotonic() + 20
            while state != expected and time.monotonic() < deadline:
                _apply_deliveries(state, subscription.take(100_000, 0.05))
            _apply_deliveries(state, subscription.take(100_000, 0.2))
            assert state == expected
    finally:
        hub.close()


def test_a_plain_topics_messages_are_never_held_by_a_mixed_subscription() -> None:
    """A subscription covering a SOW topic and a plain topic, with oof and no_empties:
    the plain topic's messages are delivered when they match and nothing follows from
    them; the SOW topic's records still get OOF."""
    writer = changelog.EnvelopeWriter("QUOTES", "json", QUOTES.kafka_topic, 0)

    def event(topic: str, offset: int, price: int) -> ChangeEvent:
        new = writer.encode(offset, b"k", orjson.dumps({"price": price}), 1, 1)
        return ChangeEvent(
            topic, b"k", None, new, (f"{topic}.log", 0, offset), ChangeReason.PUBLISH
        )

    subscription = Subscription(
        SubscribeRequest("QUOTES|TICKS", oof=True, no_empties=True),
        with_query=True,
        max_backlog=100,
        unheld_topics=frozenset({"TICKS"}),
    )
    subscription.start({})
    assert not subscription.may_hold(("TICKS", b"k"))
    subscription.offer(event("TICKS", 0, 60), True)
    subscription.offer(event("TICKS", 1, 60), True)  # a repeat: still delivered
    subscription.offer(event("TICKS", 2, 10), False)  # no longer matches: nothing
    subscription.offer(event("QUOTES", 0, 60), True)
    subscription.offer(event("QUOTES", 1, 10), False)
    kinds = [(d.topic, d.kind) for d in _all(subscription, 4)]
    assert kinds == [
        ("TICKS", ChangeKind.PUBLISH),
        ("TICKS", ChangeKind.PUBLISH),
        ("QUOTES", ChangeKind.PUBLISH),
        ("QUOTES", ChangeKind.OOF),
    ]
    assert subscription.focus == {}
