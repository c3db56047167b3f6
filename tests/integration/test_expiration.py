"""Expiration enforced by the processor (spec 3.1, 3.9; issue 9 item 3), end to end:
processor, changelog, replica and gRPC on the session's broker.

Lifetimes are seconds long and every time bound is loose: these tests assert what expires
and what does not, not how fast (bench/expire.py measures that).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from processor.changelog import REASON_HEADER
from processor.changelog.commands import EXPIRATION_HEADER
from processor.client.sow_client import SowClient
from processor.state.opener import store_path
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, read_topic, running_sow
from tests.integration.subscription_helpers import Collector, data

ORDERS = SowTopic("ORDERS", keys=("/orderId",))


def _topology(unique: str, expiration_s: float | None) -> Topology:
    return namespaced(unique, replace(ORDERS, expiration_s=expiration_s))


def _keys(client: SowClient, *published: Any) -> set[str]:
    """The SowKeys the topic holds, as of at least the given publishes."""
    records, _, _ = client.query("ORDERS", min_position=[p.position for p in published])
    return {r.sow_key for r in records}


def _wait_keys(client: SowClient, expected: set[str], timeout_s: float = 20.0) -> float:
    """Wait until the topic holds exactly ``expected``; return when (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = _keys(client)
        if held == expected:
            return time.monotonic()
        assert time.monotonic() < deadline, f"the topic holds {held}, expected {expected}"
        time.sleep(0.05)


def _expired_tombstones(bootstrap: str, topology: Topology) -> list[str]:
    """The SowKeys of the changelog's tombstones whose reason is ``expired``."""
    topic = topology.topic("ORDERS")
    keys = []
    for record in read_topic(bootstrap, topic.changelog_topic, timeout_s=5):
        headers = dict(record.headers() or ())  # type: ignore[attr-defined]
        if record.value() is None and headers.get(REASON_HEADER) == b"expired":  # type: ignore[attr-defined]
            keys.append(record.key().decode())  # type: ignore[attr-defined]
    return keys


def test_topic_default_interval_and_zero_for_never(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, 1.5)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        began = time.monotonic()
        a = client.publish("ORDERS", b'{"orderId": 1}')
        b = client.publish("ORDERS", b'{"orderId": 2}')
        never = client.publish("ORDERS", b'{"orderId": 3}', expiration=-1)  # header 0
        records, _, _ = client.query("ORDERS", min_position=[never.position])
        expiring = {r.sow_key: r.expiration_ms for r in records}
        assert expiring[never.sow_key] == 0
        assert expiring[a.sow_key] > 0
        gone = _wait_keys(client, {never.sow_key})
        assert gone - began >= 1.4
        assert sorted(_expired_tombstones(bootstrap, topology)) == sorted([a.sow_key, b.sow_key])
        time.sleep(0.5)
        assert _keys(client) == {never.sow_key}


def test_per_message_expiration_on_a_topic_enabled_for_it(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, 0)  # enabled: per-message values only
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        short = client.publish("ORDERS", b'{"orderId": 1}', expiration=1.0)
        longer = client.publish("ORDERS", b'{"orderId": 2}', expiration=3.0)
        forever = client.publish("ORDERS", b'{"orderId": 3}')  # no header: no expiration
        assert _keys(client, short, longer, forever) == {
            short.sow_key,
            longer.sow_key,
            forever.sow_key,
        }
        _wait_keys(client, {longer.sow_key, forever.sow_key})
        _wait_keys(client, {forever.sow_key})
        assert _expired_tombstones(bootstrap, topology) == [short.sow_key, longer.sow_key]


def test_an_update_restarts_the_lifespan(bootstrap: str, tmp_path: Path, unique: str) -> None:
    topology = _topology(unique, 3.0)
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        # Lifetimes count from when the processor applies a publish: wait until it can.
        assert app.processor is not None
        assert app.processor.ready.wait(30)
        began = time.monotonic()
        first = client.publish("ORDERS", b'{"orderId": 1, "v": 1}')
        other = client.publish("ORDERS", b'{"orderId": 2}')
        assert len(_keys(client, first, other)) == 2
        time.sleep(max(began + 1.0 - time.monotonic(), 0))
        update = client.publish("ORDERS", b'{"orderId": 1, "v": 2}')
        assert _keys(client, update) == {first.sow_key, other.sow_key}
        _wait_keys(client, {first.sow_key})  # the other one, due at +3 s
        time.sleep(max(began + 3.5 - time.monotonic(), 0))
        # Past the first publish's due time, the updated record stays until +4 s.
        records, _, _ = client.query("ORDERS")
        assert [data(r) for r in records] == [{"orderId": 1, "v": 2}]
        gone = _wait_keys(client, set())
        assert gone - began >= 3.9
        assert _expired_tombstones(bootstrap, topology) == [other.sow_key, first.sow_key]


def test_disabled_topic_ignores_the_expiration_header(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, None)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        a = client.publish("ORDERS", b'{"orderId": 1}', expiration=0.5)
        producer = Producer({"bootstrap.servers": bootstrap})
        topic = topology.topic("ORDERS")
        producer.produce(
            topic.kafka_topic,
            value=b'{"orderId": 2}',
            headers=[(EXPIRATION_HEADER, b"0.5")],
        )
        producer.flush(10)
        assert len(_keys(client, a)) >= 1
        time.sleep(2.0)
        records, _, _ = client.query("ORDERS")
        assert len(records) == 2
        assert {r.expiration_ms for r in records} == {0}
        assert _expired_tombstones(bootstrap, topology) == []


def test_sow_and_subscribe_with_oof_gets_oof_expired(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, 2.0)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        a = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        _keys(client, a)
        oof = Collector(client.sow_and_subscribe("ORDERS", oof=True))
        plain = Collector(client.sow_and_subscribe("ORDERS", send_deletes=True))
        for collector in (oof, plain):
            assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
        b = client.publish("ORDERS", b'{"orderId": 2, "price": 30}')
        assert oof.wait_for(lambda c: len(c.changes()) >= 3)
        assert [data(r) for r in oof.query_records()] == [{"orderId": 1, "price": 20}]
        published, first, second = oof.changes()[:3]
        assert (published.kind, published.sow_key) == (sow_pb2.CHANGE_PUBLISH, b.sow_key)
        assert [(c.kind, c.oof_reason, c.sow_key) for c in (first, second)] == [
            (sow_pb2.CHANGE_OOF, "expired", a.sow_key),
            (sow_pb2.CHANGE_OOF, "expired", b.sow_key),
        ]
        assert data(second.record) == {"orderId": 2, "price": 30}
        assert plain.wait_for(lambda c: len(c.changes()) >= 3)
        assert [c.kind for c in plain.changes()] == [
            sow_pb2.CHANGE_PUBLISH,
            sow_pb2.CHANGE_DELETE,
            sow_pb2.CHANGE_DELETE,
        ]
        time.sleep(0.3)
        assert len(oof.changes()) == 3
        oof.stop()
        plain.stop()


def test_records_due_while_the_processor_was_down_expire_at_start(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, 0)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        due = [client.publish("ORDERS", b'{"orderId": %d}' % i, expiration=2.0) for i in range(3)]
        kept = client.publish("ORDERS", b'{"orderId": 9}', expiration=600.0)
        assert len(_keys(client, *due, kept)) == 4
    time.sleep(2.5)  # every short record falls due while nothing runs
    assert _expired_tombstones(bootstrap, topology) == []
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        assert app.processor is not None
        assert app.processor.ready.wait(30)
        _wait_keys(client, {kept.sow_key})
    assert sorted(_expired_tombstones(bootstrap, topology)) == sorted(p.sow_key for p in due)


def test_a_store_rebuilt_from_its_changelog_gets_its_due_index_back(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, 0)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        due = [client.publish("ORDERS", b'{"orderId": %d}' % i, expiration=4.0) for i in range(3)]
        kept = client.publish("ORDERS", b'{"orderId": 9}')
        assert len(_keys(client, *due, kept)) == 4
    shutil.rmtree(store_path(tmp_path, topology.topic("ORDERS"), 0))
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        assert app.processor is not None
        assert app.processor.ready.wait(30)
        _wait_keys(client, {kept.sow_key})
    assert sorted(_expired_tombstones(bootstrap, topology)) == sorted(p.sow_key for p in due)
