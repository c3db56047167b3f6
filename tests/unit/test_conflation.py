"""Conflated subscriptions (spec 3.11) against the hub over a replica fed by hand."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.errors import InvalidRequestError
from processor.query.sow import QueryEngine
from processor.replica.replica import Replica
from processor.subscriptions.conflation import parse_interval
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import ChangeKind, Notice, OofReason, SubscribeRequest
from processor.subscriptions.subscription import Subscription
from tests.unit.test_subscriptions import TOPOLOGY, Feed


@pytest.fixture
def hub() -> Iterator[tuple[SubscriptionHub, Feed]]:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica))
    try:
        yield hub, Feed(replica)
    finally:
        hub.close()


def _data(delivery: Notice) -> Any:
    return orjson.loads(changelog.data_of(delivery.envelope))


def _collect(subscription: Subscription, seconds: float) -> list[tuple[float, Notice]]:
    """(time taken, delivery) for ``seconds``."""
    taken: list[tuple[float, Notice]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for delivery in subscription.take(1000, 0.01):
            taken.append((time.monotonic(), delivery))
    return taken


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("", None), ("none", None), ("250ms", 0.25), ("1s", 1.0), ("2m", 120.0), (" 1.5S ", 1.5)],
)
def test_an_interval_is_parsed(text: str, seconds: float | None) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["1", "0ms", "fast", "1h", "-1s", "2 hours", "auto"])
def test_a_bad_interval_is_refused_with_the_forms_accepted(text: str) -> None:
    with pytest.raises(InvalidRequestError, match="use <n>ms, <n>s or <n>m"):
        parse_interval(text)


def test_only_the_latest_value_per_key_is_delivered_after_the_interval(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    subscription = subscriptions.subscribe(SubscribeRequest("QUOTES", conflation="300ms"))
    started = time.monotonic()
    for price in [150.34, 149.76, 149.32, 151.10]:
        feed.put("IBM", {"id": "IBM", "price": price})
    feed.put("MSFT", {"id": "MSFT", "price": 1})
    assert subscription.take(10, 0.15) == []  # held for the interval
    taken = _collect(subscription, 0.6)
    assert sorted((_data(d)["id"], _data(d)["price"]) for _, d in taken) == [
        ("IBM", 151.10),
        ("MSFT", 1),
    ]
    assert all(at - started >= 0.29 for at, _ in taken)


def test_a_conflated_delta_is_taken_against_what_the_subscriber_has(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    feed.put("IBM", {"id": "IBM", "price": 1, "qty": 1})
    subscription = subscriptions.subscribe(
        SubscribeRequest("QUOTES", conflation="200ms", delta=True, oof=True)
    )
    feed.put("IBM", {"id": "IBM", "price": 1, "qty": 1})  # now held by the subscriber
    assert len(_collect(subscription, 0.4)) == 1
    feed.put("IBM", {"id": "IBM", "price": 2, "qty": 1})
    feed.put("IBM", {"id": "IBM", "price": 2, "qty": 5})  # replaces the held publish
    taken = [d for _, d in _collect(subscription, 0.5)]
    assert len(taken) == 1
    assert taken[0].previous is not None
    # Against the state delivered before the interval, so the price change is not lost.
    assert _data(taken[0]) == {"id": "IBM", "price": 2, "qty": 5}
    previous = orjson.loads(changelog.data_of(taken[0].previous))
    assert previous == {"id": "IBM", "price": 1, "qty": 1}


def test_an_update_held_then_leaving_the_filter_gives_one_oof_with_the_state_delivered(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    feed.put("k1", {"id": 1, "price": 60})
    subscription, _ = subscriptions.sow_and_subscribe(
        SubscribeRequest("QUOTES", filter="/price > 50", oof=True, conflation="200ms")
    )
    feed.put("k1", {"id": 1, "price": 70})
    feed.put("k1", {"id": 1, "price": 80})
    feed.put("k1", {"id": 1, "price": 10})  # leaves the focus within the interval
    taken = _collect(subscription, 0.6)
    assert [(d.kind, d.oof_reason, _data(d)["price"]) for _, d in taken] == [
        (ChangeKind.OOF, OofReason.MATCH, 60)  # what the subscriber last received
    ]


def test_a_record_leaving_and_coming_back_in_one_interval_gives_its_end_state_alone(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    feed.put("k1", {"id": 1, "price": 60})
    subscription, _ = subscriptions.sow_and_subscribe(
        SubscribeRequest("QUOTES", filter="/price > 50", oof=True, conflation="200ms")
    )
    feed.put("k1", {"id": 1, "price": 10})  # out
    feed.put("k1", {"id": 1, "price": 90})  # back in, same interval
    feed.put("k2", {"id": 2, "price": 95})  # new in the interval...
    feed.put("k2", None)  # ...and gone again: the subscriber never had it
    taken = _collect(subscription, 0.6)
    assert [(d.kind, _data(d)["price"]) for _, d in taken] == [(ChangeKind.PUBLISH, 90)]


def test_a_fast_stream_gives_at_most_one_update_per_key_per_interval_each_the_latest(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    interval = 0.2
    subscription = subscriptions.subscribe(SubscribeRequest("QUOTES", conflation="200ms"))
    latest: dict[str, int] = {}
    taken: list[tuple[float, Notice]] = []
    reader = threading.Thread(
        target=lambda: taken.extend(_collect(subscription, 1.5 + 2 * interval + 0.3))
    )
    reader.start()
    began = time.monotonic()
    sequence = 0
    while time.monotonic() - began < 1.5:
        for _ in range(50):
            sequence += 1
            key = f"k{sequence % 20}"
            feed.put(key, {"id": key, "n": sequence})
            latest[key] = sequence
        time.sleep(0.005)
    reader.join()
    by_key: dict[str, list[tuple[float, int]]] = {}
    for at, delivery in taken:
        by_key.setdefault(delivery.sow_key.decode(), []).append((at, _data(delivery)["n"]))
    assert sequence > 1000
    assert set(by_key) == set(latest)
    for key, seen in by_key.items():
        assert seen[-1][1] == latest[key]  # the last delivered is the last published
        numbers = [n for _, n in seen]
        assert numbers == sorted(numbers)
        # At most one per interval (the dispatcher and this reader add jitter, never less).
        assert len(seen) <= (seen[-1][0] - seen[0][0]) / interval + 1.5, (key, seen)


def test_a_conflation_key_conflates_records_that_share_its_fields(
    hub: tuple[SubscriptionHub, Feed],
) -> None:
    subscriptions, feed = hub
    subscription = subscriptions.subscribe(
        SubscribeRequest("QUOTES", conflation="200ms", conflation_key="[/symbol]")
    )
    feed.put("a", {"id": "a", "symbol": "IBM", "n": 1})
    feed.put("b", {"id": "b", "symbol": "IBM", "n": 2})
    feed.put("c", {"id": "c", "symbol": "MSFT", "n": 3})
    taken = _collect(subscription, 0.5)
    assert sorted(_data(d)["n"] for _, d in taken) == [2, 3]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (SubscribeRequest("QUOTES", conflation="soon"), "is not an interval"),
        (SubscribeRequest("QUOTES", conflation_key="[/a]"), "needs a conflation interval"),
        (
            SubscribeRequest("QUOTES", conflation="1s", conflation_key="[/a]", oof=True),
            "cannot be combined with oof",
        ),
        (
            SubscribeRequest("QUOTES", conflation="1s", conflation_key="[/a"),
            "is not a list of fields",
        ),
    ],
)
def test_bad_conflation_options_are_refused(
    hub: tuple[SubscriptionHub, Feed], request_: SubscribeRequest, message: str
) -> None:
    subscriptions, _ = hub
    with pytest.raises(InvalidRequestError, match=message):
        subscriptions.subscribe(request_)
