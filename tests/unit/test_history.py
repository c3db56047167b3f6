"""The history index (processor/replica/history.py) and historical queries, fed through
the replica's apply path with plain log records (no broker)."""

from __future__ import annotations

import random
import time
from typing import Any

import orjson

from processor import changelog
from processor.changelog.bookmarks import Point
from processor.keys import partition_for
from processor.query.historical import run_historical
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.topology.model import History, SowTopic, Topology
from tests.unit.log_records import LogRecord

HOUR = 3600.0


class Feed:
    """Writes changelog records with chosen timestamps into a replica."""

    def __init__(self, topic: SowTopic, replica: Replica) -> None:
        self.topic = topic
        self.replica = replica
        self.offsets: dict[int, int] = {}

    def _next(self, partition: int) -> int:
        self.offsets[partition] = self.offsets.get(partition, -1) + 1
        return self.offsets[partition]

    def publish(self, key: str, message: dict[str, Any], at_ms: int) -> tuple[int, int]:
        raw = key.encode()
        partition = partition_for(raw, self.topic.partitions)
        envelope = changelog.Envelope(
            self.topic.name, "json", self.topic.kafka_topic, partition, 0, key,
            orjson.dumps(message), at_ms, at_ms, None, None,
        )  # fmt: skip
        offset = self._next(partition)
        self.replica.apply(
            [
                LogRecord(
                    self.topic.changelog_topic,
                    partition,
                    offset,
                    raw,
                    changelog.encode(envelope),
                    timestamp_ms=at_ms,
                )
            ]
        )
        return partition, offset

    def delete(self, key: str, at_ms: int) -> None:
        raw = key.encode()
        partition = partition_for(raw, self.topic.partitions)
        record = LogRecord(
            self.topic.changelog_topic, partition, self._next(partition), raw, None,
            timestamp_ms=at_ms,
        )  # fmt: skip
        self.replica.apply([record])


def setup(window_s: float = HOUR, granularity_s: float = 0.0) -> tuple[QueryEngine, Feed]:
    topic = SowTopic(
        "QUOTES", keys=("/id",), partitions=2, history=History(window_s, granularity_s)
    )
    topology = Topology({"QUOTES": topic})
    replica = Replica(topology, tail=lambda: None)  # type: ignore[arg-type, return-value]
    return QueryEngine(topology, replica), Feed(topic, replica)


def state_at(engine: QueryEngine, at_ms: int, **fields: Any) -> dict[str, dict[str, Any]]:
    query = SowQuery("QUOTES", batch_size=10000, **fields)
    result = run_historical(engine, query, Point(timestamp_ms=at_ms))
    return {e.sow_key: orjson.loads(e.data) for batch in result.batches for e in batch}


def test_historical_query_equals_a_dict_model_at_20_random_times() -> None:
    engine, feed = setup()
    rng = random.Random(7)
    now = int(time.time() * 1000) - 600_000
    model: dict[str, dict[str, Any]] = {}
    timeline: list[tuple[int, dict[str, dict[str, Any]]]] = []
    for _ in range(600):
        now += rng.randint(0, 40)
        key = f"k{rng.randint(0, 40)}"
        if rng.random() < 0.2:
            feed.delete(key, now)
            model.pop(key, None)
        else:
            message = {"id": key, "price": rng.randint(0, 100)}
            feed.publish(key, message, now)
            model[key] = message
        timeline.append((now, dict(model)))
    first, last = timeline[0][0], timeline[-1][0]
    for _ in range(20):
        at = rng.randint(first - 50, last + 50)
        expected: dict[str, dict[str, Any]] = {}
        for moment, state in timeline:
            if moment > at:
                break
            expected = state
        assert state_at(engine, at) == expected, f"at {at}"
    # Filter, OrderBy and top_n apply to the historical state.
    at = (first + last) // 2
    expected = next(s for m, s in reversed(timeline) if m <= at)
    cheap = sorted((m for m in expected.values() if m["price"] < 50), key=lambda m: -m["price"])
    query = SowQuery("QUOTES", filter="/price < 50", order_by="/price DESC", top_n=3)
    result = run_historical(engine, query, Point(timestamp_ms=at))
    got = [orjson.loads(e.data) for batch in result.batches for e in batch]
    assert [m["price"] for m in got] == [m["price"] for m in cheap[:3]]


def test_later_deletes_do_not_remove_and_earlier_deletes_are_absent() -> None:
    engine, feed = setup()
    base = int(time.time() * 1000) - 10_000
    feed.publish("a", {"id": "a", "v": 1}, base)
    feed.publish("b", {"id": "b", "v": 1}, base + 10)
    feed.delete("a", base + 20)
    feed.delete("b", base + 40)
    assert state_at(engine, base + 15) == {"a": {"id": "a", "v": 1}, "b": {"id": "b", "v": 1}}
    assert state_at(engine, base + 30) == {"b": {"id": "b", "v": 1}}
    assert state_at(engine, base + 50) == {}
    # The current SOW is empty, as it should be.
    assert engine.run(SowQuery("QUOTES")).stats.records_returned == 0  # type: ignore[union-attr]


def test_granularity_keeps_one_version_per_interval() -> None:
    engine, feed = setup(granularity_s=1.0)
    base = (int(time.time() * 1000) - 60_000) // 1000 * 1000
    feed.publish("a", {"id": "a", "v": 1}, base + 100)
    feed.publish("a", {"id": "a", "v": 2}, base + 500)  # same second: replaces v1
    feed.publish("a", {"id": "a", "v": 3}, base + 1200)
    history = engine.replica.history.topics["QUOTES"]
    assert [v[0] for v in history.versions[b"a"]] == [base + 500, base + 1200]
    # The answer is the state at the latest saved point at or before the time.
    assert state_at(engine, base + 300) == {}
    assert state_at(engine, base + 600) == {"a": {"id": "a", "v": 2}}
    assert state_at(engine, base + 1100) == {"a": {"id": "a", "v": 2}}
    assert state_at(engine, base + 1300) == {"a": {"id": "a", "v": 3}}


def test_window_prunes_but_keeps_the_latest_state() -> None:
    engine, feed = setup(window_s=10.0)
    now = int(time.time() * 1000)
    feed.publish("old", {"id": "old", "v": 1}, now - 60_000)
    for i in range(50):
        feed.publish("busy", {"id": "busy", "v": i}, now - 60_000 + i * 1000)
    feed.publish("gone", {"id": "gone"}, now - 50_000)
    feed.delete("gone", now - 40_000)
    history = engine.replica.history.topics["QUOTES"]
    # busy: versions within the 10 s Window plus the one in force when it began.
    assert len(history.versions[b"busy"]) <= 12
    assert b"gone" not in history.versions
    assert history.versions[b"old"][0][0] == now - 60_000
    # Before the Window: empty; within it: the records in force then.
    assert state_at(engine, now - 30_000) == {}
    within = state_at(engine, now - 5_000)
    assert within["old"] == {"id": "old", "v": 1}
    assert within["busy"]["v"] == 49


def test_a_position_vector_reads_as_of_the_last_change_it_names() -> None:
    engine, feed = setup()
    now = int(time.time() * 1000) - 1000
    partition, first = feed.publish("a", {"id": "a", "v": 1}, now)
    feed.publish("a", {"id": "a", "v": 2}, now + 1)
    changelog_topic = feed.topic.changelog_topic
    query = SowQuery("QUOTES")
    vector = {(changelog_topic, partition): first}
    result = run_historical(engine, query, Point(vector=vector))
    assert [orjson.loads(e.data)["v"] for b in result.batches for e in b] == [1]
    # A partition the vector does not list contributes nothing.
    result = run_historical(engine, query, Point(vector={(changelog_topic, 1 - partition): 5}))
    assert result.stats is not None
    assert result.stats.records_returned == 0


def test_a_topic_without_history_ignores_the_bookmark() -> None:
    topic = SowTopic("PLAIN", keys=("/id",))
    topology = Topology({"PLAIN": topic})
    replica = Replica(topology, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(topology, replica)
    Feed(topic, replica).publish("a", {"id": "a"}, int(time.time() * 1000))
    result = run_historical(engine, SowQuery("PLAIN"), Point(timestamp_ms=0))
    assert result.stats is not None
    assert result.stats.records_returned == 1


def test_a_partition_read_again_restarts_the_history_of_its_records() -> None:
    engine, feed = setup()
    history = engine.replica.history.topics["QUOTES"]
    now = int(time.time() * 1000) - 5000
    partition, _ = feed.publish("a", {"id": "a", "v": 1}, now)
    feed.publish("a", {"id": "a", "v": 2}, now + 10)
    # The same partition from offset 0 again (a replaced log): no mixed-up versions.
    history.record(b"a", now + 20, partition, 0, history.versions[b"a"][0][3])
    assert [v[2] for v in history.versions[b"a"]] == [0]
    assert history.size == 1
