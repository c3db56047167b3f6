"""Subscriptions behave as AMPS documents them (spec 3.9-3.11, seed 003), through gRPC on
both backends; kafka-sow's earlier behaviours stay behind options (issue 19).

Each test's first assertions fail on the behaviour before issue 19: an OOF ``match``
carried the last state received (the new one in ``current``); a subscription without
``oof`` got deletes; conflation released a held update before an OOF and sent an OOF for
a record that came back within the interval; a delta subscriber's copy kept fields a full
republish removed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector, data

ORDERS = SowTopic("ORDERS", keys=("/orderId",), expiration_s=0)


def _open(client: SowClient, **options: Any) -> Collector:
    collector = Collector(client.sow_and_subscribe("ORDERS", **options))
    assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
    return collector


def _summary(collector: Collector) -> list[tuple[int, str, dict[str, Any]]]:
    return [(c.kind, c.oof_reason, data(c.record)) for c in collector.changes()]


def test_an_oof_match_carries_the_new_state(backend: str, tmp_path: Path, unique: str) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        first = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        client.query("ORDERS", min_position=[first.position])
        oof = _open(client, filter="/price > 10", oof=True)
        client.publish("ORDERS", b'{"orderId": 1, "price": 5}')
        assert oof.wait_for(lambda c: len(c.changes()) >= 1)
        [match] = oof.changes()
        assert (match.kind, match.oof_reason) == (sow_pb2.CHANGE_OOF, "match")
        assert data(match.record) == {"orderId": 1, "price": 5}
        assert not match.HasField("current")
        oof.stop()


def test_oof_last_received_keeps_the_earlier_layout(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        first = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        client.query("ORDERS", min_position=[first.position])
        legacy = _open(client, filter="/price > 10", oof=True, oof_last_received=True)
        client.publish("ORDERS", b'{"orderId": 1, "price": 5}')
        assert legacy.wait_for(lambda c: len(c.changes()) >= 1)
        [match] = legacy.changes()
        assert data(match.record) == {"orderId": 1, "price": 20}
        assert data(match.current) == {"orderId": 1, "price": 5}
        legacy.stop()


def test_without_oof_deletes_and_expirations_send_nothing(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        doomed = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        client.publish("ORDERS", b'{"orderId": 2, "price": 30}', expiration=1)
        last = client.publish("ORDERS", b'{"orderId": 3, "price": 40}')
        client.query("ORDERS", min_position=[last.position])
        plain = _open(client)
        client.delete("ORDERS", [doomed.sow_key])
        time.sleep(1.5)  # order 2 expires
        remaining, _, _ = client.query("ORDERS")
        assert sorted(data(r)["orderId"] for r in remaining) == [3]
        marker = client.publish("ORDERS", b'{"orderId": 4, "price": 50}')
        assert plain.wait_for(lambda c: len(c.changes()) >= 1)
        time.sleep(0.2)
        assert [(c.kind, c.sow_key) for c in plain.changes()] == [
            (sow_pb2.CHANGE_PUBLISH, marker.sow_key)
        ]
        plain.stop()


def test_send_deletes_keeps_the_earlier_deletes(backend: str, tmp_path: Path, unique: str) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        doomed = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        client.query("ORDERS", min_position=[doomed.position])
        legacy = _open(client, send_deletes=True)
        client.delete("ORDERS", [doomed.sow_key])
        assert legacy.wait_for(lambda c: len(c.changes()) >= 1)
        assert _summary(legacy) == [(sow_pb2.CHANGE_DELETE, "", {"orderId": 1, "price": 20})]
        legacy.stop()


def test_conflation_with_oof_tells_the_difference_over_the_interval(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        client.publish("ORDERS", b'{"orderId": 1, "price": 60}')
        last = client.publish("ORDERS", b'{"orderId": 2, "price": 60}')
        client.query("ORDERS", min_position=[last.position])
        conflated = _open(client, filter="/price > 50", oof=True, conflation="1s")
        # Order 1: an update held in the interval, then out of the filter.
        client.publish("ORDERS", b'{"orderId": 1, "price": 70}')
        client.publish("ORDERS", b'{"orderId": 1, "price": 10}')
        # Order 2: out of the filter and back within the interval.
        client.publish("ORDERS", b'{"orderId": 2, "price": 10}')
        client.publish("ORDERS", b'{"orderId": 2, "price": 90}')
        assert conflated.wait_for(lambda c: len(c.changes()) >= 2)
        time.sleep(0.3)
        assert sorted(_summary(conflated), key=lambda s: s[2]["orderId"]) == [
            (sow_pb2.CHANGE_OOF, "match", {"orderId": 1, "price": 60}),  # as last received
            (sow_pb2.CHANGE_PUBLISH, "", {"orderId": 2, "price": 90}),  # the end state alone
        ]
        conflated.stop()


def test_a_delta_subscriber_gets_the_whole_record_when_a_republish_removes_a_field(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        first = client.publish("ORDERS", b'{"orderId": 1, "price": 20, "note": "rush"}')
        client.query("ORDERS", min_position=[first.position])
        deltas = _open(client, delta=True)
        client.publish("ORDERS", b'{"orderId": 1, "price": 20}')  # "note" removed
        client.publish("ORDERS", b'{"orderId": 1, "price": 25}')  # a change: a delta
        assert deltas.wait_for(lambda c: len(c.changes()) >= 2)
        whole, delta = deltas.changes()
        assert (whole.delta, data(whole.record)) == (False, {"orderId": 1, "price": 20})
        assert (delta.delta, data(delta.record)) == (True, {"orderId": 1, "price": 25})
        deltas.stop()
