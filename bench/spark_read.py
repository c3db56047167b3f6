"""PySpark reader benchmark: rows per second from a changelog into a Spark DataFrame.

Fills a 2-partition changelog with N order records (1,000,000 by default; envelopes in
processor-shaped transactions of 10,000 records ending with PROGRESS records; every
order id appears ``N / keys`` times, so ``mode=latest`` keeps ``keys`` rows), then, in one
run on the same broker:

* **baseline**: one process reads both partitions with a plain confluent-kafka consumer
  and decodes every envelope (count), then also parses every message and sums ``qty``
  per ``region`` (aggregate);
* **spark count**: ``spark.read.format("sow")`` (every record column, envelope decoded,
  no message columns: the baseline count's work), ``.count()``;
* **spark aggregate**: the same read with the message parsed into five columns
  (``message_schema``), ``groupBy("region").sum("qty")``;
* **spark latest**: ``mode=latest`` (the current SOW), ``.count()``.

Spark runs ``local[2]`` (this machine has 2 cores); the session is started and warmed
with one untimed full read before timing. Each figure is the best of ``--runs``.

Run from the repository root (uses ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded
broker): ``PYTHONPATH=. python bench/spark_read.py [--records N] [--keys K] [--runs R]
[--json-out bench/results/spark_read.json]`` (about 3 minutes for 1,000,000).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from processor import changelog
from processor.changelog import CONTROL_PREFIX, PROGRESS_KEY, encode_progress
from processor.keys import FieldKeyGenerator, partition_for
from processor.log import TopicSpec
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.topology.model import SowTopic

TRANSACTION = 10_000
REGIONS = ("eu", "us", "apac", "latam")
SCHEMA = "orderId bigint, region string, qty bigint, price double, side string"


def order(i: int, keys: int) -> dict[str, object]:
    return {
        "orderId": i % keys,
        "region": REGIONS[i % len(REGIONS)],
        "qty": i % 1000,
        "price": (i * 7919 % 100_000) / 100,
        "side": "buy" if i % 2 else "sell",
    }


def fill(bootstrap: str, topic: SowTopic, records: int, keys: int) -> None:
    """Write the changelog as the processor does (transactions ending with PROGRESS)."""
    ensure_topics(bootstrap, [TopicSpec(topic.changelog_topic, topic.partitions, {})])
    log = KafkaTransactionalLog(bootstrap, f"bench-{topic.kafka_topic}")
    key_of = FieldKeyGenerator(topic.domain, topic.keys)
    writers = [
        changelog.EnvelopeWriter(topic.name, "json", topic.kafka_topic, p)
        for p in range(topic.partitions)
    ]
    log_next = [0] * topic.partitions
    now = int(time.time() * 1000)
    for start in range(0, records, TRANSACTION):
        log.begin()
        touched: set[int] = set()
        for i in range(start, min(start + TRANSACTION, records)):
            message = order(i, keys)
            sow_key = key_of(message).encode()
            partition = partition_for(sow_key, topic.partitions)
            envelope = writers[partition].encode(
                log_next[partition], sow_key, orjson.dumps(message), now, now
            )
            log_next[partition] += 1
            touched.add(partition)
            while True:
                try:
                    log.raw_produce(topic.changelog_topic, envelope, sow_key, partition)
                    break
                except BufferError:
                    log.drain()
        for partition in touched:
            progress = [(topic.kafka_topic, partition, log_next[partition])]
            log.produce_tracked(
                topic.changelog_topic, encode_progress(progress), PROGRESS_KEY, partition
            )
        log.commit()
    log.close()


def baseline(bootstrap: str, topic: SowTopic, aggregate: bool) -> tuple[int, dict[str, int]]:
    """Read both partitions in this process, decode every envelope (and, with
    ``aggregate``, every message); return the record count and qty per region."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-baseline",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic.changelog_topic, p, 0) for p in range(2)])
    count, ended = 0, 0
    totals: dict[str, int] = {}
    decode, loads = changelog.decode, orjson.loads
    while ended < topic.partitions:
        for message in consumer.consume(20_000, 1.0):
            if message.error() is not None:
                ended += 1
                continue
            if (message.key() or b"").startswith(CONTROL_PREFIX):
                continue
            envelope = decode(message.value())
            count += 1
            if aggregate:
                data = loads(envelope.data)
                totals[data["region"]] = totals.get(data["region"], 0) + data["qty"]
    consumer.close()
    return count, totals


def best(runs: int, job: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = job()
        times.append(time.perf_counter() - began)
    return min(times), result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    from processor.spark import register

    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = start_broker()
        print(f"broker: {broker.description}", file=sys.stderr, flush=True)
        bootstrap = broker.bootstrap_servers
    topic = SowTopic(
        "ORDERS", keys=("/orderId",), partitions=2, kafka_topic=f"bench-spark-{os.getpid()}"
    )
    try:
        began = time.perf_counter()
        fill(bootstrap, topic, args.records, args.keys)
        print(
            f"filled {args.records:,} records in {time.perf_counter() - began:.1f}s",
            file=sys.stderr,
        )
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def frame(**options: str) -> Any:
            read = spark.read.format("sow").option("bootstrap", bootstrap).option("topic", "ORDERS")
            read = read.option("kafka_topic", topic.kafka_topic)
            for name, value in options.items():
                read = read.option(name, value)
            return read.load()

        frame(message_schema=SCHEMA).count()  # warm up: Python workers start, modules import

        n = args.records
        results: dict[str, Any] = {"records": n, "keys": args.keys, "runs": args.runs}
        t, (count, _) = best(args.runs, lambda: baseline(bootstrap, topic, False))
        assert count == n, count
        results["baseline_count_rows_per_s"] = n / t
        t, (_, totals) = best(args.runs, lambda: baseline(bootstrap, topic, True))
        results["baseline_aggregate_rows_per_s"] = n / t
        t, count = best(args.runs, lambda: frame().count())
        assert count == n, count
        results["spark_count_rows_per_s"] = n / t
        t, rows = best(
            args.runs,
            lambda: (
                frame(message_schema=SCHEMA)
                .groupBy("region")
                .agg(f.sum("qty").alias("q"))
                .collect()
            ),
        )
        assert {r.region: r.q for r in rows} == totals, (rows, totals)
        results["spark_aggregate_rows_per_s"] = n / t
        t, count = best(args.runs, lambda: frame(mode="latest").count())
        assert count == min(args.keys, n), count
        results["spark_latest_s"] = t
        results["spark_count_vs_baseline"] = (
            results["spark_count_rows_per_s"] / results["baseline_count_rows_per_s"]
        )
        results["spark_aggregate_vs_baseline"] = (
            results["spark_aggregate_rows_per_s"] / results["baseline_aggregate_rows_per_s"]
        )
        spark.stop()
    finally:
        if broker is not None:
            broker.stop()
    print(json.dumps(results, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
