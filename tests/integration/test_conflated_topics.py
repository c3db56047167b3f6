"""Conflated topics through gRPC (issue 21, seed 002 SOW/ConflatedTopic): a copy of a SOW
topic that takes each record's latest state at most once per Interval, queried and
subscribed like a topic. On both backends: a burst of updates reaches a subscriber as one
update per record (the latest), deletes and records leaving the Filter leave the copy,
and the copy refuses publishes. On Kafka: under a 20k msg/s update stream with a 1 s
interval, every record's updates reach the subscriber at least an interval apart, each
newer than the last, and the copy ends equal to the topic.

A conflated topic of a Pattern topic (TopicFormat ``%n-C``, from AMPS XML or YAML) gives
each topic the Pattern topic stores a copy of its own, queried and subscribed by its
formatted name. A conflated topic's Enrichment shapes each copy as it is written; a field
that fails on one record dead-letters that record with the reason and the others flow."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.direct import DirectPublisher
from processor.client.sow_client import ServiceError, SowClient
from processor.topology import load_topology
from processor.topology.model import Topology
from processor.wire import sow_pb2
from tests.conftest import MEMORY
from tests.integration.harness import namespaced_topology, read_topic, running_sow
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


PATTERN_XML = """<AMPSConfig><SOW>
  <Topic>
    <Name>BOOKS</Name>
    <Pattern>^(orders|trades)</Pattern>
    <MessageType>json</MessageType>
    <Key>/id</Key>
  </Topic>
  <ConflatedTopic>
    <Name>BOOKS-C</Name>
    <UnderlyingTopic>BOOKS</UnderlyingTopic>
    <Interval>200ms</Interval>
    <TopicFormat>%n-C</TopicFormat>
  </ConflatedTopic>
</SOW></AMPSConfig>
"""
PATTERN_YAML = """
topics:
  - {name: BOOKS, pattern: '^(orders|trades)', key: /id}
conflated_topics:
  - {name: BOOKS-C, underlying: BOOKS, interval: 200ms, topic_format: '%n-C'}
"""


def _copies(client: SowClient, topic: str, **query: Any) -> list[tuple[str, int, int]]:
    """(the record's topic, /id, /qty) of each record a query returns, sorted."""
    records, _, _ = client.query(topic, **query)
    return sorted((r.topic, *(orjson.loads(r.data)[f] for f in ("id", "qty"))) for r in records)


@pytest.mark.parametrize("definition", ["xml", "yaml"])
def test_a_pattern_topics_copies_are_topics_named_by_the_topic_format(
    backend: str, tmp_path: Path, unique: str, definition: str
) -> None:
    path = tmp_path / f"topology.{definition}"
    path.write_text(PATTERN_XML if definition == "xml" else PATTERN_YAML)
    topology = namespaced_topology(unique, load_topology(path), partitions=2)
    assert topology.conflated_topics["BOOKS-C"].topic_format == "%n-C"
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        # The Pattern topic's pattern matches orders-C too: the name is the copy's.
        collector = Collector(client.sow_and_subscribe("orders-C", oof=True))
        assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
        one = client.publish("orders", b'{"id": 1, "qty": 1}')
        client.publish("orders", b'{"id": 2, "qty": 2}')
        client.publish("trades", b'{"id": 1, "qty": 10}')  # the same Key: another record
        _until(lambda: len(_copies(client, "BOOKS-C")) == 3)

        assert _copies(client, "orders-C") == [("orders-C", 1, 1), ("orders-C", 2, 2)]
        assert _copies(client, "trades-C") == [("trades-C", 1, 10)]
        assert _copies(client, "orders-C", filter="/id = 1") == [("orders-C", 1, 1)]
        assert _copies(client, "-C$") == [  # a regular expression over the copies
            ("orders-C", 1, 1),
            ("orders-C", 2, 2),
            ("trades-C", 1, 10),
        ]
        assert _copies(client, "orders") == [("orders", 1, 1), ("orders", 2, 2)]
        [copy] = client.query("orders-C", filter="/id = 1")[0]
        assert copy.sow_key == one.sow_key  # a copy keeps its record's SowKey

        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        changes = collector.changes()
        assert sorted((c.record.topic, orjson.loads(c.record.data)["id"]) for c in changes) == [
            ("orders-C", 1),
            ("orders-C", 2),
        ]
        two = client.query("orders", filter="/id = 2")[0][0]
        client.delete("orders", [two.sow_key])
        client.publish("trades", b'{"id": 1, "qty": 11}')
        _until(lambda: _copies(client, "trades-C") == [("trades-C", 1, 11)])
        assert _copies(client, "orders-C") == [("orders-C", 1, 1)]
        assert collector.wait_for(lambda c: len(c.changes()) >= 3)
        time.sleep(0.5)  # the trades update must not reach the orders-C subscriber
        later = collector.changes()[2:]
        assert [(c.kind, c.sow_key) for c in later] == [(sow_pb2.CHANGE_OOF, two.sow_key)]
        collector.stop()
        with pytest.raises(ServiceError, match="is a conflated topic"):
            client.publish("orders-C", b'{"id": 9, "qty": 1}')


ENRICHED = """
topics:
  - {name: orders, key: /orderId, partitions: 2}
conflated_topics:
  - name: orders-E
    underlying: orders
    interval: 200ms
    enrichment:
      - "UPPER(/first) AS /name/first"
      - "TOPIC_NAME() AS /copy"
      - "SOW_KEY() AS /key"
"""


def test_enrichment_shapes_each_copy_and_a_failing_field_rejects_its_record_alone(
    backend: str, tmp_path: Path, unique: str
) -> None:
    (tmp_path / "topology.yaml").write_text(ENRICHED)
    topology = namespaced_topology(unique, load_topology(tmp_path / "topology.yaml"))
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        ada = client.publish("orders", b'{"orderId": 1, "first": "ada"}')
        # /name is a string: its /first cannot be written, so the field fails on this one.
        bad = client.publish("orders", b'{"orderId": 2, "first": "alan", "name": "a string"}')
        grace = client.publish("orders", b'{"orderId": 3, "first": "grace"}')

        def copies() -> dict[int, Any]:
            records, _, _ = client.query("orders-E")
            return {m["orderId"]: m for m in (orjson.loads(r.data) for r in records)}

        _until(lambda: set(copies()) == {1, 3})
        assert copies() == {
            1: {"orderId": 1, "first": "ada", "name": {"first": "ADA"}, "copy": "orders-E",
                "key": ada.sow_key},
            3: {"orderId": 3, "first": "grace", "name": {"first": "GRACE"}, "copy": "orders-E",
                "key": grace.sow_key},
        }  # fmt: skip
        assert app.processor is not None
        _until(lambda: app.processor is not None and app.processor.dead_lettered == 1)
        # The processor went on: the record, fixed, reaches the copy.
        client.publish("orders", b'{"orderId": 2, "first": "alan"}')
        _until(lambda: copies().get(2, {}).get("name") == {"first": "ALAN"})
        [original] = client.query("orders", filter="/orderId = 1")[0]
        assert orjson.loads(original.data) == {"orderId": 1, "first": "ada"}  # not enriched
        assert app.processor.dead_lettered == 1
        if backend == MEMORY:
            return  # the dead-letter topic is read from the broker
        [letter] = read_topic(backend, f"{unique}.dead-letter", expect=1, timeout_s=30)
        headers = {name: value.decode() for name, value in letter.headers()}  # type: ignore[attr-defined]
        assert headers["sow.error.reason"] == "enrichment-failed"
        assert "UPPER(/first) AS /name/first" in headers["sow.error.message"], headers
        assert headers["sow.source.topic"] == topology.topic("orders-E").kafka_topic
        assert letter.key() == bad.sow_key.encode()  # type: ignore[attr-defined]
