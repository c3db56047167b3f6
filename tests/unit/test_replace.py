"""Replacing a subscription in place (spec 3.12) against the hub over a replica fed by
hand, with the dispatcher thread (the replace's marker travels with the changes)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
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


@pytest.fixture
def hub() -> Iterator[tuple[SubscriptionHub, Feed, QueryEngine]]:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(TOPOLOGY, replica)
    hub = SubscriptionHub(TOPOLOGY, replica, engine)
    try:
        yield hub, Feed(replica), engine
    finally:
        hub.close()


def _settle(subscription: Subscription, quiet_s: float = 0.3) -> list[Notice]:
    """Notices until none came for ``quiet_s`` (the dispatcher, in process, hands a change
    over within a millisecond)."""
    taken: list[Notice] = []
    while True:
        more = subscription.take(10_000, quiet_s)
        if not more:
            return taken
        taken += more


def _quiesce(hub: SubscriptionHub) -> None:
    """Wait until the dispatcher has handled every unit handed to it."""
    seen = -1
    while hub.queued() or hub.dispatched != seen:
        seen = hub.dispatched
        time.sleep(0.2)


def _summary(deliveries: list[Notice]) -> list[tuple[str, int, str | None]]:
    return [
        (
            d.kind.value,
            orjson.loads(changelog.data_of(d.envelope))["id"],
            None if d.oof_reason is None else d.oof_reason.value,
        )
        for d in deliveries
    ]


def test_sow_and_subscribe_replace_sends_new_records_and_oofs_the_ones_that_left(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, _ = hub
    for key, price in [(1, 60), (2, 40), (3, 70)]:
        feed.put(f"k{key}", {"id": key, "price": price})
    request = SubscribeRequest("QUOTES", filter="/price > 50", oof=True, sub_id="a")
    subscription, phase = subscriptions.sow_and_subscribe(request)
    assert phase.stats.records_returned == 2
    subscriptions.replace(
        subscription, replace(request, filter="/price < 65", replace=True), with_query=True
    )
    assert _summary(_settle(subscription)) == [
        ("oof", 3, OofReason.MATCH.value),
        ("publish", 2, None),
    ]
    feed.put("k4", {"id": 4, "price": 10})
    feed.put("k3", {"id": 3, "price": 71})  # matched only the old filter: nothing
    feed.put("k1", {"id": 1, "price": 90})
    feed.put("k2", None)
    assert _summary(_settle(subscription)) == [
        ("publish", 4, None),
        ("oof", 1, "match"),
        ("oof", 2, "deleted"),
    ]


def test_oof_added_by_a_replace_applies_to_later_changes_only(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, _ = hub
    for key, price in [(1, 60), (2, 70)]:
        feed.put(f"k{key}", {"id": key, "price": price})
    request = SubscribeRequest("QUOTES", filter="/price > 50", sub_id="a")
    subscription, _ = subscriptions.sow_and_subscribe(request)
    subscriptions.replace(
        subscription,
        replace(request, filter="/price > 65", oof=True, replace=True),
        with_query=True,
    )
    feed.put("k2", {"id": 2, "price": 10})
    assert _summary(_settle(subscription)) == [("oof", 2, "match")]  # none for id 1


def test_a_replace_under_a_stream_of_changes_has_no_gap_and_no_duplicate(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, engine = hub
    for key in range(50):
        feed.put(f"k{key}", {"id": key, "price": key, "v": 0})
    request = SubscribeRequest(
        "QUOTES", filter="/price < 25", oof=True, sub_id="a", max_backlog=1_000_000
    )
    subscription, phase = subscriptions.sow_and_subscribe(request)
    view: dict[bytes, Any] = {
        e.sow_key.encode(): orjson.loads(e.data) for b in phase.batches for e in b
    }
    stop = threading.Event()

    def publish() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            key = version % 50
            feed.put(f"k{key}", {"id": key, "price": (key + version) % 50, "v": version})

    writer = threading.Thread(target=publish)
    writer.start()
    try:
        for turn in range(40):  # many replaces: some meet a change applied but not dispatched
            text = "/price >= 20" if turn % 2 == 0 else "/price < 30"
            subscriptions.replace(
                subscription, replace(request, filter=text, replace=True), with_query=True
            )
            time.sleep(0.002)
    finally:
        stop.set()
        writer.join()
    _quiesce(subscriptions)
    last: dict[bytes, bytes] = {}
    for delivery in _settle(subscription):
        if delivery.kind is ChangeKind.PUBLISH:
            assert last.get(delivery.sow_key) != delivery.envelope, "a duplicate publish"
            last[delivery.sow_key] = delivery.envelope
            view[delivery.sow_key] = orjson.loads(changelog.data_of(delivery.envelope))
        else:
            assert delivery.sow_key in view
            del view[delivery.sow_key]
            last.pop(delivery.sow_key, None)
    result = engine.run(SowQuery(topic="QUOTES", filter="/price < 30"))
    assert view == {e.sow_key.encode(): orjson.loads(e.data) for b in result.batches for e in b}


def test_a_change_applied_while_a_replace_refiles_the_subscription_is_delivered(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    """The window the stream test above hits only now and then, held open: the hub's
    thread has taken the only subscription out of its filter groups (a replace) when a
    change is applied. The replica's listener must still queue the change, or nothing
    delivers it (a gap: the subscriber kept a stale record for good)."""
    subscriptions, feed, _ = hub
    request = SubscribeRequest("QUOTES", filter="/price < 25", sub_id="a")
    subscription, _ = subscriptions.sow_and_subscribe(request)
    dispatcher = subscriptions._dispatcher
    plan = subscriptions.plan(
        SubscribeRequest("QUOTES", filter="/price < 30", sub_id="a"), with_query=True
    )
    with dispatcher.lock:  # no dispatch until the subscription is filed again
        dispatcher.unfile(subscription)
        feed.put("k1", {"id": 1, "price": 10})
        dispatcher.file(subscription, plan)
    assert _summary(_settle(subscription)) == [("publish", 1, None)]


def test_a_paginated_replace_moves_the_window(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, _ = hub
    for key in range(1, 8):
        feed.put(f"k{key}", {"id": key})
    request = SubscribeRequest("QUOTES", top_n=2, skip_n=1, order_by="/id", oof=True)
    subscription, _ = subscriptions.sow_and_subscribe(request)  # ids 2, 3
    subscriptions.replace(  # ids 3, 4
        subscription, replace(request, skip_n=2, replace=True), with_query=True
    )
    assert _summary(_settle(subscription)) == [("oof", 2, "match"), ("publish", 4, None)]
    feed.put("k1", None)  # shifts 5 in, 3 out
    assert _summary(_settle(subscription)) == [("oof", 3, "match"), ("publish", 5, None)]


def test_a_subscribe_replace_changes_the_filter_from_the_next_change(
    hub: tuple[SubscriptionHub, Feed, QueryEngine],
) -> None:
    subscriptions, feed, _ = hub
    request = SubscribeRequest("QUOTES", filter="/id = 1", sub_id="a")
    subscription = subscriptions.subscribe(request)
    feed.put("k1", {"id": 1})
    feed.put("k2", {"id": 2})
    assert _summary(_settle(subscription)) == [("publish", 1, None)]
    subscriptions.replace(
        subscription, replace(request, filter="/id = 2", replace=True), with_query=False
    )
    feed.put("k1", {"id": 1})
    feed.put("k2", {"id": 2})
    assert _summary(_settle(subscription)) == [("publish", 2, None)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"skip_n": None}, "restate skip_n"),
        ({"order_by": ""}, "restate order_by"),
        ({"topic": "OTHER"}, "cannot change the topic"),
        ({"conflation": "1s"}, "cannot change conflation"),
    ],
)
def test_a_replace_that_changes_what_may_not_change_is_refused(
    hub: tuple[SubscriptionHub, Feed, QueryEngine], change: dict[str, Any], message: str
) -> None:
    subscriptions, feed, _ = hub
    feed.put("k1", {"id": 1})
    request = SubscribeRequest("QUOTES", top_n=2, skip_n=1, order_by="/id", sub_id="a")
    subscription, _ = subscriptions.sow_and_subscribe(request)
    with pytest.raises(InvalidRequestError, match=message):
        subscriptions.replace(
            subscription, replace(request, replace=True, **change), with_query=True
        )
    plain = subscriptions.subscribe(SubscribeRequest("QUOTES", sub_id="b"))
    with pytest.raises(InvalidRequestError, match="replace it with subscribe"):
        subscriptions.replace(
            plain, SubscribeRequest("QUOTES", sub_id="b", replace=True), with_query=True
        )
    with pytest.raises(InvalidRequestError, match="session command"):
        subscriptions.subscribe(SubscribeRequest("QUOTES", replace=True))


@pytest.mark.parametrize(
    ("options", "refused"),
    [({"delta": True}, "delta"), ({"top_n": 2, "skip_n": 0}, "skip_n (a paginated window)")],
)
def test_a_replaying_subscription_refuses_what_a_replay_cannot_keep(
    options: dict[str, Any], refused: str
) -> None:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica))
    try:
        with pytest.raises(InvalidRequestError, match=f"cannot take {re.escape(refused)}"):
            hub.subscribe_replaying(SubscribeRequest("QUOTES", bookmark="0", **options))
    finally:
        hub.close()
