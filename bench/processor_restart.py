"""Processor restart benchmark: how soon a restarted `sow process` applies new input.

1. ``--keys`` distinct orders are written to the input topic (keyed by SowKey) and a
   `sow process` applies them; it is stopped (SIGTERM).
2. **State intact**: `sow process` starts again; at the moment it is spawned one new
   message is written. Reported: seconds from process start to that message being
   committed (its changelog record visible, read_committed), and to the ready banner.
3. **Rebuild**: the state directory is deleted and `sow process` starts again. Reported:
   the restore rate its log states (changelog records replayed per second), the time
   from process start to ready, and to one message written after ready being applied
   (that write waits for the rebuild's background flush).

The machine's load average is recorded with each phase: on shared cores the figures
move with it.

    python bench/processor_restart.py --keys 200000 --json-out bench/results/processor_restart.json

``--assignment group`` restarts the processors as consumer-group members (the default of
`sow process`) instead of with static assignment (what `sow serve`'s child uses).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from processor.app import topic_specs
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology

PARTITIONS = 2


def say(text: str) -> None:
    sys.stderr.write(f"[restart-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


class Child:
    """`sow process` with its stderr collected."""

    def __init__(
        self, bootstrap: str, topology: Path, state: Path, group: str, assignment: str
    ) -> None:
        self.started = time.perf_counter()
        self.lines: list[tuple[float, str]] = []
        self.ready_at: float | None = None
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "processor.cli", "process"),
                *("--bootstrap-servers", bootstrap, "--topology", str(topology)),
                *("--state-dir", str(state), "--group-id", group),
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "SOW_ASSIGNMENT": assignment},
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr or ():
            now = time.perf_counter() - self.started
            self.lines.append((now, line))
            if "kafka-sow is ready" in line:
                self.ready_at = now

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)

    def log(self) -> str:
        return "".join(line for _, line in self.lines)


def produce(bootstrap: str, topic: SowTopic, first: int, count: int) -> None:
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(first, first + count):
        key = generator({"orderId": i}).encode()
        value = orjson.dumps({"orderId": i, "symbol": "IBM", "price": 100.0 + i % 50})
        while True:
            try:
                producer.produce(topic.kafka_topic, value, key, partition_for(key, PARTITIONS))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)


def wait_for_key(bootstrap: str, topic: SowTopic, order: int, timeout_s: float) -> float:
    """Wall time (perf_counter) when the order's changelog record became visible."""
    key = FieldKeyGenerator(topic.domain, topic.keys)({"orderId": order}).encode()
    partition = partition_for(key, PARTITIONS)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 3,
            # Short long-polls: the measurement must not wait on the default 500 ms.
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic.changelog_topic, partition, 0)])
    deadline = time.perf_counter() + timeout_s
    try:
        while time.perf_counter() < deadline:
            for message in consumer.consume(10000, 0.01):
                if message.error() is None and message.key() == key:
                    return time.perf_counter()
    finally:
        consumer.close()
    raise SystemExit(f"order {order} was not applied within {timeout_s}s")


def wait_ready(child: Child, timeout_s: float) -> float:
    deadline = time.perf_counter() + timeout_s
    while child.ready_at is None:
        if time.perf_counter() > deadline or child.process.poll() is not None:
            raise SystemExit(f"sow process did not get ready:\n{child.log()}")
        time.sleep(0.01)
    return child.ready_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--assignment",
        choices=("static", "group"),
        default="static",
        help="SOW_ASSIGNMENT of the restarted processors (sow serve's child uses static)",
    )
    args = parser.parse_args()
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    bootstrap = broker.bootstrap_servers
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "keys": args.keys,
        "broker": broker.description,
        "cpus": os.cpu_count(),
        "assignment": args.assignment,
        "command": " ".join(["python", *sys.argv]),
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            topic = SowTopic(
                "ORDERS", keys=("/orderId",), kafka_topic="restart.orders", partitions=PARTITIONS
            )
            ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter"))
            topology = work / "orders.yaml"
            topology.write_text(
                "topics:\n  - name: ORDERS\n    key: /orderId\n"
                f"    kafka_topic: {topic.kafka_topic}\n    partitions: {PARTITIONS}\n"
            )
            state = work / "state"
            say(f"writing {args.keys:,} orders and applying them")
            produce(bootstrap, topic, 0, args.keys)
            first = Child(bootstrap, topology, state, "bench-restart", args.assignment)
            wait_ready(first, 120)
            wait_for_key(bootstrap, topic, args.keys - 1, 300)
            first.stop()

            say("restart with state intact")
            load = os.getloadavg()[0]
            child = Child(bootstrap, topology, state, "bench-restart", args.assignment)
            produce(bootstrap, topic, args.keys, 1)
            applied = wait_for_key(bootstrap, topic, args.keys, 120) - child.started
            ready = wait_ready(child, 120)
            child.stop()
            results["state_intact"] = {
                "load_avg_1m": load,
                "ready_s": ready,
                "new_input_applied_s": applied,
            }
            say(f"  ready after {ready:.2f}s, new input applied after {applied:.2f}s")

            say("rebuild from the changelog")
            shutil.rmtree(state)
            load = os.getloadavg()[0]
            child = Child(bootstrap, topology, state, "bench-restart", args.assignment)
            ready = wait_ready(child, 600)
            produce(bootstrap, topic, args.keys + 1, 1)
            applied = wait_for_key(bootstrap, topic, args.keys + 1, 120) - child.started
            child.stop()
            replayed = [
                (int(m.group(1).replace(",", "")), float(m.group(2)))
                for _, line in child.lines
                if (
                    m := re.search(
                        r"restored ORDERS\[\d\]: ([\d,]+) changelog records replayed in ([\d.]+)s",
                        line,
                    )
                )
            ]
            records = sum(r for r, _ in replayed)
            seconds = sum(s for _, s in replayed)  # partitions restore one after another
            results["rebuild"] = {
                "load_avg_1m": load,
                "ready_s": ready,
                "new_input_applied_s": applied,
                "records": records,
                "restore_seconds": seconds,
                "records_per_s": records / seconds if seconds else None,
                "partitions": replayed,
            }
            say(f"  {results['rebuild']}")
    finally:
        broker.stop()
    print(json.dumps(results, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
