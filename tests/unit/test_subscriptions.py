"""The subscription hub over a replica fed by hand: fan-out index, shared filters, slow
consumers, no gap between a query and its subscription."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.errors import SlowConsumerError, TooManySubscriptionsError
from processor.query.events import ChangeEvent, ChangeReason
from processor.query.replica import Replica
from processor.query.sow import QueryEngine
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import ChangeKind, Delivery, SubscribeRequest
from processor.subscriptions.subscription import Subscription
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


def _all(subscription: Subscription, count: int, timeout_s: float = 5.0) -> list[Delivery]:
    taken: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(taken) < count and time.monotonic() < deadline:
        taken += subscription.take(1000, 0.05)
    return taken


def _data(delivery: Delivery) -> Any:
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
    index = subscriptions._indexes["QUOTES"]
    assert len(index.groups) == 1002  # the twin shares S7's group and its compiled filter
    candidates = index.candidates([{"symbol": "S7", "price": 60, "qty": 1}])
    assert sorted(g.text for g in candidates) == sorted(
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
    subscription, phase = subscriptions.sow_and_subscribe(SubscribeRequest("QUOTES", batch_size=2))
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


class _SlowReplay(list[tuple[ChangeEvent, bool]]):
    """Buffered changes whose replay stalls before the first one (to let a concurrent
    offer run, if the subscription let it)."""

    def __init__(self) -> None:
        super().__init__()
        self.replaying = threading.Event()

    def __iter__(self) -> Iterator[tuple[ChangeEvent, bool]]:
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
