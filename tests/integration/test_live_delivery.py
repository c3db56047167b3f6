"""Delivery at apply time (issue 34): a processor hands its changes to the replica beside it
before its Kafka transaction commits; ``processed`` acknowledgements still wait for the
commit, and a processor that fails before its commit delivers nothing twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import SowClient
from processor.errors import SimulatedCrashError
from processor.log.memory.broker import MemoryLog
from processor.testing import MemoryBackend, start_memory
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow, waited_for
from tests.integration.subscription_helpers import Collector

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)
#: Delivery at apply time is off by default (docs/live.md).
LIVE: dict[str, object] = {"live_delivery": True}


def _order(order: int, version: int) -> bytes:
    return orjson.dumps({"orderId": order, "version": version})


def test_a_subscriber_gets_a_change_before_its_transaction_commits(
    bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processor is held for 4 s between producing its third transaction and
    committing it: the subscriber and a query see the change at once, and the processed
    acknowledgement comes only after the commit."""
    monkeypatch.setenv("SOW_STALL_AT", "produced:3:4")
    topology = namespaced(unique, ORDERS)
    with running_sow(bootstrap, topology, tmp_path / "state", unique, LIVE) as (app, client):
        assert app.processor is not None
        assert app.replica is not None
        # The processor's first transaction tells it where the next land (PROGRESS
        # records alone); then version 1 is the second.
        waited_for(lambda: app.processor.transactions >= 1, 10, "the processor's first commit")
        client.publish("ORDERS", _order(1, 1), ack="processed")
        # Its done reaches the replica just before the processor counts the commit.
        waited_for(lambda: app.processor.transactions >= 2, 10, "the second commit counted")
        assert app.processor.transactions == 2
        collector = Collector(client.subscribe("ORDERS"))
        waited_for(lambda: bool(collector.messages), 10, "the subscription registered")
        began = time.monotonic()
        reply = client.publish("ORDERS", _order(1, 3))
        waited_for(lambda: bool(collector.changes()), 3, "the change, before the commit")
        delivered_s = time.monotonic() - began
        position = (reply.position.topic, reply.position.partition, reply.position.offset)
        assert not app.replica.reached([position]), "processed before the commit"
        records, _, _ = client.query("ORDERS")
        assert [orjson.loads(r.data)["version"] for r in records] == [3]
        waited_for(lambda: app.replica.reached([position]), 15, "the commit")
        processed_s = time.monotonic() - began
        assert delivered_s < 2.0 < processed_s, (delivered_s, processed_s)
        assert app.processor.live is not None
        assert app.processor.live.records >= 1
        (change,) = collector.changes()
        assert change.kind == sow_pb2.CHANGE_PUBLISH
        assert orjson.loads(change.record.data)["version"] == 3


def test_the_live_path_and_the_changelog_agree(backend: str, unique: str, tmp_path: Path) -> None:
    """A stream of publishes and deletes over two partitions: every change reaches a
    sow_and_subscribe once, in order, most of them handed over live; the final state
    equals a new query service's, built from the changelog alone."""
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path / "state", unique, LIVE) as (app, client):
        collector = Collector(client.sow_and_subscribe("ORDERS", send_deletes=True))
        waited_for(lambda: bool(collector.messages), 10, "the query phase")
        model: dict[str, int] = {}
        for version in range(1, 301):
            order = version % 17
            if version % 10 == 0:
                client.delete("ORDERS", filter=f"/orderId = {order}")
            else:
                client.publish("ORDERS", _order(order, version))
        last = client.publish("ORDERS", _order(99, 0), ack="processed")
        assert last is not None
        waited_for(
            lambda: any(
                c.sow_key and orjson.loads(c.record.data or b"{}").get("orderId") == 99
                for c in collector.changes()
                if c.kind == sow_pb2.CHANGE_PUBLISH
            ),
            15,
            "the last change",
        )
        positions = [
            (c.changelog_position.partition, c.changelog_position.offset)
            for c in collector.changes()
        ]
        assert len(positions) == len(set(positions)), "a change delivered twice"
        for partition in (0, 1):
            offsets = [o for p, o in positions if p == partition]
            assert offsets == sorted(offsets), "out of order"
        for change in collector.changes():
            if change.kind == sow_pb2.CHANGE_PUBLISH:
                model[change.sow_key] = orjson.loads(change.record.data)["version"]
            else:
                model.pop(change.sow_key, None)
        records, _, _ = client.query("ORDERS")
        assert model == {r.sow_key: orjson.loads(r.data)["version"] for r in records}
        assert app.replica is not None
        assert app.replica.live.applied > 0
    with running_sow(backend, topology, tmp_path / "fresh", unique, processor=False) as (_, fresh):
        again, _, _ = fresh.query("ORDERS")
        assert model == {r.sow_key: orjson.loads(r.data)["version"] for r in again}


def test_a_processor_failing_before_its_commit_delivers_nothing_twice(tmp_path: Path) -> None:
    """On the memory log, the processor stops between handing over its third
    transaction of input and committing it; a new processor beside the same replica applies the
    same input again: the subscriber gets each change once, in order."""
    one = SowTopic("ORDERS", keys=("/orderId",), partitions=1)
    topology = Topology({"ORDERS": one})
    backend = MemoryBackend(MemoryLog(), crash="produced:4")  # after the placing commit
    app = start_memory(topology, tmp_path / "state", backend=backend, live_delivery=True)
    successor = None
    try:
        waited_for(lambda: app.readiness() is None, 30, "ready")
        assert app.processor is not None
        waited_for(lambda: app.processor.transactions >= 1, 10, "the processor's first commit")
        with SowClient(app.grpc_address) as client:
            collector = Collector(client.sow_and_subscribe("ORDERS"))
            waited_for(lambda: bool(collector.messages), 10, "the query phase")
            for version in (1, 2):
                client.publish("ORDERS", _order(version, version), ack="processed")
            client.publish("ORDERS", _order(3, 3))
            waited_for(lambda: app.failure() is not None, 10, "the processor stopped")
            assert isinstance(app.failure().__cause__ or app.errors[0], SimulatedCrashError)
            waited_for(lambda: len(collector.changes()) == 3, 10, "the third change, live")
            assert app.live is not None
            successor = backend.processor(app.settings, topology)
            successor.attach_live(app.live)
            thread = threading.Thread(target=successor.run, daemon=True)
            thread.start()
            client.publish("ORDERS", _order(4, 4), ack="processed", timeout=30)
            waited_for(lambda: len(collector.changes()) >= 4, 10, "the fourth change")
            time.sleep(0.3)
            versions = [orjson.loads(c.record.data)["version"] for c in collector.changes()]
            assert versions == [1, 2, 3, 4]
            assert app.replica is not None
            assert app.replica.live.applied >= 1
    finally:
        if successor is not None:
            successor.stop()
        app.stop()
