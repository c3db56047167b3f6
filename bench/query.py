"""Query benchmarks: filter-scan throughput, index lookup latency, gRPC query latency.

The query service's read replica is filled with N orders (1,000,000 by default) through
its changelog apply path (records built in process, no broker: queries read only the
replica), then:

* **filter scan**: ``QueryEngine.run`` with selective filters over every record (plan
  ``memo-scan``), as records tested per second; compared with the naive baseline of
  decoding each stored message (``json.loads``, and ``orjson.loads``) and testing a
  Python predicate;
* **index lookups**: in-process latency (p50/p99) of a key-index query (``/orderId = n``)
  and a hash-index query (``/clientId = 'Cn'``, 10 records);
* **gRPC**: latency (p50/p99) of SowQuery over loopback for a 1-record and a 1,000-record
  result (a hash index on ``/batch`` holds 1,000 records per value).

Run: ``python bench/query.py [--records N] [--json-out bench/results/query.json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson

from processor import changelog
from processor.client.sow_client import SowClient
from processor.keys import FieldKeyGenerator, partition_for
from processor.log import LogWriter
from processor.log.memory.broker import MemoryRecord
from processor.publish.gateway import Gateway
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.server.service import start_server
from processor.topology.model import HashIndexSpec, SowTopic, Topology

ORDERS = SowTopic(
    "ORDERS",
    keys=("/orderId",),
    partitions=2,
    hash_indexes=(HashIndexSpec(("/clientId",)), HashIndexSpec(("/batch",))),
)
REGIONS = ("EU", "US", "APAC", "LATAM")

#: (filter, the same predicate in plain Python over the decoded message)
SCANS: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
    ("/price > 999", lambda m: m["price"] > 999),
    ("/symbol = 'SYM42'", lambda m: m["symbol"] == "SYM42"),
    ("/region = 'EU' AND /qty > 990", lambda m: m["region"] == "EU" and m["qty"] > 990),
    ("/price * /qty > 998000", lambda m: m["price"] * m["qty"] > 998000),
]


def order(i: int) -> dict[str, Any]:
    return {
        "orderId": i,
        "clientId": f"C{i % 100_000}",
        "batch": i // 1000,
        "symbol": f"SYM{i % 500}",
        "region": REGIONS[i % 4],
        "price": (i * 7919 % 100_000) / 100,
        "qty": i % 1000,
        "side": "buy" if i % 2 else "sell",
    }


def fill(records: int) -> tuple[Replica, list[bytes]]:
    topology = Topology({"ORDERS": ORDERS})
    replica = Replica(topology, tail=cast(Any, None))
    key_of = FieldKeyGenerator(ORDERS.domain, ORDERS.keys)
    writers = [
        changelog.EnvelopeWriter("ORDERS", "json", "ORDERS", p) for p in range(ORDERS.partitions)
    ]
    offsets = [0] * ORDERS.partitions
    payloads: list[bytes] = []
    batch: list[Any] = []
    started = time.perf_counter()
    for i in range(records):
        message = orjson.dumps(order(i))
        payloads.append(message)
        sow_key = key_of(order(i)).encode()
        partition = partition_for(sow_key, ORDERS.partitions)
        envelope = writers[partition].encode(i, sow_key, message, 1, 1)
        batch.append(
            MemoryRecord(
                ORDERS.changelog_topic, partition, offsets[partition], sow_key, envelope, None, 0
            )
        )
        offsets[partition] += 1
        if len(batch) == 10_000:
            replica.apply(batch)
            batch = []
            if (i + 1) % 200_000 == 0:
                print(f"  loaded {i + 1:,} records", file=sys.stderr)
    replica.apply(batch)
    elapsed = time.perf_counter() - started
    print(
        f"  loaded {records:,} records in {elapsed:.1f}s (hash indexes kept current)",
        file=sys.stderr,
    )
    return replica, payloads


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
    }


def timed(function: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    replica, payloads = fill(args.records)
    engine = QueryEngine(replica.topology, replica)
    results: dict[str, Any] = {"records": args.records, "scans": [], "lookups": {}, "grpc": {}}
    gc.collect()

    print(f"\nfilter scan over {args.records:,} records (records tested per second)")
    print(f"{'filter':<34} {'kafka-sow':>12} {'orjson+py':>12} {'json+py':>12} {'matches':>8}")
    for text, predicate in SCANS:
        engine.run(SowQuery("ORDERS", filter=text, batch_size=10_000))  # builds memo indexes
        ours = min(timed(lambda t=text: engine.run(SowQuery("ORDERS", filter=t)), 3))
        matches = engine.run(SowQuery("ORDERS", filter=text)).stats
        fast = min(timed(lambda p=predicate: [m for m in payloads if p(orjson.loads(m))], 1))
        slow = min(timed(lambda p=predicate: [m for m in payloads if p(json.loads(m))], 1))
        row = {
            "filter": text,
            "kafka_sow_per_s": args.records / ours,
            "orjson_baseline_per_s": args.records / fast,
            "json_baseline_per_s": args.records / slow,
            "matches": matches.matches if matches else 0,
        }
        results["scans"].append(row)
        print(
            f"{text:<34} {row['kafka_sow_per_s']:>12,.0f} {row['orjson_baseline_per_s']:>12,.0f}"
            f" {row['json_baseline_per_s']:>12,.0f} {row['matches']:>8}"
        )

    rng = random.Random(7)
    print("\nin-process index lookups (QueryEngine.run, 2,000 queries each)")
    for name, make in (
        ("key-index /orderId = n", lambda: f"/orderId = {rng.randrange(args.records)}"),
        ("hash-index /clientId = 'Cn'", lambda: f"/clientId = 'C{rng.randrange(100_000)}'"),
    ):
        samples = timed(lambda m=make: engine.run(SowQuery("ORDERS", filter=m())), 2000)
        results["lookups"][name] = percentiles(samples)
        figures = results["lookups"][name]
        print(f"{name:<34} p50 {figures['p50_ms']:.3f} ms   p99 {figures['p99_ms']:.3f} ms")

    gateway = Gateway(replica.topology, cast(LogWriter, None), replica)
    server, address = start_server(engine, gateway, "127.0.0.1:0")
    try:
        with SowClient(address) as client:
            print("\ngRPC SowQuery over loopback (1,000 queries each)")
            batches = args.records // 1000
            for name, make, size in (
                ("1 record", lambda: {"filter": f"/orderId = {rng.randrange(args.records)}"}, 1),
                (
                    "1,000 records",
                    lambda: {"filter": f"/batch = {rng.randrange(batches)}", "batch_size": 1000},
                    1000,
                ),
            ):

                def call(m: Callable[[], dict[str, Any]] = make, n: int = size) -> None:
                    records, _, _ = client.query("ORDERS", **m())
                    assert len(records) == n, len(records)

                for _ in range(50):
                    call()
                samples = timed(call, 1000)
                results["grpc"][name] = percentiles(samples)
                figures = results["grpc"][name]
                print(f"{name:<34} p50 {figures['p50_ms']:.3f} ms   p99 {figures['p99_ms']:.3f} ms")
    finally:
        server.stop(grace=1)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
