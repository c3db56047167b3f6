"""Sessions: many subscriptions on one gRPC stream, against the real broker."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector, data

QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)


def _by_sub(collector: Collector) -> dict[str, list[Any]]:
    parts: dict[str, list[Any]] = defaultdict(list)
    for message in collector.messages:
        parts[message.sub_id].append(message)
    return parts


def _quote(key: int, symbol: str, price: int) -> bytes:
    return orjson.dumps({"id": key, "symbol": symbol, "price": price})


def test_one_session_carries_many_subscriptions_each_with_its_own_changes(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        first = client.publish("QUOTES", _quote(0, "S0", 50))
        client.query("QUOTES", min_position=[first.position])
        session = client.session()
        collector = Collector(session)
        for i in range(200):
            session.subscribe("QUOTES", f"s{i}", filter=f"/symbol = 'S{i}' AND /price > 10")
        session.sow_and_subscribe("QUOTES", "all", filter="/price > 10", oof=True)
        assert collector.wait_for(
            lambda c: (
                len([m for m in c.messages if m.WhichOneof("part") == "registered"]) == 200
                and c.group_end() is not None
            ),
            60,
        )
        assert app.subscriptions is not None
        assert len(app.subscriptions) == 201
        published = [client.publish("QUOTES", _quote(i, f"S{i}", 5 + i)) for i in range(200)]
        client.query("QUOTES", min_position=[p.position for p in published[-2:]])
        # S0..S5 have price <= 10: filtered out; the rest reach their one subscription.
        assert collector.wait_for(lambda c: len(c.changes()) >= 194 + 195, 60)
        by_sub = _by_sub(collector)
        for i in range(200):
            changes = [m.change for m in by_sub[f"s{i}"] if m.WhichOneof("part") == "change"]
            if 5 + i > 10:
                assert [data(c.record)["symbol"] for c in changes] == [f"S{i}"]
            else:
                assert changes == []
        everything = by_sub["all"]
        parts = [m.WhichOneof("part") for m in everything]
        assert parts[:3] == ["group_begin", "batch", "group_end"]
        kinds = [m.change.kind for m in everything[3:]]
        # key 0 was in the query result at price 50; its update to 5 is an OOF.
        assert kinds.count(sow_pb2.CHANGE_OOF) == 1
        assert kinds.count(sow_pb2.CHANGE_PUBLISH) == 194
        session.cancel()
        assert collector.done.wait(10)
        assert collector.error is None


def test_a_session_subscription_ends_alone_when_refused_or_unsubscribed(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        session = client.session()
        collector = Collector(session)
        session.subscribe("QUOTES", "good", filter="/price > 1")
        session.subscribe("QUOTES", "bad", filter="/price > > 1")
        session.subscribe("QUOTES", "good", filter="/price > 2")
        session.subscribe("NOPE", "missing")
        session.unsubscribe("never")

        def ended(c: Collector) -> dict[str, Any]:
            return {m.sub_id: m.ended for m in c.messages if m.WhichOneof("part") == "ended"}

        assert collector.wait_for(lambda c: len(ended(c)) == 4, 30)
        notices = ended(collector)
        assert notices["bad"].code == "INVALID_ARGUMENT"
        assert "good" not in notices or "already in use" in notices["good"].details
        assert notices["missing"].code in ("NOT_FOUND", "INVALID_ARGUMENT")
        assert "NOPE" in notices["missing"].details
        assert notices["never"].code == "NOT_FOUND"
        client.publish("QUOTES", _quote(1, "A", 5))
        assert collector.wait_for(lambda c: len(c.changes()) == 1, 30)
        session.unsubscribe("good")
        assert collector.wait_for(
            lambda c: any(
                m.WhichOneof("part") == "ended" and m.ended.code == "CANCELLED" for m in c.messages
            ),
            30,
        )
        assert app.subscriptions is not None
        assert len(app.subscriptions) == 0
        last = client.publish("QUOTES", _quote(2, "A", 5))
        client.query("QUOTES", min_position=[last.position])
        assert len(collector.changes()) == 1  # nothing after the unsubscribe
        session.cancel()
        assert collector.done.wait(10)
        assert collector.error is None
