"""Live paginated subscriptions against the hub over a replica fed by hand: seed 003's
example, and the window after every change equals the sow query's page."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.errors import InvalidRequestError
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import ChangeKind, Notice, OofReason, SubscribeRequest
from processor.subscriptions.subscription import Subscription
from tests.unit.test_subscriptions import TOPOLOGY, Feed


@pytest.fixture(params=[True, False], ids=["inline", "dispatcher"])
def hub(request: pytest.FixtureRequest) -> Iterator[tuple[SubscriptionHub, Feed, QueryEngine]]:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(TOPOLOGY, replica)
    hub = SubscriptionHub(TOPOLOGY, replica, engine, inline=request.param)
    try:
        yield hub, Feed(replica), engine
    finally:
        hub.close()


def _data(envelope: bytes) -> Any:
    return orjson.loads(changelog.data_of(envelope))


def test_seed_003_example(hub: tuple[SubscriptionHub, Feed, QueryEngine]) -> None:
    subscriptions, feed, _ = hub
    pets = [(1, "Bianca", "cat"), (2, "Gracie", "cat"), (5, "Snuggles", "penguin")]
    pets += [(7, "Percival", "octopus"), (9, "SparklyFangs", "dragon")]
    for pet_id, name, species in pets:
        feed.put(f"k{pet_id}", {"id": pet_id, "name": name, "species": species})
    subscription, phase = subscriptions.sow_and_subscribe(
        SubscribeRequest("QUOTES", top_n=2, skip_n=1, order_by="/id", oof=True)
    )
    assert [orjson.loads(e.data)["id"] for b in phase.batches for e in b] == [2, 5]
    feed.put("k4", {"id": 4, "name": "Clarence", "species": "elk"})
    deliveries = _wait(subscription, 2)
    assert [(d.kind, _data(d.envelope)["id"], d.oof_reason) for d in deliveries] == [
        (ChangeKind.OOF, 5, OofReason.MATCH),
        (ChangeKind.PUBLISH, 4, None),
    ]


def _wait(subscription: Subscription, count: int) -> list[Notice]:
    taken: list[Notice] = []
    deadline = time.monotonic() + 5
    while len(taken) < count and time.monotonic() < deadline:
        taken += subscription.take(1000, 0.05)
    time.sleep(0.05)
    taken += subscription.take(1000, 0)
    return taken


ORDERS = ["", "/price", "/price DESC", "/name", "/price DESC, /name", "/name TEXT DESC"]
FILTERS = ["", "/price > 20", "/price < 70"]


def _page(engine: QueryEngine, request: SubscribeRequest) -> dict[bytes, Any]:
    result = engine.run(
        SowQuery(
            topic="QUOTES",
            filter=request.filter,
            top_n=request.top_n,
            skip_n=request.skip_n,
            order_by=request.order_by,
        )
    )
    return {e.sow_key.encode(): orjson.loads(e.data) for b in result.batches for e in b}


def test_twenty_random_windows_follow_the_sow_after_every_change() -> None:
    """Inline matching: every change is dispatched before ``put`` returns, so each
    subscriber's window is compared with the sow query's page after every change."""
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(TOPOLOGY, replica)
    hub = SubscriptionHub(TOPOLOGY, replica, engine, inline=True)
    feed = Feed(replica)
    rng = random.Random(3)
    names = ["ant", "bee", "cat", "10", "9", "dog", "100", "eel"]

    def message(key: int) -> dict[str, Any]:
        price = rng.choice([None, rng.randint(0, 100), rng.randint(0, 100)])
        return {"id": key, "price": price, "name": rng.choice(names)}

    for key in range(25):
        feed.put(f"k{key:02d}", message(key))
    subscribers = []
    try:
        for _ in range(20):
            request = SubscribeRequest(
                "QUOTES",
                filter=rng.choice(FILTERS),
                top_n=rng.randint(1, 6),
                skip_n=rng.randint(0, 8),  # 0: the first page
                order_by=rng.choice(ORDERS),
                oof=True,
            )
            subscription, phase = hub.sow_and_subscribe(request)
            view = {e.sow_key.encode(): orjson.loads(e.data) for b in phase.batches for e in b}
            assert view == _page(engine, request)
            subscribers.append((request, subscription, view))
        for step in range(400):
            key = rng.randrange(40)
            if rng.random() < 0.25:
                feed.put(f"k{key:02d}", None)
            else:
                feed.put(f"k{key:02d}", message(key))
            for request, subscription, view in subscribers:
                for delivery in subscription.take(10_000, 0):
                    if delivery.kind is ChangeKind.PUBLISH:
                        view[delivery.sow_key] = _data(delivery.envelope)
                    else:
                        assert delivery.sow_key in view, (step, delivery)
                        del view[delivery.sow_key]
                assert view == _page(engine, request), (step, request)
    finally:
        hub.close()


def test_a_delete_inside_the_window_shifts_the_next_record_in(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, _ = hub
    for i in range(1, 6):
        feed.put(f"k{i}", {"id": i})
    subscription, phase = subscriptions.sow_and_subscribe(
        SubscribeRequest("QUOTES", top_n=2, skip_n=1, order_by="/id DESC", send_deletes=True)
    )
    assert [orjson.loads(e.data)["id"] for b in phase.batches for e in b] == [4, 3]
    feed.put("k3", None)  # without oof, with send_deletes: a delete, then id 2 shifts in
    feed.put("k1", {"id": 1, "x": 1})  # below the window: nothing
    deliveries = _wait(subscription, 2)
    assert [(d.kind, _data(d.envelope)["id"]) for d in deliveries] == [
        (ChangeKind.DELETE, 3),
        (ChangeKind.PUBLISH, 2),
    ]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (SubscribeRequest("QUOTES", skip_n=2), "skip_n (2) requires top_n"),
        (SubscribeRequest("QUOTES", top_n=-1), "must not be negative"),
        (SubscribeRequest("QUO.*", top_n=2, skip_n=1), "one literal SOW topic"),
        (
            SubscribeRequest("QUOTES", top_n=2, skip_n=1, filter="UNIX_TIMESTAMP() > /t"),
            "non-deterministic",
        ),
        (SubscribeRequest("QUOTES", top_n=2, skip_n=1, order_by="/a SIDEWAYS"), "OrderBy"),
    ],
)
def test_bad_pagination_is_refused_with_the_reason(
    request_: SubscribeRequest, message: str
) -> None:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica), inline=True)
    try:
        with pytest.raises(InvalidRequestError, match=re.escape(message)):
            hub.sow_and_subscribe(request_)
        with pytest.raises(InvalidRequestError, match="need a query"):
            hub.subscribe(SubscribeRequest("QUOTES", top_n=2))
    finally:
        hub.close()
