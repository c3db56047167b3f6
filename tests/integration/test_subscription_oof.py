"""Out-of-focus notifications and deletes through gRPC (spec 3.9, issue 9 item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from processor.changelog import REASON_HEADER
from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector, data

ORDERS = SowTopic("ORDERS", keys=("/orderId",))


def _applied(client: SowClient, *published: Any) -> None:
    client.query("ORDERS", min_position=[p.position for p in published])


def _open(client: SowClient, **options: Any) -> Collector:
    collector = Collector(client.sow_and_subscribe("ORDERS", **options))
    assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
    return collector


def test_oof_deleted_carries_the_last_value_seen_and_match_the_new_one(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        a = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        b = client.publish("ORDERS", b'{"orderId": 2, "price": 30}')
        _applied(client, a, b)
        oof = _open(client, filter="/price > 10", oof=True)
        plain = _open(client, filter="/price > 10", send_deletes=True)

        client.delete("ORDERS", [a.sow_key])
        client.publish("ORDERS", b'{"orderId": 2, "price": 5}')  # leaves the filter
        client.publish("ORDERS", b'{"orderId": 2, "price": 6}')  # still out: nothing
        back = client.publish("ORDERS", b'{"orderId": 2, "price": 40}')  # back in focus
        assert oof.wait_for(lambda c: len(c.changes()) >= 3)
        deleted, match, again = oof.changes()[:3]
        assert (deleted.kind, deleted.oof_reason, deleted.sow_key) == (
            sow_pb2.CHANGE_OOF,
            "deleted",
            a.sow_key,
        )
        assert data(deleted.record) == {"orderId": 1, "price": 20}
        assert (match.kind, match.oof_reason) == (sow_pb2.CHANGE_OOF, "match")
        assert data(match.record) == {"orderId": 2, "price": 5}
        assert not match.HasField("current")
        assert again.kind == sow_pb2.CHANGE_PUBLISH
        assert again.record.position.offset == back.position.offset

        # Without oof, with send_deletes, the delete reaches the client so it can drop the
        # record; leaving the filter does not.
        assert plain.wait_for(lambda c: len(c.changes()) >= 2)
        kinds = [(c.kind, c.sow_key) for c in plain.changes()]
        assert kinds == [
            (sow_pb2.CHANGE_DELETE, a.sow_key),
            (sow_pb2.CHANGE_PUBLISH, b.sow_key),
        ]
        assert data(plain.changes()[0].record) == {"orderId": 1, "price": 20}
        assert len(oof.changes()) == 3
        oof.stop()
        plain.stop()


def test_oof_expired_from_an_expiry_tombstone(bootstrap: str, tmp_path: Path, unique: str) -> None:
    """The replica reads a tombstone with ``sow.reason: expired`` as an expiry (the
    processor writes them once it enforces expiration); a subscriber gets OOF expired."""
    topology = namespaced(unique, ORDERS)
    topic = topology.topic("ORDERS")
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        a = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        _applied(client, a)
        oof = _open(client, oof=True)
        plain = _open(client, send_deletes=True)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(
            topic.changelog_topic,
            key=a.sow_key.encode(),
            value=None,
            partition=0,
            headers=[(REASON_HEADER, b"expired")],
        )
        producer.flush(10)
        assert oof.wait_for(lambda c: len(c.changes()) >= 1)
        expired = oof.changes()[0]
        assert (expired.kind, expired.oof_reason) == (sow_pb2.CHANGE_OOF, "expired")
        assert data(expired.record) == {"orderId": 1, "price": 20}
        assert plain.wait_for(lambda c: len(c.changes()) >= 1)
        assert plain.changes()[0].kind == sow_pb2.CHANGE_DELETE
        oof.stop()
        plain.stop()


def test_subscribe_oof_only_for_records_it_received_and_no_empties(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        old = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        _applied(client, old)
        live = Collector(client.subscribe("ORDERS", oof=True, no_empties=True))
        assert live.wait_for(lambda c: bool(c.messages))
        client.delete("ORDERS", [old.sow_key])  # never sent to this subscriber: no OOF
        new = client.publish("ORDERS", b'{"orderId": 2, "price": 1}')
        client.publish("ORDERS", b'{"orderId": 2, "price": 1}')  # same message: suppressed
        client.publish("ORDERS", b'{"orderId": 2, "price": 2}')
        client.delete("ORDERS", [new.sow_key])
        assert live.wait_for(lambda c: len(c.changes()) >= 3)
        changes = live.changes()
        assert [(c.kind, c.oof_reason) for c in changes] == [
            (sow_pb2.CHANGE_PUBLISH, ""),
            (sow_pb2.CHANGE_PUBLISH, ""),
            (sow_pb2.CHANGE_OOF, "deleted"),
        ]
        assert data(changes[2].record) == {"orderId": 2, "price": 2}
        live.stop()
