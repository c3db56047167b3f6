"""subscribe and sow_and_subscribe through gRPC, against the real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.client.sow_client import ServiceError
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector, data

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)


@pytest.mark.smoke
def test_sow_and_subscribe_sends_the_query_then_later_changes(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        first = client.publish("ORDERS", b'{"orderId": 1, "symbol": "IBM", "price": 10}')
        second = client.publish("ORDERS", b'{"orderId": 2, "symbol": "MSFT", "price": 20}')
        client.query("ORDERS", min_position=[first.position, second.position])
        stream = client.sow_and_subscribe(
            "ORDERS", filter="/price >= 10", sub_id="s1", query_id="q", batch_size=1
        )
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None)
        parts = [m.WhichOneof("part") for m in collector.messages]
        assert parts == ["group_begin", "batch", "batch", "group_end"]
        assert {m.sub_id for m in collector.messages} == {"s1"}
        assert collector.messages[0].group_begin.query_id == "q"
        end = collector.group_end()
        assert end.records_returned == 2
        assert [(p.partition, p.offset) for p in end.snapshot] == [
            (p.partition, p.offset) for p in collector.messages[0].group_begin.snapshot
        ]
        assert {data(r)["orderId"] for r in collector.query_records()} == {1, 2}

        update = client.publish("ORDERS", b'{"orderId": 1, "symbol": "IBM", "price": 11}')
        client.publish("ORDERS", b'{"orderId": 3, "symbol": "X", "price": 1}')  # filtered out
        assert collector.wait_for(lambda c: len(c.changes()) >= 1)
        change = collector.changes()[0]
        assert change.kind == sow_pb2.CHANGE_PUBLISH
        assert change.sow_key == update.sow_key
        assert data(change.record) == {"orderId": 1, "symbol": "IBM", "price": 11}
        assert change.record.position.offset == update.position.offset
        snapshot = {(p.topic, p.partition): p.offset for p in end.snapshot}
        cp = change.changelog_position
        assert cp.offset >= snapshot[(cp.topic, cp.partition)]
        collector.stop()
        assert collector.error is None
        assert len(collector.changes()) == 1


@pytest.mark.smoke
def test_subscribe_delivers_live_changes_of_a_regex_topic(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS, SowTopic("ORDERS_EU", keys=("/orderId",)))
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        before = client.publish("ORDERS", b'{"orderId": 1, "price": 10}')
        client.query("ORDERS", min_position=[before.position])
        collector = Collector(client.subscribe("^ORDERS", filter="/price > 5", sub_id="live"))
        assert collector.wait_for(lambda c: bool(c.messages))
        assert collector.messages[0].WhichOneof("part") == "registered"
        client.publish("ORDERS", b'{"orderId": 2, "price": 20}')
        client.publish("ORDERS_EU", b'{"orderId": 7, "price": 30}')
        client.publish("ORDERS_EU", b'{"orderId": 8, "price": 1}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        changes = collector.changes()
        assert sorted((c.topic, data(c.record)["orderId"]) for c in changes) == [
            ("ORDERS", 2),
            ("ORDERS_EU", 7),
        ]
        assert all(m.WhichOneof("part") == "change" for m in collector.messages[1:])
        collector.stop()


def test_bad_subscriptions_get_clear_errors(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        unknown = Collector(client.subscribe("NOPE"))
        unknown.done.wait(10)
        assert unknown.error is not None
        assert unknown.error.code == "NOT_FOUND"
        assert "ORDERS" in unknown.error.details
        bad = Collector(client.sow_and_subscribe("ORDERS", filter="/price >"))
        bad.done.wait(10)
        assert bad.error is not None
        assert bad.error.code == "INVALID_ARGUMENT"
        with pytest.raises(ServiceError) as too_big:
            list(client.sow_and_subscribe("ORDERS", batch_size=10001))
        assert "10000" in too_big.value.details


def test_a_slow_consumer_is_disconnected_while_others_keep_up(
    backend: str, tmp_path: Path, unique: str
) -> None:
    import threading
    import time

    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        hub = app.subscriptions
        assert hub is not None
        paused = threading.Event()
        slow = Collector(client.subscribe("ORDERS", sub_id="slow", max_backlog=50), paused)
        others = [Collector(client.subscribe("ORDERS", sub_id=f"o{i}")) for i in range(10)]
        for collector in [slow, *others]:
            assert collector.wait_for(lambda c: bool(c.messages) or c.done.is_set())
        count = 3000
        padding = "x" * 1000  # fills the slow client's connection window sooner
        messages = (
            f'{{"orderId": {i}, "price": {i}, "pad": "{padding}"}}'.encode() for i in range(count)
        )
        list(client.publish_stream("ORDERS", messages))
        # The slow subscriber's queue overflows: the service drops it, not the others.
        deadline = time.monotonic() + 60
        while len(hub) > 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(hub) == 10
        paused.set()  # it reads again: what was in flight, then the reason
        assert slow.done.wait(20)
        assert slow.error is not None
        assert slow.error.code == "RESOURCE_EXHAUSTED"
        assert "slow consumer:" in slow.error.details
        assert "messages behind" in slow.error.details
        assert len(slow.changes()) < count
        for collector in others:
            assert collector.wait_for(lambda c: len(c.changes()) >= count, 60)
            assert collector.error is None
            changes = collector.changes()
            # Every change once (in order per changelog partition; ORDERS has two).
            assert sorted(data(c.record)["orderId"] for c in changes) == list(range(count))
            # Loose bound: each change arrived within seconds of its apply time.
            lags = [
                received - c.record.apply_time_ms / 1000
                for c, received in zip(changes, collector.received_at[1:], strict=True)
            ]
            assert max(lags) < 15.0
            collector.stop()
