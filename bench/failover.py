"""Failover benchmark: how soon a surviving processor serves the partitions of one that
left, with and without a standby store.

Per mode (``off``, ``all``), on fresh topics with 4 partitions:

1. Two group-mode processors (threads of this process, each with its own RocksDB state
   directory) share the partitions, 2 each; the survivor runs with ``standby=<mode>``.
2. ``--keys`` distinct orders are written and applied (with a standby, until it has
   caught up with the other processor's changelogs).
3. The other processor stops (it leaves the group at once, as on SIGTERM; a SIGKILLed
   one adds the session timeout, 6 s, to both modes). At that moment one new order per
   partition is written.

Reported per mode: changelog records the survivor's takeover replayed, seconds from the
death to the survivor owning all 4 partitions, and to the new orders on the taken
partitions being applied (the failover time). The load average is printed with each row:
on shared cores the figures move with it.

    PYTHONPATH=. python bench/failover.py --keys 200000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
from confluent_kafka import Producer

from processor.app import build_processor, topic_specs
from processor.config import Settings
from processor.engine.processor import Processor
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology

PARTITIONS = 4


def say(text: str) -> None:
    sys.stderr.write(f"[failover-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 300.0) -> float:
    """Poll ``condition`` every 2 ms; return the ``perf_counter`` when it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return time.perf_counter()
        except RuntimeError:  # a dict the poll loop changed while we read it
            pass
        time.sleep(0.002)
    raise SystemExit(f"timed out waiting for {what}")


def produce(bootstrap: str, topic: SowTopic, ids: range, round_: int) -> list[int]:
    """One order per id; return the partition of each."""
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    partitions = []
    for i in ids:
        sow_key = generator({"id": i}).encode()
        partition = partition_for(sow_key, topic.partitions)
        value = orjson.dumps({"id": i, "round": round_, "price": i % 1000})
        while True:
            try:
                producer.produce(topic.kafka_topic, value, sow_key, partition)
                break
            except BufferError:
                producer.poll(0.05)
        partitions.append(partition)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)
    return partitions


def one_per_partition(topic: SowTopic) -> range:
    """Ids, starting past any load, that cover every partition."""
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    start = 10**9
    seen: set[int] = set()
    i = start
    while len(seen) < topic.partitions:
        seen.add(partition_for(generator({"id": i}).encode(), topic.partitions))
        i += 1
    return range(start, i)


class Running:
    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self.thread = threading.Thread(target=processor.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.processor.stop()
        self.thread.join(60)


def run_mode(bootstrap: str, keys: int, mode: str, root: Path) -> dict[str, float]:
    unique = f"fo-{mode}-{uuid.uuid4().hex[:6]}"
    topic = SowTopic("ORDERS", keys=("/id",), kafka_topic=f"{unique}.orders", partitions=PARTITIONS)
    topology = Topology({"ORDERS": topic})
    dead_letters = f"{unique}.dead-letter"
    ensure_topics(bootstrap, topic_specs(topology, dead_letters))

    def member(name: str, standby: str) -> Processor:
        settings = Settings(
            bootstrap_servers=bootstrap,
            state_dir=root / unique / name,
            group_id=f"{unique}-group",
            instance_id=name,
            dead_letter_topic=dead_letters,
            standby=standby,
        )
        return build_processor(settings, bootstrap, topology)

    leaving, survivor = member("a", "off"), member("b", mode)
    runs = [Running(leaving), Running(survivor)]
    try:
        wait_for(
            "the members to share the partitions",
            lambda: len(leaving.owned_partitions) == 2 and len(survivor.owned_partitions) == 2,
            120,
        )
        taken = set(leaving.owned_partitions)
        say(f"{mode}: writing {keys:,} orders")
        began = time.perf_counter()
        produce(bootstrap, topic, range(keys), 1)
        wait_for("the load", lambda: leaving.applied + survivor.applied >= keys)
        say(f"{mode}: applied in {time.perf_counter() - began:.1f}s")
        if mode == "all":
            wait_for(
                "the standby stores",
                lambda: (
                    survivor.standby_records >= leaving.applied and survivor.standby_behind() == 0
                ),
            )
            say(f"{mode}: standby caught up ({survivor.standby_records:,} records)")
        probes = one_per_partition(topic)
        restored, applied = survivor.restored_records, survivor.applied
        died = time.perf_counter()
        runs[0].stop()
        partitions = produce(bootstrap, topic, probes, 2)
        on_taken = sum(1 for p in partitions if ("ORDERS", p) in taken)
        owning = wait_for("the takeover", lambda: len(survivor.owned_partitions) == PARTITIONS)
        served = wait_for("the new orders", lambda: survivor.applied - applied >= len(partitions))
        assert on_taken == len(taken)
        return {
            "replayed": survivor.restored_records - restored,
            "owning_s": owning - died,
            "served_s": served - died,
        }
    finally:
        for run in runs:
            run.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--modes", default="off,all", help="standby modes to run, in order")
    parser.add_argument("--bootstrap", default=None, help="a broker (default: embedded)")
    args = parser.parse_args()
    broker = start_broker(args.bootstrap)
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="sow-failover-") as root:
            print("| standby | keys | takeover replayed | to owning (s) | failover (s) | load |")
            print("| --- | --- | --- | --- | --- | --- |")
            for mode in args.modes.split(","):
                figures = run_mode(broker.bootstrap_servers, args.keys, mode, Path(root))
                load = os.getloadavg()[0]
                print(
                    f"| {mode} | {args.keys:,} | {int(figures['replayed']):,} | "
                    f"{figures['owning_s']:.2f} | {figures['served_s']:.2f} | {load:.2f} |",
                    flush=True,
                )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
