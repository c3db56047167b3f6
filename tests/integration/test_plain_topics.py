"""Plain topics (no SOW): publish, subscribe and sow_and_subscribe over gRPC, against the
real broker; a SOW query on one is refused."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import ServiceError
from processor.topology.model import PlainTopic, SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import running_sow
from tests.integration.subscription_helpers import Collector, data
from tests.integration.test_subscription_cli import _start as start_cli
from tests.integration.test_subscription_cli import _stop as stop_cli

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)
TICKS = PlainTopic("TICKS", partitions=2)
ORDERS_LIVE = PlainTopic("ORDERS_LIVE")


def _position(published: Any) -> tuple[str, int, int]:
    position = published.position
    return position.topic, position.partition, position.offset


def plain_topology(unique: str, sow: list[SowTopic], plain: list[PlainTopic]) -> Topology:
    """A topology with SOW and plain topics whose Kafka topics are unique to one test."""
    return Topology(
        {t.name: replace(t, kafka_topic=f"{unique}.{t.name}") for t in sow},
        (),
        {t.name: replace(t, kafka_topic=f"{unique}.{t.name}") for t in plain},
    )


def test_subscribe_delivers_only_later_messages_that_match(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        tail = app.plain_tail
        assert tail is not None
        old = client.publish("TICKS", b'{"symbol": "OLD", "price": 50}')
        # A subscription starts after what the service has read of the log.
        assert tail.wait_for([_position(old)], 30)
        stream = client.subscribe("TICKS", filter="/price > 10", sub_id="t")
        collector = Collector(stream)
        assert collector.wait_for(lambda c: bool(c.messages), 30)
        registered = collector.messages[0]
        assert registered.WhichOneof("part") == "registered"
        start = {(p.topic, p.partition): p.offset for p in registered.registered.snapshot}
        assert set(start) == {(f"{unique}.TICKS", 0), (f"{unique}.TICKS", 1)}

        keyed = client.publish("TICKS", b'{"symbol": "IBM", "price": 20}', sow_key="aWJt")
        client.publish("TICKS", b'{"symbol": "LOW", "price": 1}')  # filtered out
        unkeyed = client.publish("TICKS", b'{"symbol": "MSFT", "price": 30}', correlation_id="c1")
        assert (keyed.sow_key, unkeyed.sow_key) == ("aWJt", "")
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        changes = {data(c.record)["symbol"]: c for c in collector.changes()}
        assert set(changes) == {"IBM", "MSFT"}
        ibm, msft = changes["IBM"], changes["MSFT"]
        assert (ibm.kind, ibm.topic, ibm.sow_key) == (sow_pb2.CHANGE_PUBLISH, "TICKS", "aWJt")
        assert (msft.sow_key, msft.record.correlation_id) == ("", "c1")
        for change, published in ((ibm, keyed), (msft, unkeyed)):
            position = change.changelog_position
            assert (position.topic, position.partition, position.offset) == (
                published.position.topic,
                published.position.partition,
                published.position.offset,
            )
            assert position.offset >= start[(position.topic, position.partition)]
            assert change.record.message_type == "json"
        collector.stop()
        assert collector.error is None
        assert len(collector.changes()) == 2


def test_sow_and_subscribe_sends_an_empty_group_then_live_messages(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        old = client.publish("TICKS", b'{"symbol": "OLD", "price": 10}')
        assert app.plain_tail is not None
        assert app.plain_tail.wait_for([_position(old)], 30)
        stream = client.sow_and_subscribe(
            "TICKS", filter="/price < 50", sub_id="s", query_id="q", oof=True
        )
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None, 30)
        parts = [m.WhichOneof("part") for m in collector.messages]
        assert parts == ["group_begin", "group_end"]
        end = collector.group_end()
        assert (end.query_id, end.records_returned, end.matches) == ("q", 0, 0)
        begin = collector.messages[0].group_begin
        assert [(p.topic, p.partition, p.offset) for p in begin.snapshot] == [
            (p.topic, p.partition, p.offset) for p in end.snapshot
        ]
        client.publish("TICKS", b'{"symbol": "IBM", "price": 20}', sow_key="aWJt")
        # The same key, no longer matching: no OOF (a plain topic holds no records).
        client.publish("TICKS", b'{"symbol": "IBM", "price": 99}', sow_key="aWJt")
        client.publish("TICKS", b'{"symbol": "IBM", "price": 21}', sow_key="aWJt")
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        assert [c.kind for c in collector.changes()] == [sow_pb2.CHANGE_PUBLISH] * 2
        assert [data(c.record)["price"] for c in collector.changes()] == [20, 21]
        collector.stop()


def test_sow_query_and_delete_on_a_plain_topic_are_refused(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        with pytest.raises(ServiceError) as query:
            client.query("TICKS")
        assert query.value.code == "INVALID_ARGUMENT"
        assert "topic TICKS has no SOW: subscribe to it instead" in query.value.details
        with pytest.raises(ServiceError) as pattern:
            client.query("^TICK")
        assert pattern.value.code == "INVALID_ARGUMENT"
        assert "only topics without a SOW (TICKS)" in pattern.value.details
        with pytest.raises(ServiceError) as delete:
            client.delete("TICKS", ["aWJt"])
        assert delete.value.code == "INVALID_ARGUMENT"
        with pytest.raises(ServiceError) as bad:
            client.publish("TICKS", b"not json")
        assert bad.value.code == "INVALID_ARGUMENT"
        assert "not valid JSON" in bad.value.details
        with pytest.raises(ServiceError) as unknown:
            client.subscribe("NOPE").__iter__().__next__()
        assert unknown.value.code == "NOT_FOUND"
        # The service's own event topics (/AMPS/ClientStatus, /AMPS/SOWStats) are listed too.
        assert re.search(r"plain topics \(no SOW\): [^;]*\bTICKS\b", unknown.value.details)


def test_a_pattern_covers_a_sow_topic_and_a_plain_topic(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [ORDERS_LIVE, TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        held = client.publish("ORDERS", b'{"orderId": 1, "price": 10}')
        client.query("ORDERS", min_position=[held.position])
        stream = client.sow_and_subscribe(
            "^ORDERS", filter="/price >= 10", sub_id="both", send_deletes=True
        )
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None, 30)
        assert [data(r) for r in collector.query_records()] == [{"orderId": 1, "price": 10}]
        snapshot = {p.topic for p in collector.group_end().snapshot}
        assert snapshot == {f"{unique}.ORDERS.sow-changelog", f"{unique}.ORDERS_LIVE"}
        client.publish("ORDERS_LIVE", b'{"orderId": 7, "price": 70}')
        client.publish("ORDERS", b'{"orderId": 2, "price": 20}')
        client.publish("ORDERS_LIVE", b'{"orderId": 8, "price": 1}')  # filtered out
        client.publish("TICKS", b'{"orderId": 9, "price": 90}')  # not covered
        client.delete("ORDERS", [held.sow_key], timeout=30)
        client.publish("ORDERS_LIVE", b'{"orderId": 10, "price": 100}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 4)
        seen = sorted(
            ((c.topic, c.kind, data(c.record)) for c in collector.changes()),
            key=lambda change: (change[0], change[1], change[2]["orderId"]),
        )
        assert seen == [
            ("ORDERS", sow_pb2.CHANGE_PUBLISH, {"orderId": 2, "price": 20}),
            # The SOW topic's held record was deleted: the last state this subscriber had.
            ("ORDERS", sow_pb2.CHANGE_DELETE, {"orderId": 1, "price": 10}),
            ("ORDERS_LIVE", sow_pb2.CHANGE_PUBLISH, {"orderId": 7, "price": 70}),
            ("ORDERS_LIVE", sow_pb2.CHANGE_PUBLISH, {"orderId": 10, "price": 100}),
        ]
        collector.stop()
        assert collector.error is None
        assert len(collector.changes()) == 4


def test_two_subscribes_meet_with_no_gap_and_no_duplicate(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        first = Collector(client.subscribe("TICKS", sub_id="first"))
        assert first.wait_for(lambda c: bool(c.messages), 30)
        stop = threading.Event()
        sent: list[int] = []

        def publish() -> None:
            while not stop.is_set():
                client.publish("TICKS", f'{{"n": {len(sent)}}}'.encode())
                sent.append(len(sent))

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            assert first.wait_for(lambda c: len(c.changes()) >= 20)
            second = Collector(client.subscribe("TICKS", sub_id="second"))
            assert second.wait_for(lambda c: bool(c.messages), 30)
        finally:
            stop.set()
            publisher.join(60)
        for _ in range(5):  # surely after the second subscribe
            client.publish("TICKS", f'{{"n": {len(sent)}}}'.encode())
            sent.append(len(sent))
        assert first.wait_for(lambda c: len(c.changes()) == len(sent))
        start = {(p.topic, p.partition): p.offset for p in second.messages[0].registered.snapshot}

        def after_start(change: sow_pb2.Change) -> bool:
            position = change.changelog_position
            return position.offset >= start[(position.topic, position.partition)]

        expected = [data(c.record)["n"] for c in first.changes() if after_start(c)]
        assert second.wait_for(lambda c: len(c.changes()) >= len(expected))
        assert sorted(data(c.record)["n"] for c in first.changes()) == sent
        assert sorted(data(c.record)["n"] for c in second.changes()) == sorted(expected)
        first.stop()
        second.stop()


def test_cli_publish_and_subscribe_on_a_plain_topic(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = plain_topology(unique, [ORDERS], [TICKS])
    with running_sow(backend, topology, tmp_path, unique) as (app, _):
        server = ("--server", app.grpc_address)
        live, lines = start_cli("subscribe", "TICKS", "--filter", "/price > 10", *server)
        try:
            assert "registered" in lines.get(timeout=30)
            for price in (5, 50):
                published = subprocess.run(
                    [sys.executable, "-m", "processor.cli", "publish", "TICKS", *server],
                    input=f'{{"symbol": "IBM", "price": {price}}}\n',
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=True,
                )
                assert orjson.loads(published.stdout)["sow_key"] == ""
            change = lines.get(timeout=20)
            assert (change["kind"], change["topic"]) == ("publish", "TICKS")
            assert change["data"] == {"symbol": "IBM", "price": 50}
        finally:
            assert stop_cli(live) == 0
