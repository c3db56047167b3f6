"""The query engine over a replica fed changelog records directly (no broker).

The replica's input is the log record protocol; ``LogRecord`` is a plain implementation
of it, so these tests exercise the same apply path the service runs.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.errors import ExpressionError, InvalidRequestError, UnknownTopicError
from processor.expr import FieldInput
from processor.keys import FieldKeyGenerator, partition_for
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.topology.model import HashIndexSpec, SowTopic, Topology
from tests.unit.log_records import LogRecord

ORDERS = SowTopic(
    "ORDERS",
    keys=("/orderId",),
    partitions=2,
    hash_indexes=(HashIndexSpec(("/region", "/desk")),),
    indexes=("/price",),
)
PARTS = SowTopic("PARTS", keys=("/id",))
TAGGED = SowTopic(
    "TAGGED",
    keys=("/id",),
    hash_indexes=(
        HashIndexSpec(("/tags",)),
        HashIndexSpec(("/flag",)),
        HashIndexSpec(("/n",)),
        HashIndexSpec(("/n", "/tags")),
    ),
)


class Feed:
    """Writes changelog records into a replica the way the processor would."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.offsets: dict[tuple[str, int], int] = {}

    def _next(self, topic: SowTopic, partition: int) -> int:
        key = (topic.changelog_topic, partition)
        self.offsets[key] = self.offsets.get(key, -1) + 1
        return self.offsets[key]

    def publish(self, topic: SowTopic, message: dict[str, Any], correlation: str = "") -> str:
        sow_key = FieldKeyGenerator(topic.domain, topic.keys)(message)
        raw = sow_key.encode()
        partition = partition_for(raw, topic.partitions)
        envelope = changelog.Envelope(
            topic.name,
            "json",
            topic.kafka_topic,
            partition,
            0,
            sow_key,
            orjson.dumps(message),
            1000,
            2000,
            None,
            correlation or None,
        )
        offset = self._next(topic, partition)
        self.replica.apply(
            [LogRecord(topic.changelog_topic, partition, offset, raw, changelog.encode(envelope))]
        )
        return sow_key

    def delete(self, topic: SowTopic, sow_key: str) -> None:
        raw = sow_key.encode()
        partition = partition_for(raw, topic.partitions)
        self.replica.apply(
            [LogRecord(topic.changelog_topic, partition, self._next(topic, partition), raw, None)]
        )


@pytest.fixture
def engine() -> tuple[QueryEngine, Feed]:
    topology = Topology({"ORDERS": ORDERS, "PARTS": PARTS, "TAGGED": TAGGED})
    replica = Replica(topology, tail=lambda: None)  # type: ignore[arg-type, return-value]
    return QueryEngine(topology, replica), Feed(replica)


def run(engine: QueryEngine, **fields: Any) -> tuple[list[dict[str, Any]], Any]:
    result = engine.run(SowQuery(**fields))
    records = [orjson.loads(e.data) for batch in result.batches for e in batch]
    return records, result.stats


def orders(feed: Feed) -> list[dict[str, Any]]:
    rows = [
        {
            "orderId": i,
            "region": "EU" if i % 2 else "US",
            "desk": "FX" if i % 3 else "RATES",
            "price": (i * 37) % 101,
            "qty": i % 5,
        }
        for i in range(60)
    ]
    for row in rows:
        feed.publish(ORDERS, row)
    return rows


def test_filter_plans_and_results(engine: tuple[QueryEngine, Feed]) -> None:
    query_engine, feed = engine
    rows = orders(feed)
    got, stats = run(query_engine, topic="ORDERS", filter="/price > 90")
    assert sorted(r["orderId"] for r in got) == sorted(
        r["orderId"] for r in rows if r["price"] > 90
    )
    assert stats.plan == "memo-scan"
    assert stats.topic_matches == 60
    got, stats = run(query_engine, topic="ORDERS", filter="/region = 'EU' AND /desk = 'FX'")
    assert stats.plan == "hash-index(/region, /desk)"
    expected = [r for r in rows if r["region"] == "EU" and r["desk"] == "FX"]
    assert stats.topic_matches == stats.matches == len(expected)
    got, stats = run(query_engine, topic="ORDERS", filter="/orderId = 7 OR /orderId = 8")
    assert stats.plan == "memo-scan"
    assert len(got) == 2
    got, stats = run(query_engine, topic="ORDERS", filter="/orderId IN (7, '8') AND /qty > 2")
    assert stats.plan == "key-index(/orderId)"
    assert stats.topic_matches == 2
    assert [r["orderId"] for r in got] == [8]


def test_indexes_follow_updates_deletes_and_resets(engine: tuple[QueryEngine, Feed]) -> None:
    query_engine, feed = engine
    orders(feed)
    key = feed.publish(ORDERS, {"orderId": 1, "region": "APAC", "desk": "FX", "price": 1})
    got, stats = run(query_engine, topic="ORDERS", filter="/region = 'APAC' AND /desk = 'FX'")
    assert [r["orderId"] for r in got] == [1]
    assert stats.plan.startswith("hash-index")
    feed.delete(ORDERS, key)
    got, _ = run(query_engine, topic="ORDERS", filter="/region = 'APAC' AND /desk = 'FX'")
    assert got == []
    got, _ = run(query_engine, topic="ORDERS", filter="/price = 1")
    assert got == []
    # A transient topic restarting empty resets one partition of the table.
    partition = 0
    feed.replica.apply(
        [LogRecord(ORDERS.changelog_topic, partition, 10_000, changelog.RESET_KEY, None)]
    )
    left, _ = run(query_engine, topic="ORDERS", filter="/price >= 0")
    key_of = FieldKeyGenerator(ORDERS.domain, ORDERS.keys)
    assert left
    assert all(partition_for(key_of(r).encode(), ORDERS.partitions) != partition for r in left)


def test_order_by_text_hint_top_and_skip(engine: tuple[QueryEngine, Feed]) -> None:
    query_engine, feed = engine
    for i, code in enumerate(["10", "9", "100", "abc", None]):
        feed.publish(PARTS, {"id": i, "code": code} if code else {"id": i})
    got, _ = run(query_engine, topic="PARTS", order_by="/code")
    assert [r.get("code") for r in got] == ["9", "10", "100", "abc", None]
    got, _ = run(query_engine, topic="PARTS", order_by="/code TEXT")
    assert [r.get("code") for r in got] == ["10", "100", "9", "abc", None]
    got, stats = run(query_engine, topic="PARTS", order_by="/code DESC", top_n=2, skip_n=1)
    assert [r.get("code") for r in got] == ["abc", "100"]
    assert (stats.matches, stats.records_returned) == (5, 2)
    result = query_engine.run(SowQuery(topic="PARTS", top_n=10))
    keys = [e.sow_key for batch in result.batches for e in batch]
    assert keys == sorted(keys, key=str.encode)
    assert len(keys) == 5


def test_aggregation_with_order_and_context_functions(engine: tuple[QueryEngine, Feed]) -> None:
    query_engine, feed = engine
    rows = orders(feed)
    got, stats = run(
        query_engine,
        topic="ORDERS",
        grouping="/desk",
        projection="/desk, AVG(/price) AS /avg, MAX(/qty) AS /stats/max_qty",
        order_by="/desk DESC",
    )
    assert [r["desk"] for r in got] == ["RATES", "FX"]
    for record in got:
        prices = [r["price"] for r in rows if r["desk"] == record["desk"]]
        assert record["avg"] == pytest.approx(sum(prices) / len(prices))
        assert record["stats"]["max_qty"] == 4
    assert stats.records_returned == 2
    key = feed.publish(PARTS, {"id": 99}, correlation="corr-1")
    got, _ = run(query_engine, topic="PARTS", filter=f"SOW_KEY() = '{key}'")
    assert got == [{"id": 99}]
    got, _ = run(query_engine, topic="PARTS", filter="CORRELATION_ID() = 'corr-1'")
    assert got == [{"id": 99}]


def test_regex_topics_and_batches(engine: tuple[QueryEngine, Feed]) -> None:
    query_engine, feed = engine
    orders(feed)
    feed.publish(PARTS, {"id": 1})
    result = query_engine.run(SowQuery(topic="^(ORDERS|PARTS)$", batch_size=7))
    sizes = [len(batch) for batch in result.batches]
    assert sum(sizes) == 61
    assert max(sizes) == 7
    topics = [e.topic for batch in result.batches for e in batch]
    assert topics == ["ORDERS"] * 60 + ["PARTS"]
    assert len(result.snapshot) == 3


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"topic": "NOPE"}, UnknownTopicError, "ORDERS, PARTS"),
        ({"topic": "^NOPE"}, UnknownTopicError, "no SOW topic matches"),
        ({"topic": "ORD(ERS"}, InvalidRequestError, "invalid regular expression in topic pattern"),
        ({"topic": "ORDERS", "filter": "/a ="}, ExpressionError, "position"),
        ({"topic": "ORDERS", "filter": "SUM(/a) > 1"}, ExpressionError, "SUM"),
        ({"topic": "ORDERS", "skip_n": 3}, InvalidRequestError, "requires top_n"),
        ({"topic": "ORDERS", "top_n": -1}, InvalidRequestError, "negative"),
        ({"topic": "ORDERS", "batch_size": 10_001}, InvalidRequestError, "1 to 10000"),
        ({"topic": "ORDERS", "projection": "/a"}, InvalidRequestError, "both"),
        (
            {"topic": "^ORD", "projection": "/a", "grouping": "/a"},
            InvalidRequestError,
            "one literal topic",
        ),
    ],
)
def test_invalid_queries(
    engine: tuple[QueryEngine, Feed], fields: dict[str, Any], error: type[Exception], says: str
) -> None:
    query_engine, _ = engine
    with pytest.raises(error, match=None) as failure:
        query_engine.run(SowQuery(**fields))
    assert says in str(failure.value), json.dumps(str(failure.value))


@pytest.mark.parametrize(
    "text",
    [
        "/tags = 'a'",
        "/tags IN ('b', 'zz')",
        "/flag = 1",
        "/flag = 0",
        "/n = 2",
        "/n = '02'",
        "/n IN (2.5, 3)",
        "/n = 2 AND /tags = 'c'",
    ],
)
def test_hash_index_plans_find_what_a_scan_finds(
    engine: tuple[QueryEngine, Feed], text: str
) -> None:
    query_engine, feed = engine
    for i, row in enumerate(
        [
            {"tags": ["a", "b"], "flag": True, "n": 2},
            {"tags": "a", "flag": False, "n": 2.0},
            {"tags": ["c"], "flag": 1, "n": "2"},
            {"tags": [], "n": "02"},
            {"tags": ["b", "c"], "flag": "true", "n": 2.5},
            {"tags": "zz", "n": 3},
            {"n": None},
        ]
    ):
        feed.publish(TAGGED, {"id": i, **row})
    indexed, stats = run(query_engine, topic="TAGGED", filter=text)
    assert stats.plan.startswith("hash-index")
    scanned, scan_stats = run(query_engine, topic="TAGGED", filter=f"({text}) OR 1 = 0")
    assert scan_stats.plan == "memo-scan"
    assert sorted(r["id"] for r in indexed) == sorted(r["id"] for r in scanned)
    assert scanned  # every row above matches something


def test_paging_over_a_pattern_keeps_topics_in_configuration_order(
    engine: tuple[QueryEngine, Feed],
) -> None:
    query_engine, feed = engine
    for i in range(5):
        feed.publish(ORDERS, {"orderId": i, "region": "EU", "desk": "FX", "price": i})
        feed.publish(PARTS, {"id": i})
    result = query_engine.run(SowQuery(topic="^(ORDERS|PARTS)$", top_n=7, skip_n=1))
    topics = [e.topic for batch in result.batches for e in batch]
    assert topics == ["ORDERS"] * 4 + ["PARTS"] * 3


def test_memo_indexes_built_outside_the_lock_catch_up_with_changes(
    engine: tuple[QueryEngine, Feed],
) -> None:
    query_engine, feed = engine
    orders(feed)
    table = feed.replica._tables["ORDERS"]
    field = FieldInput("/qty", ("qty",))
    snapshot = dict(table.envelopes)
    columns = table.memo_values([field], snapshot)
    # The applier goes on meanwhile: an update, a delete and an insert.
    feed.publish(ORDERS, {"orderId": 3, "region": "EU", "desk": "FX", "price": 1, "qty": 99})
    feed.delete(ORDERS, FieldKeyGenerator(ORDERS.domain, ORDERS.keys)({"orderId": 4}))
    feed.publish(ORDERS, {"orderId": 500, "region": "EU", "desk": "FX", "price": 1, "qty": 7})
    table.install_memo([field], snapshot, columns)
    memo = table.memo[("qty",)].values
    assert list(memo) == list(table.envelopes)  # every record, in record order
    fresh = table.memo_values([field], table.envelopes)[0]
    assert memo == fresh
    got, _ = run(query_engine, topic="ORDERS", filter="/qty = 99 OR /qty = 7", order_by="/qty")
    assert [r["orderId"] for r in got][-2:] == [500, 3]
