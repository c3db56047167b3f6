"""Replica restart benchmark: how soon a restarted query service serves a complete SOW.

Fills a changelog on the broker with N records (1,000,000 by default) the way the
processor writes it (envelopes in Kafka transactions of 10,000 records, each ending with
a PROGRESS record per partition), then times, from ``Replica`` construction until it
has caught up and served a complete query (every record present, the last one written
found by a key query):

* **replay**: no snapshot, every changelog record replayed from offset 0;
* **snapshot**: a snapshot written by the previous run is loaded and the changelogs are
  tailed from its positions (then 1,000 records written after the snapshot are read).

Also measured: writing the snapshot when the replica stops, and the live path's
visibility latency (a committed one-record transaction until the replica's listener
sees it), p50/p99.

Run from the repository root (uses ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded
broker): ``PYTHONPATH=. python bench/replica_restart.py [--records N] [--runs R]
[--json-out bench/results/replica_restart.json]`` (about 2 minutes for 1,000,000).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from processor import changelog
from processor.changelog import PROGRESS_KEY, encode_progress
from processor.changelog.events import ChangeEvent
from processor.keys import FieldKeyGenerator, partition_for
from processor.log import TopicSpec
from processor.log.broker import start_broker
from processor.log.kafka.readers import KafkaChangelogTail
from processor.log.kafka.settings import ensure_topics
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.topology.model import HashIndexSpec, SowTopic, Topology

TRANSACTION = 10_000


def order(i: int) -> dict[str, object]:
    return {
        "orderId": i,
        "clientId": f"C{i % 100_000}",
        "symbol": f"SYM{i % 500}",
        "price": (i * 7919 % 100_000) / 100,
        "qty": i % 1000,
        "side": "buy" if i % 2 else "sell",
    }


class Filler:
    """Writes orders to the changelog in processor-shaped transactions."""

    def __init__(self, bootstrap: str, topic: SowTopic) -> None:
        ensure_topics(bootstrap, [TopicSpec(topic.changelog_topic, topic.partitions, {})])
        self.topic = topic
        self.log = KafkaTransactionalLog(bootstrap, f"bench-{topic.kafka_topic}")
        self.key_of = FieldKeyGenerator(topic.domain, topic.keys)
        self.writers = [
            changelog.EnvelopeWriter(topic.name, "json", topic.kafka_topic, p)
            for p in range(topic.partitions)
        ]
        self.log_next = [0] * topic.partitions

    def write(self, first: int, count: int, report: bool = False) -> bytes:
        """Orders ``first`` .. ``first + count - 1``; returns the last one's SowKey."""
        topic, produce, now = self.topic, self.log.raw_produce, int(time.time() * 1000)
        sow_key = b""
        for start in range(first, first + count, TRANSACTION):
            self.log.begin()
            touched: set[int] = set()
            for i in range(start, min(start + TRANSACTION, first + count)):
                message = order(i)
                sow_key = self.key_of(message).encode()
                partition = partition_for(sow_key, topic.partitions)
                envelope = self.writers[partition].encode(
                    self.log_next[partition], sow_key, orjson.dumps(message), now, now
                )
                self.log_next[partition] += 1
                touched.add(partition)
                while True:
                    try:
                        produce(topic.changelog_topic, envelope, sow_key, partition)
                        break
                    except BufferError:
                        self.log.drain()
            for partition in touched:
                progress = [(topic.kafka_topic, partition, self.log_next[partition])]
                self.log.produce_tracked(
                    topic.changelog_topic, encode_progress(progress), PROGRESS_KEY, partition
                )
            self.log.commit()
            if report and (start - first) % 200_000 == 0:
                print(f"  written {start - first + TRANSACTION:,} records", file=sys.stderr)
        return sow_key


def serve_complete(
    topology: Topology, bootstrap: str, snapshots: Path, records: int, last: bytes
) -> tuple[float, Replica, threading.Thread]:
    """Seconds from Replica construction to caught up and a complete query served."""
    topic = next(iter(topology.topics.values()))
    began = time.perf_counter()
    replica = Replica(topology, lambda: KafkaChangelogTail(bootstrap), snapshot_dir=snapshots)
    replica.start_catching_up()
    thread = threading.Thread(target=replica.run, daemon=True)
    thread.start()
    engine = QueryEngine(topology, replica)
    result = engine.run(
        SowQuery(topic.name, sow_keys=(last.decode(),), wait_for_catch_up=True, timeout_s=600)
    )

    def count(tables: list[SowTable]) -> int:
        return len(tables[0])

    held = replica.read([topic], count)[0]
    elapsed = time.perf_counter() - began
    assert result.stats is not None
    assert result.stats.records_returned == 1, result.stats
    assert held == records, f"{held:,} records held, {records:,} expected"
    return elapsed, replica, thread


def stop(replica: Replica, thread: threading.Thread) -> float:
    began = time.perf_counter()
    replica.stop()
    thread.join()
    return time.perf_counter() - began


def visibility(replica: Replica, filler: Filler, first: int, samples: int) -> list[float]:
    """Milliseconds from a one-record transaction's commit to the listener seeing it."""
    seen = threading.Event()

    def listener(events: Sequence[ChangeEvent]) -> None:
        seen.set()

    handle = replica.listen(listener)
    latencies = []
    try:
        for i in range(samples):
            seen.clear()
            filler.write(first + i, 1)
            committed = time.perf_counter()
            assert seen.wait(10), "change not seen within 10s"
            latencies.append((time.perf_counter() - committed) * 1000)
            time.sleep(0.01)
    finally:
        handle.close()
    return latencies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--hash-index", action="store_true", help="give the topic a hash index on /clientId"
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="  %(name)s: %(message)s")
    logging.getLogger("processor.log.kafka").setLevel(logging.WARNING)
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        bootstrap = broker.bootstrap_servers
        topic = SowTopic(
            "ORDERS",
            keys=("/orderId",),
            partitions=2,
            kafka_topic=f"bench-{time.time_ns()}",
            hash_indexes=(HashIndexSpec(("/clientId",)),) if args.hash_index else (),
        )
        topology = Topology({"ORDERS": topic})
        filler = Filler(bootstrap, topic)
        began = time.perf_counter()
        last = filler.write(0, args.records, report=True)
        fill_s = time.perf_counter() - began
        print(f"filled {args.records:,} records in {fill_s:.1f}s", file=sys.stderr)
        total = args.records
        results: dict[str, object] = {
            "records": args.records,
            "hash_indexes": [list(h.keys) for h in topic.hash_indexes],
            "fill_s": round(fill_s, 2),
        }
        replay, restart, snapshot_write = [], [], []
        with tempfile.TemporaryDirectory(prefix="sow-replica-bench-") as scratch:
            for run in range(args.runs):
                snapshots = Path(scratch) / f"replay-{run}"
                elapsed, replica, thread = serve_complete(
                    topology, bootstrap, snapshots, total, last
                )
                replay.append(elapsed)
                print(f"replay from offset 0: {elapsed:.2f}s", file=sys.stderr)
                snapshot_write.append(stop(replica, thread))
            # The snapshot of the last replay, then changes after it.
            last = filler.write(total, 1000)
            total += 1000
            for _ in range(args.runs):
                elapsed, replica, thread = serve_complete(
                    topology, bootstrap, snapshots, total, last
                )
                restart.append(elapsed)
                print(f"snapshot restart: {elapsed:.2f}s", file=sys.stderr)
                if _ == args.runs - 1:
                    latencies = visibility(replica, filler, total, 200)
                    total += 200
                stop(replica, thread)
            size = (snapshots / "replica.snapshot").stat().st_size
        results.update(
            {
                "replay_from_offset_0_s": [round(x, 2) for x in replay],
                "snapshot_restart_s": [round(x, 2) for x in restart],
                "snapshot_write_on_stop_s": [round(x, 2) for x in snapshot_write],
                "snapshot_bytes": size,
                "visibility_ms": {
                    "p50": round(statistics.median(latencies), 2),
                    "p99": round(statistics.quantiles(latencies, n=100)[98], 2),
                    "samples": len(latencies),
                },
                "target": "complete query within 3 s of a restart",
                # The machine is shared: its load says how much the figures are disturbed.
                "load_average_1m_at_end": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
            }
        )
        print(json.dumps(results, indent=2))
        if args.json_out:
            args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
