"""Live paginated sow_and_subscribe over the real broker and gRPC (spec 3.7, seed 003)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import ServiceError, SowClient
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, read_topic, running_sow
from tests.integration.subscription_helpers import Collector, data

PETS = SowTopic("PETS", keys=("/id",))
QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)


def _window(collector: Collector) -> dict[str, Any]:
    """What the subscriber sees: the query result, then publishes add and OOFs or
    deletes remove."""
    view = {r.sow_key: data(r) for r in collector.query_records()}
    for change in collector.changes():
        if change.kind == sow_pb2.CHANGE_PUBLISH:
            view[change.sow_key] = data(change.record)
        else:
            view.pop(change.sow_key, None)
    return view


def test_seed_003_publishing_into_the_window_pushes_the_last_record_out(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, PETS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        pets = [(1, "Bianca", "cat"), (2, "Gracie", "cat"), (5, "Snuggles", "penguin")]
        pets += [(7, "Percival", "octopus"), (9, "SparklyFangs", "dragon")]
        last = None
        for pet_id, name, species in pets:
            message = {"id": pet_id, "name": name, "species": species}
            last = client.publish("PETS", orjson.dumps(message))
        assert last is not None
        client.query("PETS", min_position=[last.position])
        stream = client.sow_and_subscribe(
            "PETS", top_n=2, skip_n=1, order_by="/id", oof=True, sub_id="page"
        )
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None)
        assert [data(r)["id"] for r in collector.query_records()] == [2, 5]
        client.publish("PETS", orjson.dumps({"id": 4, "name": "Clarence", "species": "elk"}))
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        changes = collector.changes()
        assert [(c.kind, data(c.record)["id"], c.oof_reason) for c in changes] == [
            (sow_pb2.CHANGE_OOF, 5, "match"),
            (sow_pb2.CHANGE_PUBLISH, 4, ""),
        ]
        collector.stop()


def test_the_first_page_is_live_and_top_n_alone_only_limits_the_query(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, PETS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        last = None
        for pet_id in (1, 2, 5):
            last = client.publish("PETS", orjson.dumps({"id": pet_id}))
        assert last is not None
        client.query("PETS", min_position=[last.position])
        first_page = Collector(
            client.sow_and_subscribe("PETS", top_n=2, skip_n=0, order_by="/id", oof=True)
        )
        limited = Collector(client.sow_and_subscribe("PETS", top_n=2, order_by="/id", oof=True))
        for collector in (first_page, limited):
            assert collector.wait_for(lambda c: c.group_end() is not None)
            assert [data(r)["id"] for r in collector.query_records()] == [1, 2]
        client.publish("PETS", orjson.dumps({"id": 0}))
        assert first_page.wait_for(lambda c: len(c.changes()) >= 2)
        assert [(c.kind, data(c.record)["id"]) for c in first_page.changes()] == [
            (sow_pb2.CHANGE_OOF, 2),
            (sow_pb2.CHANGE_PUBLISH, 0),
        ]
        # Without skip_n the subscription is an ordinary one after its limited query.
        assert limited.wait_for(lambda c: len(c.changes()) >= 1)
        assert [(c.kind, data(c.record)["id"]) for c in limited.changes()] == [
            (sow_pb2.CHANGE_PUBLISH, 0)
        ]
        first_page.stop()
        limited.stop()


def _page(client: SowClient, options: dict[str, Any]) -> dict[str, Any]:
    records, _, _ = client.query(
        "QUOTES",
        filter=options["filter"],
        top_n=options["top_n"],
        skip_n=options["skip_n"],
        order_by=options["order_by"],
    )
    return {r.sow_key: data(r) for r in records}


def test_twenty_random_paginated_subscribers_follow_the_sow(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """Windows compared with the sow query's page at quiescent points (the unit test
    tests/unit/test_window.py checks the same property after every change)."""
    rng = random.Random(10)
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):

        def quote(key: int) -> bytes:
            price = rng.choice([None, rng.randint(0, 50)])
            return orjson.dumps({"id": key, "price": price, "name": rng.choice("abcdef")})

        published = [client.publish("QUOTES", quote(key)) for key in range(20)]
        client.query("QUOTES", min_position=[p.position for p in published])
        subscribers = []
        for number in range(20):
            options = {
                "filter": rng.choice(["", "/price > 10", "/price < 40"]),
                "top_n": rng.randint(1, 5),
                "skip_n": rng.randint(0, 6),  # 0: the first page
                "order_by": rng.choice(["", "/price", "/price DESC", "/name, /price DESC"]),
            }
            stream = client.sow_and_subscribe("QUOTES", oof=True, sub_id=f"p{number}", **options)
            subscribers.append((options, Collector(stream)))
        for _, collector in subscribers:
            assert collector.wait_for(lambda c: c.group_end() is not None)
        for _round in range(5):
            positions = []
            for _ in range(30):
                key = rng.randrange(30)
                if rng.random() < 0.25:
                    client.delete("QUOTES", filter=f"/id = {key}")
                else:
                    positions.append(client.publish("QUOTES", quote(key)).position)
            client.query("QUOTES", min_position=positions[-2:])
            for options, collector in subscribers:
                # The page is read again each time: deletes by filter carry no position.
                assert collector.wait_for(
                    lambda c, options=options: _window(c) == _page(client, options), 10
                ), (options, _window(collector), _page(client, options))
        for _, collector in subscribers:
            assert collector.error is None
            collector.stop()


def test_each_window_after_every_delivery_is_the_page_of_the_sow_at_that_change(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """20 random paginated subscribers under random publishes and deletes, over gRPC.
    The topic has one partition, so the changelog orders every change: after each
    delivered change (the deliveries sharing its changelog position), the subscriber's
    window must be the page the sow query gives over the changelog up to that change,
    replayed one change at a time into a replica of the test's own."""
    rng = random.Random(12)
    topology = namespaced(unique, PETS)  # PETS: one partition, keyed by /id
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):

        def pet(key: int) -> bytes:
            price = rng.choice([None, rng.randint(0, 50)])
            return orjson.dumps({"id": key, "price": price, "name": rng.choice("abcdef")})

        published = [client.publish("PETS", pet(key)) for key in range(20)]
        client.query("PETS", min_position=[p.position for p in published])
        subscribers = []
        for number in range(20):
            options = {
                "filter": rng.choice(["", "/price > 10", "/price < 40"]),
                "top_n": rng.randint(1, 5),
                "skip_n": rng.randint(0, 6),
                "order_by": rng.choice(["", "/price", "/price DESC", "/name, /price DESC"]),
            }
            stream = client.sow_and_subscribe("PETS", oof=True, sub_id=f"p{number}", **options)
            subscribers.append((options, Collector(stream)))
        for _, collector in subscribers:
            assert collector.wait_for(lambda c: c.group_end() is not None)
        last = published[-1].position
        for _ in range(120):
            key = rng.randrange(30)
            if rng.random() < 0.25:
                client.delete("PETS", filter=f"/id = {key}")
            else:
                last = client.publish("PETS", pet(key)).position
        client.query("PETS", min_position=[last])
        for options, collector in subscribers:
            current = client.query("PETS", **options)[0]
            expected = {r.sow_key: data(r) for r in current}
            assert collector.wait_for(lambda c, e=expected: _window(c) == e, 10), options
            collector.stop()
        changelog = read_topic(bootstrap, topology.topic("PETS").changelog_topic)
    for options, collector in subscribers:
        _check_every_delivery(topology, changelog, options, collector)


def _check_every_delivery(
    topology: Any, changelog: list[Any], options: dict[str, Any], collector: Collector
) -> None:
    """Replay ``changelog`` one change at a time into a fresh replica; after each change
    a subscriber was sent something for, its window must be the sow query's page."""
    replica = Replica(topology, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(topology, replica)
    records = iter(changelog)
    pending = next(records, None)

    def apply_through(offset: int) -> None:
        nonlocal pending
        while pending is not None and pending.offset() <= offset:
            replica.apply([pending])
            pending = next(records, None)

    def page() -> dict[str, Any]:
        result = engine.run(SowQuery(topic="PETS", **options))
        return {e.sow_key: orjson.loads(e.data) for batch in result.batches for e in batch}

    apply_through(collector.group_end().snapshot[0].offset - 1)
    view = {r.sow_key: data(r) for r in collector.query_records()}
    assert view == page(), options
    changes = collector.changes()
    for offset, group in itertools.groupby(changes, lambda c: c.changelog_position.offset):
        for change in group:
            if change.kind == sow_pb2.CHANGE_PUBLISH:
                view[change.sow_key] = data(change.record)
            else:
                assert change.sow_key in view, (options, offset)
                del view[change.sow_key]
        apply_through(offset)
        assert view == page(), (options, offset)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"top_n": 2, "skip_n": 1, "filter": "UNIX_TIMESTAMP() > /t"}, "non-deterministic"),
        ({"skip_n": 3}, "requires top_n"),
    ],
)
def test_a_bad_paginated_subscription_is_refused_with_the_reason(
    backend: str, tmp_path: Path, unique: str, options: dict[str, Any], message: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        stream = client.sow_and_subscribe("QUOTES", **options)
        with pytest.raises(ServiceError, match=message) as raised:
            list(stream)
        assert raised.value.code == "INVALID_ARGUMENT"
