"""The full SOW query and sow_delete over gRPC, against the real broker and RocksDB.

One kafka-sow runs for the module (group joins take seconds); each test owns its topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import ServiceError, SowClient
from processor.topology.model import HashIndexSpec, SowTopic
from tests.integration.harness import namespaced, running_sow

PETS = SowTopic("PETS", keys=("/id",))
ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)
INDEXED = SowTopic("INDEXED", keys=("/id",), hash_indexes=(HashIndexSpec(("/region",)),))
PLAIN = SowTopic("PLAIN", keys=("/id",))
SORTED = SowTopic("SORTED", keys=("/id",))
DELETES = SowTopic("DELETES", keys=("/id",), partitions=2)
EVENTS_A = SowTopic("EVENTS_A", keys=("/id",))
EVENTS_B = SowTopic("EVENTS_B", keys=("/id",))
TOPICS = (PETS, ORDERS, INDEXED, PLAIN, SORTED, DELETES, EVENTS_A, EVENTS_B)


@pytest.fixture(scope="module")
def sow(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SowClient]:
    unique = f"queries-{tmp_path_factory.getbasetemp().name}"
    state = tmp_path_factory.mktemp("state")
    with running_sow(bootstrap, namespaced(unique, *TOPICS), state, unique) as (_, client):
        yield client


def publish_all(client: SowClient, topic: str, messages: list[dict[str, Any]]) -> list[Any]:
    """Publish messages; return the last position per partition (for read-your-writes)."""
    last: dict[int, Any] = {}
    for message in messages:
        position = client.publish(topic, json.dumps(message).encode()).position
        last[position.partition] = position
    return list(last.values())


def data(records: list[Any]) -> list[dict[str, Any]]:
    return [orjson.loads(r.data) for r in records]


def test_pagination_example_of_the_seed(sow: SowClient) -> None:
    at = publish_all(
        sow,
        "PETS",
        [
            {"id": 1, "name": "Bianca", "species": "cat"},
            {"id": 2, "name": "Gracie", "species": "cat"},
            {"id": 5, "name": "Snuggles", "species": "penguin"},
            {"id": 7, "name": "Percival", "species": "octopus"},
            {"id": 9, "name": "SparklyFangs", "species": "dragon"},
        ],
    )
    records, _, end = sow.query("PETS", min_position=at, top_n=2, skip_n=1, order_by="/id")
    assert [m["id"] for m in data(records)] == [2, 5]
    assert (end.matches, end.records_returned) == (5, 2)
    page3, _, _ = sow.query("PETS", top_n=2, skip_n=4, order_by="/id")
    assert [m["id"] for m in data(page3)] == [9]
    cats, _, _ = sow.query("PETS", filter="/species = 'cat'", order_by="/name DESC")
    assert [m["name"] for m in data(cats)] == ["Gracie", "Bianca"]


def test_multi_field_order_by_with_mixed_directions_and_nulls(sow: SowClient) -> None:
    rows = [
        {"id": 1, "desk": "b", "qty": 10},
        {"id": 2, "desk": "a", "qty": 5},
        {"id": 3, "desk": "b", "qty": 30},
        {"id": 4, "desk": "a"},  # qty NULL
        {"id": 5, "qty": 1},  # desk NULL
        {"id": 6, "desk": "a", "qty": 7},
    ]
    at = publish_all(sow, "SORTED", rows)
    records, _, _ = sow.query("SORTED", min_position=at, order_by="/desk ASC, /qty DESC")
    # desk ascending with NULL last; within a desk qty descending with NULL first.
    assert [m["id"] for m in data(records)] == [4, 6, 2, 3, 1, 5]
    records, _, _ = sow.query("SORTED", order_by="/desk DESC, /qty")
    assert [m["id"] for m in data(records)] == [5, 1, 3, 2, 6, 4]


def test_aggregated_query_equals_python(sow: SowClient) -> None:
    regions = ["EU", "US", "APAC"]
    orders = [
        {"orderId": i, "region": regions[i % 3], "price": 10 + i % 7, "qty": 1 + i % 4}
        for i in range(300)
    ]
    at = publish_all(sow, "ORDERS", orders)
    records, _, end = sow.query(
        "ORDERS",
        min_position=at,
        grouping="/region",
        projection="/region, SUM(/price * /qty) AS /total, COUNT(/orderId) AS /orders",
        batch_size=1,
    )
    expected: dict[str, dict[str, int]] = {}
    for o in orders:
        group = expected.setdefault(o["region"], {"total": 0, "orders": 0})
        group["total"] += o["price"] * o["qty"]
        group["orders"] += 1
    got = {m["region"]: {"total": m["total"], "orders": m["orders"]} for m in data(records)}
    assert got == expected
    assert end.records_returned == 3
    filtered, _, _ = sow.query(
        "ORDERS", filter="/qty >= 3", grouping="/region", projection="/region, COUNT(/qty) AS /n"
    )
    assert {m["region"]: m["n"] for m in data(filtered)} == {
        r: sum(1 for o in orders if o["region"] == r and o["qty"] >= 3) for r in regions
    }


def test_hash_index_plan_touches_only_matching_records(sow: SowClient) -> None:
    rows = [{"id": i, "region": ["EU", "US", "APAC", "LATAM"][i % 4], "v": i} for i in range(200)]
    at = publish_all(sow, "INDEXED", rows)
    publish_all(sow, "PLAIN", rows)
    at += publish_all(sow, "PLAIN", [rows[0]])
    query = "/region = 'EU'"
    indexed, _, end = sow.query("INDEXED", min_position=at, filter=query)
    assert end.plan == "hash-index(/region)"
    assert end.topic_matches == end.matches == 50
    plain, _, plain_end = sow.query("PLAIN", filter=query)
    assert plain_end.plan == "memo-scan"
    assert plain_end.topic_matches == 200
    assert sorted(m["id"] for m in data(indexed)) == sorted(m["id"] for m in data(plain))
    both, _, end = sow.query("INDEXED", filter="/region IN ('EU', 'US') AND /v < 10")
    assert end.plan == "hash-index(/region)"
    assert end.topic_matches == 100
    assert sorted(m["id"] for m in data(both)) == [0, 1, 4, 5, 8, 9]
    by_key, _, end = sow.query("INDEXED", filter="/id IN (3, 5, 999)")
    assert end.plan == "key-index(/id)"
    assert end.topic_matches == 2
    assert sorted(m["id"] for m in data(by_key)) == [3, 5]
    # The index follows updates: id 0 moves from EU to US.
    at = publish_all(sow, "INDEXED", [{"id": 0, "region": "US", "v": 0}])
    eu, _, _ = sow.query("INDEXED", min_position=at, filter=query)
    assert 0 not in {m["id"] for m in data(eu)}
    assert len(eu) == 49


def test_regex_topics_query_in_configuration_order(sow: SowClient) -> None:
    at = publish_all(sow, "EVENTS_B", [{"id": 1, "t": "b"}])
    at += publish_all(sow, "EVENTS_A", [{"id": 1, "t": "a"}, {"id": 2, "t": "a"}])
    records, begin, end = sow.query("^EVENTS_", min_position=at)
    assert [r.topic for r in records] == ["EVENTS_A", "EVENTS_A", "EVENTS_B"]
    assert begin.topic == "^EVENTS_"
    assert len(begin.snapshot) == 2
    assert end.plan == "EVENTS_A: all-records; EVENTS_B: all-records"
    as_text, _, _ = sow.query("^EVENTS_", text_form=True, top_n=2, skip_n=1)
    assert [(r.topic, orjson.loads(r.data)["t"]) for r in as_text] == [
        ("EVENTS_A", "a"),
        ("EVENTS_B", "b"),
    ]


def test_sow_delete_by_filter_data_and_keys(sow: SowClient) -> None:
    rows = [{"id": i, "status": "open" if i % 3 else "done", "qty": i} for i in range(30)]
    at = publish_all(sow, "DELETES", rows)
    records, _, _ = sow.query("DELETES", min_position=at)
    assert len(records) == 30
    reply = sow.delete("DELETES", filter="/status = 'done'")
    assert reply.records_deleted == 10
    assert len(reply.positions) == 2  # one command per partition
    left, _, _ = sow.query("DELETES")
    assert sorted(m["id"] for m in data(left)) == [i for i in range(30) if i % 3]
    reply = sow.delete("DELETES", data=b'{"id": 1, "status": "anything"}', text_form=True)
    assert reply.records_deleted == 1
    key = next(r.sow_key for r in left if orjson.loads(r.data)["id"] == 2)
    assert sow.delete("DELETES", [key]).records_deleted == 1
    assert sow.delete("DELETES", filter="/qty > 1000").records_deleted == 0
    assert sow.delete("DELETES", filter="1=1").records_deleted == 18
    empty, _, end = sow.query("DELETES")
    assert empty == []
    assert end.matches == 0


@pytest.mark.parametrize(
    ("request_fields", "code", "says"),
    [
        ({"filter": "/price > > 1"}, "INVALID_ARGUMENT", "position 9"),
        ({"filter": "NOSUCH(/x) = 1"}, "INVALID_ARGUMENT", "NOSUCH"),
        ({"skip_n": 1}, "INVALID_ARGUMENT", "skip_n (1) requires top_n"),
        ({"batch_size": 10001}, "INVALID_ARGUMENT", "use 1 to 10000"),
        ({"order_by": "/a SIDEWAYS"}, "INVALID_ARGUMENT", "SIDEWAYS"),
        ({"grouping": "/a"}, "INVALID_ARGUMENT", "both projection and grouping"),
    ],
)
def test_bad_queries_get_clear_errors(
    sow: SowClient, request_fields: dict[str, Any], code: str, says: str
) -> None:
    with pytest.raises(ServiceError) as failure:
        sow.query("PETS", **request_fields)
    assert failure.value.code == code
    assert says in failure.value.details


def test_unknown_topic_and_bad_delete_change_nothing(sow: SowClient) -> None:
    with pytest.raises(ServiceError) as failure:
        sow.query("NO_SUCH_TOPIC")
    assert failure.value.code == "NOT_FOUND"
    assert "PETS" in failure.value.details
    at = publish_all(sow, "PETS", [{"id": 100, "name": "Rex", "species": "dog"}])
    before, _, _ = sow.query("PETS", min_position=at)
    with pytest.raises(ServiceError) as failure:
        sow.delete("PETS", filter="/species = 'dog' AND")
    assert failure.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ServiceError) as failure:
        sow.delete("PETS", ["1"], filter="1=1")
    assert "exactly one selector" in failure.value.details
    after, _, _ = sow.query("PETS")
    assert len(after) == len(before)


@pytest.mark.smoke
def test_indexes_survive_restart(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, INDEXED)
    rows = [{"id": i, "region": "EU" if i % 2 else "US"} for i in range(40)]
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        at = publish_all(client, "INDEXED", rows)
        at += publish_all(client, "INDEXED", [{"id": 1, "region": "US"}])
        records, _, end = client.query("INDEXED", min_position=at, filter="/region = 'EU'")
        assert end.plan == "hash-index(/region)"
        assert len(records) == 19
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        at = publish_all(client, "INDEXED", [{"id": 3, "region": "US"}])
        records, _, end = client.query("INDEXED", min_position=at, filter="/region = 'EU'")
        assert end.plan == "hash-index(/region)"
        assert end.topic_matches == 18
        assert sorted(m["id"] for m in data(records)) == [i for i in range(5, 40, 2)]
