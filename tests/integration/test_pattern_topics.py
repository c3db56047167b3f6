"""Pattern topics (AMPS regular-expression SOW topics, seed 002 "Regular Expression
Topics"), through gRPC on both backends: one topic definition stores every topic its
pattern matches, each with its own records (the same Key values on two topics are two
records), queried, subscribed and deleted by its own name or by a regular expression;
the definition's own name reads them all; a publish to a topic the pattern does not
match is refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import SowClient
from processor.errors import ServiceError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector

ORDERS = SowTopic("ORDERS", pattern=r"^orders\.", keys=("/id",), partitions=2)


def _records(client: SowClient, topic: str, at: Any = None, **query: Any) -> list[tuple[str, Any]]:
    if at is not None:
        query["min_position"] = [at.position]
    records, _, _ = client.query(topic, **query)
    return sorted((r.topic, orjson.loads(r.data)["v"]) for r in records)


def test_a_pattern_topic_keeps_each_matching_topic_apart(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        us = client.publish("orders.us", b'{"id":1,"v":"us1"}')
        eu = client.publish("orders.eu", b'{"id":1,"v":"eu1"}')
        assert us.sow_key != eu.sow_key  # the same Key values on two topics: two records
        client.publish("orders.eu", b'{"id":2,"v":"eu2"}')
        last = client.publish("orders.us", b'{"id":1,"v":"us1b"}')
        both = [last.position, eu.position]
        assert _records(client, "orders.us", min_position=both) == [("orders.us", "us1b")]
        assert _records(client, "orders.eu") == [("orders.eu", "eu1"), ("orders.eu", "eu2")]
        assert _records(client, "ORDERS", filter="/id = 1") == [
            ("orders.eu", "eu1"),
            ("orders.us", "us1b"),
        ]
        assert [v for _, v in _records(client, "^orders\\.(us|eu)$")] == ["eu1", "eu2", "us1b"]
        assert _records(client, "orders.us", filter="/v = 'eu1'") == []

        merged = client.publish("orders.eu", b'{"id":2,"w":1}', delta=True, ack="processed")
        records, _, _ = client.query("orders.eu", filter="/id = 2")
        assert [orjson.loads(r.data) for r in records] == [{"id": 2, "v": "eu2", "w": 1}]
        assert merged.sow_key

        collector = Collector(client.subscribe("orders.us", oof=True))
        try:
            time_to_subscribe = client.publish("orders.eu", b'{"id":3,"v":"eu3"}')
            assert time_to_subscribe.sow_key
            client.publish("orders.us", b'{"id":2,"v":"us2"}')
            assert collector.wait_for(lambda c: len(c.changes()) >= 1)
            changes = collector.changes()
            assert [orjson.loads(c.record.data)["v"] for c in changes] == ["us2"]
            assert changes[0].record.topic == "orders.us"
        finally:
            collector.stop()

        snapshot = Collector(client.sow_and_subscribe("orders.eu", filter="/id < 3"))
        try:
            assert snapshot.wait_for(lambda c: c.group_end() is not None)
            assert sorted(orjson.loads(r.data)["v"] for r in snapshot.query_records()) == [
                "eu1",
                "eu2",
            ]
            assert {r.topic for r in snapshot.query_records()} == {"orders.eu"}
        finally:
            snapshot.stop()

        deleted = client.delete("orders.eu", filter="1=1")
        after = _records(client, "ORDERS", min_position=list(deleted.positions))
        assert after == [("orders.us", "us1b"), ("orders.us", "us2")]

        with pytest.raises(ServiceError, match=r"has no SOW"):
            client.publish("trades.us", b'{"id":1,"v":"x"}')
        with pytest.raises(ServiceError, match="is a Pattern topic"):
            client.publish("ORDERS", b'{"id":1,"v":"x"}')


def test_a_foreign_record_without_its_topic_is_dead_lettered(
    backend: str, tmp_path: Path, unique: str
) -> None:
    if backend == "memory":
        return  # a foreign producer writes to Kafka itself
    from confluent_kafka import Producer

    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        producer = Producer({"bootstrap.servers": backend, "log_level": 3})
        kafka_topic = topology.topic("ORDERS").kafka_topic
        producer.produce(kafka_topic, b'{"id":1,"v":"none"}', partition=0)
        producer.produce(kafka_topic, b'{"id":1,"v":"bad"}', partition=0, headers=[
            ("sow.topic", b"trades.us")
        ])  # fmt: skip
        producer.produce(kafka_topic, b'{"id":1,"v":"ok"}', partition=0, headers=[
            ("sow.topic", b"orders.jp")
        ])  # fmt: skip
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while not client.query("orders.jp")[0]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert _records(client, "ORDERS") == [("orders.jp", "ok")]
        while app.processor is not None and app.processor.dead_lettered < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
