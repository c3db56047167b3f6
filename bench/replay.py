"""Replay and historical-query benchmark (issue 10, items 7-8).

* **Replay rate**: a changelog of N orders (1,000,000 by default, processor-shaped
  transactions on the broker, 2 partitions) is replayed from epoch (bookmark ``0``) into
  a subscription through the hub's replay path (the same one gRPC uses, without the
  transport): records/s read from the log, for an unfiltered subscription and one whose
  filter matches 10% (``/qty < 100``). Beside it, the raw read of the same offsets with
  the same reader (``KafkaRangeReader``, no decoding), the ceiling.
* **Historical query**: a History topic whose index holds H versions (1,000,000 by
  default: 100,000 records x 10 versions over the last hour), fed through the replica's
  apply path (no broker); the median time of a historical ``sow`` at 5 random times in
  the hour: the whole state, a 1% filter, and ``top_n=10`` by price; and ``top_n=10``
  by price at 5 times a minute or so ago.

Run from the repository root (uses ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the
embedded broker): ``PYTHONPATH=. python bench/replay.py [--records N] [--versions H]
[--json-out bench/results/replay.json]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import orjson

from bench.replica_restart import Filler
from processor import changelog
from processor.changelog.bookmarks import Point
from processor.keys import partition_for
from processor.log.broker import start_broker
from processor.log.kafka.ranges import KafkaRangeReader
from processor.log.kafka.readers import KafkaChangelogTail
from processor.query.historical import run_historical
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import MAX_MAX_BACKLOG, SubscribeRequest
from processor.topology.model import History, SowTopic, Topology
from tests.unit.log_records import LogRecord


def replay_rates(records: int) -> dict[str, object]:
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        bootstrap = broker.bootstrap_servers
        topic = SowTopic(
            "ORDERS", keys=("/orderId",), partitions=2, kafka_topic=f"bench-{time.time_ns()}"
        )
        topology = Topology({"ORDERS": topic})
        filler = Filler(bootstrap, topic)
        began = time.perf_counter()
        filler.write(0, records, report=True)
        fill_s = time.perf_counter() - began
        print(f"filled {records:,} records in {fill_s:.1f}s", file=sys.stderr)
        replica = Replica(
            topology,
            lambda: KafkaChangelogTail(bootstrap),
            reader=lambda: KafkaRangeReader(bootstrap),
        )
        replica.start_catching_up()
        thread = threading.Thread(target=replica.run, daemon=True)
        thread.start()
        engine = QueryEngine(topology, replica)
        engine.run(SowQuery("ORDERS", top_n=1, wait_for_catch_up=True, timeout_s=600))
        hub = SubscriptionHub(topology, replica, engine)
        results: dict[str, object] = {"records": records, "fill_s": round(fill_s, 2)}
        # The raw read: the same offsets, no decoding or matching.
        reader = KafkaRangeReader(bootstrap)
        began = time.perf_counter()
        raw = 0
        for partition in range(topic.partitions):
            end = reader.end_offset(topic.changelog_topic, partition)
            for batch in reader.read_range(topic.changelog_topic, partition, 0, end):
                raw += len(batch)
        raw_s = time.perf_counter() - began
        reader.close()
        results["raw_read_records_per_s"] = round(raw / raw_s)
        print(f"raw read: {raw:,} records in {raw_s:.2f}s", file=sys.stderr)
        for name, text in (("unfiltered", ""), ("filter_10pct", "/qty < 100")):
            request = SubscribeRequest(
                "ORDERS", filter=text, bookmark="0", max_backlog=MAX_MAX_BACKLOG
            )
            began = time.perf_counter()
            subscription, replay = hub.subscribe_replaying(request)
            delivered = sum(len(batch) for batch in replay)
            elapsed = time.perf_counter() - began
            hub.unsubscribe(subscription)
            results[name] = {
                "replayed": replay.replayed,
                "delivered": delivered,
                "seconds": round(elapsed, 2),
                "records_per_s": round(replay.replayed / elapsed),
            }
            print(
                f"replay {name}: {replay.replayed:,} records ({delivered:,} delivered) "
                f"in {elapsed:.2f}s = {replay.replayed / elapsed:,.0f}/s",
                file=sys.stderr,
            )
        hub.close()
        replica.stop()
        thread.join(30)
        return results
    finally:
        broker.stop()


def historical_queries(versions: int, keys: int) -> dict[str, object]:
    topic = SowTopic("HORDERS", keys=("/orderId",), partitions=2, history=History(86400.0, 0.0))
    topology = Topology({"HORDERS": topic})
    replica = Replica(topology, tail=lambda: None)  # type: ignore[arg-type, return-value]
    engine = QueryEngine(topology, replica)
    now = int(time.time() * 1000)
    first = now - 3_600_000
    step = 3_600_000 / versions
    offsets = [0, 0]
    began = time.perf_counter()
    chunk: list[LogRecord] = []
    for i in range(versions):
        key_number = i % keys
        message = {"orderId": key_number, "qty": (i * 7919) % 1000, "price": (i * 31) % 10_000}
        sow_key = str(key_number).encode()
        partition = partition_for(sow_key, 2)
        at = first + int(i * step)
        envelope = changelog.Envelope(
            "HORDERS", "json", "HORDERS", partition, i, sow_key.decode(),
            orjson.dumps(message), at, at, None, None,
        )  # fmt: skip
        encoded = changelog.encode(envelope)
        chunk.append(
            LogRecord(
                topic.changelog_topic, partition, offsets[partition], sow_key, encoded, None, at
            )
        )
        offsets[partition] += 1
        if len(chunk) == 10_000:
            replica.apply(chunk)
            chunk = []
    if chunk:
        replica.apply(chunk)
    load_s = time.perf_counter() - began
    held = replica.history.topics["HORDERS"].size
    print(f"history: {held:,} versions loaded in {load_s:.1f}s", file=sys.stderr)
    rng = random.Random(1)
    moments = [rng.randint(first, now) for _ in range(5)]
    results: dict[str, object] = {"versions": held, "records": keys, "load_s": round(load_s, 1)}
    recent = [now - rng.randint(30_000, 90_000) for _ in range(5)]
    for name, fields, times_asked in (
        ("whole_state", {"batch_size": 10_000}, moments),
        ("filter_1pct", {"filter": "/qty < 10", "batch_size": 10_000}, moments),
        ("top_10_by_price", {"order_by": "/price DESC", "top_n": 10}, moments),
        # A minute or so ago: most records have not changed since (their memo values
        # come from the live table).
        ("top_10_by_price_recent", {"order_by": "/price DESC", "top_n": 10}, recent),
    ):
        times, returned = [], 0
        for moment in times_asked:
            query = SowQuery("HORDERS", **fields)  # type: ignore[arg-type]
            start = time.perf_counter()
            result = run_historical(engine, query, Point(timestamp_ms=moment))
            times.append(time.perf_counter() - start)
            assert result.stats is not None
            returned = result.stats.records_returned
        median_ms = statistics.median(times) * 1000
        results[name] = {"median_ms": round(median_ms, 1), "records_returned": returned}
        print(
            f"historical {name}: median {median_ms:.0f} ms ({returned:,} records)", file=sys.stderr
        )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--versions", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="  %(name)s: %(message)s")
    results: dict[str, object] = {}
    results["historical"] = historical_queries(args.versions, args.keys)
    if not args.skip_replay:
        results["replay"] = replay_rates(args.records)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")


if __name__ == "__main__":
    main()
