"""Conflated topics through gRPC (issue 21, seed 002 SOW/ConflatedTopic): a copy of a SOW
topic that takes each record's latest state at most once per Interval, queried and
subscribed like a topic. On both backends: a burst of updates reaches a subscriber as one
update per record (the latest), deletes and records leaving the Filter leave the copy,
and the copy refuses publishes. On Kafka: under a 20k msg/s update stream with a 1 s
interval, every record's updates reach the subscriber at least an interval apart, each
newer than the last, and the copy ends equal to the topic."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.direct import DirectPublisher
from processor.client.sow_client import ServiceError
from processor.topology import load_topology
from processor.topology.model import Topology
from processor.wire import sow_pb2
from tests.conftest import MEMORY
from tests.integration.harness import namespaced_topology, running_sow
from tests.integration.subscription_helpers import Collector

TOPOLOGY = """
topics:
  - {name: orders, key: /orderId, partitions: 2}
conflated_topics:
  - name: orders-C
    underlying: orders
    interval: 1s
    filter: "/qty > 0"
"""


def _topology(tmp_path: Path, unique: str) -> Topology:
    (tmp_path / "topology.yaml").write_text(TOPOLOGY)
    return namespaced_topology(unique, load_topology(tmp_path / "topology.yaml"))


def _copy(client: Any) -> dict[int, dict[str, Any]]:
    records, _, _ = client.query("orders-C")
    return {m["orderId"]: m for m in (orjson.loads(r.data) for r in records)}


def _until(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_burst_reaches_the_copy_as_one_update_per_record(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(tmp_path, unique)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        collector = Collector(client.sow_and_subscribe("orders-C", oof=True))
        assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
        for version in range(1, 11):
            for order in range(1, 6):
                client.publish("orders", orjson.dumps({"orderId": order, "qty": version}))
        _until(lambda: _copy(client) == {o: {"orderId": o, "qty": 10} for o in range(1, 6)})
        assert collector.wait_for(lambda c: len(c.changes()) >= 5)
        time.sleep(1.5)  # a later interval writes nothing more: nothing is pending
        changes = collector.changes()
        assert len(changes) == 5, [orjson.loads(c.record.data) for c in changes]
        assert all(orjson.loads(c.record.data)["qty"] == 10 for c in changes)

        five = client.query("orders", filter="/orderId = 5")[0][0]
        client.delete("orders", [five.sow_key])
        client.publish("orders", b'{"orderId": 4, "qty": 0}')  # leaves the filter
        client.publish("orders", b'{"orderId": 4, "qty": -1}')
        _until(lambda: set(_copy(client)) == {1, 2, 3})
        assert collector.wait_for(lambda c: len(c.changes()) >= 7)
        gone = [c for c in collector.changes()[5:] if c.kind == sow_pb2.CHANGE_OOF]
        assert sorted(c.sow_key for c in gone) == sorted(
            [five.sow_key, client.query("orders", filter="/orderId = 4")[0][0].sow_key]
        )
        collector.stop()
        with pytest.raises(ServiceError, match="is a conflated topic"):
            client.publish("orders-C", b'{"orderId": 9, "qty": 1}')


def test_a_fast_stream_reaches_the_copy_once_per_interval_per_record(
    backend: str, tmp_path: Path, unique: str
) -> None:
    if backend == MEMORY:
        pytest.skip("a rate over the broker: Kafka only")
    topology = _topology(tmp_path, unique)
    keys, rate, seconds = 2000, 20_000, 4.0
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        collector = Collector(client.subscribe("orders-C"))
        time.sleep(0.5)
        latest: dict[int, int] = {}
        sent = 0
        pending: list[Any] = []
        with DirectPublisher(backend, topology, publisher="") as publisher:
            start = time.monotonic()
            while (elapsed := time.monotonic() - start) < seconds:
                due = int(elapsed * rate) - sent
                if due <= 0:
                    time.sleep(0.002)
                    continue
                batch = []
                for n in range(sent, sent + due):
                    order, version = n % keys, n // keys + 1
                    latest[order] = version
                    batch.append(orjson.dumps({"orderId": order, "qty": version}))
                pending.append(publisher.submit("orders", batch))
                sent += due
            achieved = sent / (time.monotonic() - start)
            for submitted in pending:
                assert submitted.wait(30)
        assert achieved >= 0.9 * rate, achieved
        expected = {o: {"orderId": o, "qty": v} for o, v in latest.items()}
        try:
            _until(lambda: _copy(client) == expected, timeout_s=30)
        except AssertionError as exc:
            copy = _copy(client)
            wrong = {o: (copy.get(o), expected[o]) for o in expected if copy.get(o) != expected[o]}
            raise AssertionError(f"{len(wrong)} differ, e.g. {list(wrong.items())[:5]}") from exc
        time.sleep(1.5)
        collector.stop()
        # When the processor wrote each copy (its apply time): a record's copies are an
        # interval apart at least; the subscriber receives them with the replica's jitter.
        seen: dict[int, list[tuple[int, int]]] = {}
        for change in collector.changes():
            message = orjson.loads(change.record.data)
            seen.setdefault(message["orderId"], []).append(
                (change.record.apply_time_ms, message["qty"])
            )
        assert set(seen) == set(latest)
        gaps = [b[0] - a[0] for updates in seen.values() for a, b in itertools.pairwise(updates)]
        assert gaps, "every record was updated once only: the stream was too short"
        assert min(gaps) >= 1000, sorted(gaps)[:10]  # Interval 1s
        for order, updates in seen.items():
            versions = [qty for _, qty in updates]
            assert versions == sorted(set(versions)), (order, versions)  # each newer
            assert versions[-1] == latest[order]
