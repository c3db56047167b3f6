"""The PySpark reader against the real broker, a running kafka-sow and a local Spark.

One SparkSession (local[2]) and one kafka-sow serve the module (both take seconds to
start); each test owns its SOW topics. Results are compared with the query service
(``latest``), a dict model (``as_of``) and the raw logs read with confluent-kafka.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from processor.client.sow_client import SowClient
from processor.log import TopicSpec
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, TopicRef, Topology, ViewSpec
from processor.topology.view_topics import view_topic
from tests.integration.harness import namespaced, read_topic, running_sow

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
from pyspark.sql import SparkSession  # noqa: E402

from processor.spark import register  # noqa: E402

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)
HISTORY = SowTopic("HISTORY", keys=("/id",), partitions=2)
COMMANDS = SowTopic("COMMANDS", keys=("/id",), partitions=2)
STREAM = SowTopic("STREAM", keys=("/id",), partitions=2)
TOPICS = (ORDERS, HISTORY, COMMANDS, STREAM)
#: A view of ORDERS (issue 21): Spark reads it like a SOW topic.
REGIONS = ViewSpec(
    "REGIONS",
    "json",
    (TopicRef("ORDERS"),),
    ("/region AS /region", "SUM(/qty) AS /qty", "COUNT(/orderId) AS /n"),
    ("/region",),
)
ORDER_SCHEMA = "orderId bigint, region string, qty bigint, price double"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sow-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def product(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Topology, SowClient]]:
    unique = f"spark-{tmp_path_factory.getbasetemp().name}"
    topology = namespaced(unique, *TOPICS)
    regions = dataclasses.replace(REGIONS, kafka_topic=f"{unique}.REGIONS")
    topology = dataclasses.replace(
        topology,
        topics={**topology.topics, "REGIONS": view_topic(regions, topology.topics)},
        views={"REGIONS": regions},
    )
    state = tmp_path_factory.mktemp("state")
    with running_sow(bootstrap, topology, state, unique) as (_, client):
        yield topology, client


def publish(client: SowClient, topic: str, messages: list[dict[str, Any]]) -> list[Any]:
    """Publish in order; return the last position per partition."""
    last: dict[int, Any] = {}
    for message in messages:
        position = client.publish(topic, json.dumps(message).encode()).position
        last[position.partition] = position
    return list(last.values())


def sow_state(client: SowClient, topic: str, at: list[Any], **kwargs: Any) -> dict[str, Any]:
    records, _, _ = client.query(topic, min_position=at, **kwargs)
    return {r.sow_key: orjson.loads(r.data) for r in records}


def reader(spark: SparkSession, bootstrap: str, topology: Topology, topic: str) -> Any:
    t = topology.topic(topic)
    return (
        spark.read.format("sow")
        .option("bootstrap", bootstrap)
        .option("topic", topic)
        .option("kafka_topic", t.kafka_topic)
    )


def test_changelog_read_has_every_change_with_parsed_columns(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient]
) -> None:
    topology, client = product
    orders = [
        {"orderId": i, "region": ["eu", "us", "apac"][i % 3], "qty": i, "price": i * 1.5}
        for i in range(40)
    ]
    at = publish(client, "ORDERS", orders)
    publish(client, "ORDERS", [{**orders[3], "qty": 300}])
    client.delete("ORDERS", filter="/orderId = 5")
    sow_state(client, "ORDERS", at)  # read-your-writes: the changelog has them all
    df = reader(spark, bootstrap, topology, "ORDERS").option("message_schema", ORDER_SCHEMA).load()
    rows = df.orderBy("partition", "offset").collect()

    raw = read_topic(bootstrap, topology.topic("ORDERS").changelog_topic, partitions=2)
    changes = [r for r in raw if not (r.key() or b"").startswith(b"\x00")]  # type: ignore[attr-defined]
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (m.partition(), m.offset())
        for m in changes  # type: ignore[attr-defined]
    )
    by_change: dict[str, int] = {}
    for row in rows:
        by_change[row.change] = by_change.get(row.change, 0) + 1
    assert by_change == {"publish": 41, "delete": 1}
    updated = [r for r in rows if r.orderId == 3]
    assert [r.qty for r in updated] == [3, 300]
    first = updated[0]
    assert (first.topic, first.message_type) == ("ORDERS", "json")
    assert json.loads(first.message_text) == orders[3]
    assert first.log_topic == topology.topic("ORDERS").kafka_topic
    assert first.publish_time is not None
    assert first.apply_time >= first.publish_time
    deleted = next(r for r in rows if r.change == "delete")
    assert deleted.message is None
    assert deleted.log_offset is not None
    assert deleted.sow_key == next(r.sow_key for r in rows if r.orderId == 5)
    aggregate = {
        r.region: r.total
        for r in df.where("change = 'publish'")
        .groupBy("region")
        .sum("qty")
        .withColumnRenamed("sum(qty)", "total")
        .collect()
    }
    assert aggregate["eu"] == sum(o["qty"] for o in orders if o["region"] == "eu") + 300


def test_latest_equals_the_sow_query_after_updates_and_deletes(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient]
) -> None:
    topology, client = product
    rng = random.Random(8)
    for _ in range(5):
        batch = [
            {
                "orderId": rng.randrange(60),
                "region": rng.choice(["eu", "us"]),
                "qty": rng.randrange(100),
                "price": 1.0,
            }
            for _ in range(50)
        ]
        at = publish(client, "ORDERS", batch)
        client.delete("ORDERS", filter=f"/qty < {rng.randrange(20)}")
    client.delete("ORDERS", sow_keys=[next(iter(sow_state(client, "ORDERS", at)))])
    expected = sow_state(client, "ORDERS", at)
    latest = reader(spark, bootstrap, topology, "ORDERS").option("mode", "latest").load()
    got = {r.sow_key: json.loads(r.message_text) for r in latest.collect()}
    assert got == expected
    inferred = (
        reader(spark, bootstrap, topology, "ORDERS")
        .option("mode", "latest")
        .option("infer_schema", "true")
        .load()
    )
    assert dict(inferred.dtypes)["qty"] == "bigint"
    assert {r.sow_key: (r.orderId, r.region, r.qty) for r in inferred.collect()} == {
        k: (m["orderId"], m["region"], m["qty"]) for k, m in expected.items()
    }
    filtered = (
        reader(spark, bootstrap, topology, "ORDERS")
        .option("mode", "latest")
        .option("filter", "/region = 'eu' AND /qty > 50")
        .load()
    )
    got_eu = {r.sow_key: json.loads(r.message_text) for r in filtered.collect()}
    assert got_eu == sow_state(client, "ORDERS", at, filter="/region = 'eu' AND /qty > 50")
    # Spark push-down: a partition filter prunes, a message-column filter pre-selects.
    pushed = (
        reader(spark, bootstrap, topology, "ORDERS")
        .option("mode", "latest")
        .option("message_schema", ORDER_SCHEMA)
        .option("pushdown", "true")
        .load()
        .where("partition = 1 AND region = 'us'")
    )
    got_us = {r.sow_key for r in pushed.collect()}
    assert got_us == {
        r.sow_key
        for r in latest.collect()
        if r.partition == 1 and json.loads(r.message_text)["region"] == "us"
    }
    # A view reads like a SOW topic (its changelog): the query's records, once it follows.
    regions: dict[str, dict[str, Any]] = {}
    for message in expected.values():
        row = regions.setdefault(message["region"], {"region": message["region"], "qty": 0, "n": 0})
        row["qty"] += message["qty"]
        row["n"] += 1
    deadline = time.monotonic() + 30
    while {m["region"]: m for m in sow_state(client, "REGIONS", []).values()} != regions:
        assert time.monotonic() < deadline, (sow_state(client, "REGIONS", []), regions)
        time.sleep(0.1)
    view = reader(spark, bootstrap, topology, "REGIONS").option("mode", "latest").load()
    assert {r.sow_key: json.loads(r.message_text) for r in view.collect()} == sow_state(
        client, "REGIONS", []
    )


def test_as_of_equals_a_dict_model_at_ten_random_times(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient]
) -> None:
    topology, client = product
    rng = random.Random(10)
    model: dict[int, dict[str, Any]] = {}
    moments: list[tuple[int, dict[int, dict[str, Any]], Any]] = []
    for _ in range(10):
        batch = [
            {"id": rng.randrange(30), "v": rng.randrange(1000)} for _ in range(rng.randrange(1, 15))
        ]
        at = publish(client, "HISTORY", batch)
        for message in batch:
            model[message["id"]] = message
        if rng.random() < 0.5:
            victim = rng.randrange(30)
            client.delete("HISTORY", filter=f"/id = {victim}")
            model.pop(victim, None)
        _, begin, _ = client.query("HISTORY", min_position=at)
        # Between the state becoming visible and the next publish, the model holds: pick
        # a random time in that quiet window.
        quiet_from = int(time.time() * 1000)
        time.sleep(rng.uniform(0.01, 0.05))
        quiet_to = int(time.time() * 1000)
        moment = rng.randint(quiet_from, max(quiet_from, quiet_to - 1))
        moments.append((moment, dict(model), begin.snapshot))
    for moment, state, _ in moments:
        df = reader(spark, bootstrap, topology, "HISTORY").option("as_of", str(moment)).load()
        got = {json.loads(r.message_text)["id"]: json.loads(r.message_text) for r in df.collect()}
        assert got == state, moment
    # A query's bookmark (its position vector) as as_of gives the state that query saw.
    _, state, vector = moments[4]
    bookmark = json.dumps([[p.topic, p.partition, p.offset] for p in vector])
    df = reader(spark, bootstrap, topology, "HISTORY").option("as_of", bookmark).load()
    assert {json.loads(r.message_text)["id"] for r in df.collect()} == set(state)


def test_input_read_returns_every_command_in_log_order(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient]
) -> None:
    topology, client = product
    at = publish(client, "COMMANDS", [{"id": i % 7, "n": i} for i in range(30)])
    client.delete("COMMANDS", filter="/id = 2")
    sow_state(client, "COMMANDS", at)
    t = topology.topic("COMMANDS")
    raw = read_topic(bootstrap, t.kafka_topic, partitions=2)
    df = reader(spark, bootstrap, topology, "COMMANDS").option("read", "input").load()
    rows = df.collect()
    for partition in (0, 1):
        got = [(r.offset, r.message) for r in rows if r.partition == partition]
        want = [
            (m.offset(), m.value())  # type: ignore[attr-defined]
            for m in raw
            if m.partition() == partition  # type: ignore[attr-defined]
        ]
        assert sorted(got) == want
    assert sum(r.command == "publish" for r in rows) == 30
    assert {r.filter for r in rows if r.command == "delete_filter"} == {"/id = 2"}


def test_streaming_restart_from_checkpoint_sees_every_change_once(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient], tmp_path: Path
) -> None:
    topology, client = product
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def run_once() -> None:
        stream = (
            spark.readStream.format("sow")
            .option("bootstrap", bootstrap)
            .option("topic", "STREAM")
            .option("kafka_topic", topology.topic("STREAM").kafka_topic)
            .option("max_records_per_trigger", "7")
            .load()
            .select("sow_key", "change", "partition", "offset", "message_text")
        )
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .option("path", str(out))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    at = publish(client, "STREAM", [{"id": i % 9, "n": i} for i in range(25)])
    sow_state(client, "STREAM", at)
    run_once()
    at = publish(client, "STREAM", [{"id": i % 9, "n": i} for i in range(25, 40)])
    client.delete("STREAM", filter="/id = 1")
    sow_state(client, "STREAM", at)
    # The second run reads while publishing goes on; the third reads the rest.
    publisher = threading.Thread(
        target=publish, args=(client, "STREAM", [{"id": i % 9, "n": i} for i in range(40, 80)])
    )
    publisher.start()
    run_once()
    publisher.join()
    sow_state(client, "STREAM", [])
    at = publish(client, "STREAM", [{"id": 0, "n": 80}])
    sow_state(client, "STREAM", at)
    run_once()
    seen = [(r.partition, r.offset) for r in spark.read.parquet(str(out)).collect()]
    changelog = reader(spark, bootstrap, topology, "STREAM").load().collect()
    assert len(seen) == len(set(seen))
    assert sorted(seen) == sorted((r.partition, r.offset) for r in changelog)
    assert len(seen) >= 81


def test_corrupt_changelog_records_fail_clearly_or_become_rows(
    spark: SparkSession, bootstrap: str, unique: str
) -> None:
    topic = SowTopic("BROKEN", keys=("/id",), kafka_topic=f"{unique}.BROKEN")
    from processor.changelog import Envelope, encode

    good = encode(Envelope("BROKEN", "json", topic.kafka_topic, 0, 0, "k1", b'{"id":1}', 1, 1))
    ensure_topics(bootstrap, [TopicSpec(topic.changelog_topic, 1, {})])
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic.changelog_topic, good, b"k1")
    producer.produce(topic.changelog_topic, b"\x02garbage", b"k2")
    producer.produce(topic.changelog_topic, good.replace(b'{"id":1}', b'{"id":x}'), b"k3")
    assert producer.flush(10) == 0
    producer.close()

    def load(**options: str) -> Any:
        read = spark.read.format("sow").option("bootstrap", bootstrap).option("topic", "BROKEN")
        read = read.option("kafka_topic", topic.kafka_topic).option("message_schema", "id int")
        for name, value in options.items():
            read = read.option(name, value)
        return read.load()

    with pytest.raises(Exception, match=r"corrupt record .*BROKEN.sow-changelog\[0\]@1"):
        load().collect()
    rows = load(bad_records="column").orderBy("offset").collect()
    assert [r.offset for r in rows] == [0, 1, 2]
    assert rows[0]._corrupt_record is None
    assert rows[0].id == 1
    assert "not an envelope" in rows[1]._corrupt_record
    assert rows[1].message == b"\x02garbage"
    assert "does not decode" in rows[2]._corrupt_record
    assert rows[2].message == b'{"id":x}'


def test_example_pipeline_writes_state_and_region_aggregate(
    spark: SparkSession, bootstrap: str, product: tuple[Topology, SowClient], tmp_path: Path
) -> None:
    topology, client = product
    path = Path(__file__).parents[2] / "examples" / "spark_orders.py"
    spec = importlib.util.spec_from_file_location("spark_orders", path)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    at = publish(client, "ORDERS", [{"orderId": 1000, "region": "eu", "qty": 1, "price": 2.0}])
    expected = sow_state(client, "ORDERS", at)
    rows = example.run(spark, bootstrap, tmp_path, "ORDERS", topology.topic("ORDERS").kafka_topic)
    want: dict[str, tuple[int, int]] = {}
    for message in expected.values():
        orders, qty = want.get(message["region"], (0, 0))
        want[message["region"]] = (orders + 1, qty + message["qty"])
    assert {r.region: (r.orders, r.qty) for r in rows} == want
    assert spark.read.parquet(str(tmp_path / "state")).count() == len(expected)
