"""Rebalance time per consumer-group protocol: how long a change of processors stops work.

The scale test's scenario (docs/scaling.md): ``sow process`` processes in one group on
``--partitions`` input partitions, 1 -> 2 -> 4 processors, then one SIGKILLed, while a
publisher writes to every partition every 20 ms. Run once per ``--group-protocol``
(``classic``: the eager range protocol; ``consumer``: KIP-848, the broker's range
assignor), one after the other on the same broker, each in a group and topic of its own.

Per step, from the membership change (an added processor's "taking its partitions" log
line, which comes after Python's start and imports, the first of them when two join; the
SIGKILL for a kill):

- ``assigned_s``: until every partition is held by exactly one live processor that has
  recovered its store (their "assigned"/"revoked" log lines);
- ``processing_s``: until every partition's committed offset has moved on since then (a
  transaction of its owner committed on it): every partition assigned and processing;
- ``longest_stall_s``: the longest any partition's committed offset stood still during
  the step (its records waiting), and ``stalled``: how many partitions stood still for
  more than ``STALL_S``. The eager protocol stops every partition at every rebalance;
  KIP-848 stops only those that change owner;
- ``restarts``: pipeline restarts the processors logged during the step.

The group's committed offsets are sampled every 50 ms (AdminClient, from outside the
group). Needs a broker with KIP-848 (Apache Kafka 4.0+): by default the embedded Apache
Kafka (Java 17+) is started; ``KAFKA_BOOTSTRAP_SERVERS`` uses another. One run per
protocol is a single sample on a shared machine: the load average is printed with it.

    PYTHONPATH=. python bench/rebalance.py --json-out bench/results/rebalance.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.app import topic_specs
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology
from tests.integration.scale_cluster import Cluster, Member

#: A partition whose committed offset stands still this long while records wait is stalled.
STALL_S = 0.5
SAMPLE_EVERY_S = 0.05
PUBLISH_EVERY_S = 0.02
#: The scenario: (action, count); "add" n processors, "kill" processor n (1-based).
STEPS = [("add", 1), ("add", 2), ("kill", 1)]


def say(text: str) -> None:
    sys.stderr.write(f"[rebalance-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


class Publisher:
    """Writes ``per_tick`` records to every partition every PUBLISH_EVERY_S until stopped."""

    def __init__(self, bootstrap: str, topic: SowTopic, keys: int, per_tick: int) -> None:
        generator = FieldKeyGenerator(topic.domain, topic.keys)
        self._by_partition: dict[int, list[bytes]] = {p: [] for p in range(topic.partitions)}
        for i in range(keys):
            key = generator({"id": i}).encode()
            self._by_partition[partition_for(key, topic.partitions)].append(key)
        self._topic = topic
        self._per_tick = per_tick
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.records = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(30)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(PUBLISH_EVERY_S):
            for partition, keys in self._by_partition.items():
                for _ in range(self._per_tick):
                    key = keys[n % len(keys)]
                    n += 1
                    value = b'{"id": %d, "seq": %d, "pad": "xxxxxxxxxxxxxxxxxxxx"}' % (n, n)
                    self._producer.produce(self._topic.kafka_topic, value, key, partition)
                    self.records += 1
            self._producer.poll(0)


class Sampler:
    """The group's committed offsets every SAMPLE_EVERY_S: (monotonic time, offsets)."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        self._request = [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(topic, p) for p in range(partitions)]
            )
        ]
        self._partitions = partitions
        self.samples: list[tuple[float, tuple[int, ...]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            try:
                futures = self._admin.list_consumer_group_offsets(self._request)
                answer = next(iter(futures.values())).result(5)
            except Exception:  # a missed sample only coarsens the figures
                continue
            offsets = [-1] * self._partitions
            for tp in answer.topic_partitions:
                offsets[tp.partition] = tp.offset
            self.samples.append((time.monotonic(), tuple(offsets)))

    def since(self, began: float) -> list[tuple[float, tuple[int, ...]]]:
        return [s for s in list(self.samples) if s[0] >= began]


@dataclass
class Step:
    """One step's figures (see the module docstring); seconds from the change."""

    protocol: str
    step: str
    processors: int
    assigned_s: float
    processing_s: float
    longest_stall_s: float
    stalled: int
    restarts: int
    load_avg_1m: float


def processing_again(sampler: Sampler, assigned_at: float, timeout_s: float) -> float:
    """When every partition's committed offset has moved past where it stood at
    ``assigned_at``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = [s for s in sampler.samples if s[0] <= assigned_at]
        after = sampler.since(assigned_at)
        if before and after:
            base = before[-1][1]
            moved = [None] * len(base)
            for t, offsets in after:
                for p, offset in enumerate(offsets):
                    if moved[p] is None and offset > base[p]:
                        moved[p] = t
            if all(m is not None for m in moved):
                return max(m for m in moved if m is not None)
        time.sleep(SAMPLE_EVERY_S)
    raise SystemExit(f"the partitions did not all commit again within {timeout_s:.0f}s")


def stalls(samples: list[tuple[float, tuple[int, ...]]]) -> list[float]:
    """Per partition, the longest time its committed offset stood still in ``samples``."""
    if not samples:
        return []
    longest = [0.0] * len(samples[0][1])
    since = [samples[0][0]] * len(longest)
    last = list(samples[0][1])
    for t, offsets in samples[1:]:
        for p, offset in enumerate(offsets):
            if offset != last[p]:
                longest[p] = max(longest[p], t - since[p])
                since[p], last[p] = t, offset
    end = samples[-1][0]
    return [max(longest[p], end - since[p]) for p in range(len(longest))]


def wait_joining(members: list[Member], timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while any(m.joining_at is None for m in members):
        if time.monotonic() > deadline or not all(m.alive for m in members):
            raise SystemExit("a processor did not start:\n" + "\n".join(m.log() for m in members))
        time.sleep(0.01)
    return min(m.joining_at for m in members if m.joining_at is not None)


def scenario(args: argparse.Namespace, bootstrap: str, protocol: str, work: Path) -> list[Step]:
    name = f"rebalance-{protocol}-{uuid.uuid4().hex[:6]}"
    topic = SowTopic("ORDERS", keys=("/id",), kafka_topic=name, partitions=args.partitions)
    dead_letters = f"{name}.dead-letter"
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), dead_letters))
    topology = work / f"{name}.yaml"
    topology.write_text(
        f"topics:\n  - name: ORDERS\n    key: /id\n    kafka_topic: {name}\n"
        f"    partitions: {args.partitions}\n"
    )
    group = f"{name}-group"
    cluster = Cluster(
        bootstrap,
        topology,
        work / name,
        group=group,
        input_topic=name,
        partitions=args.partitions,
        env={
            "SOW_DEAD_LETTER_TOPIC": dead_letters,
            "SOW_FETCH_WAIT_MS": "20",
            "SOW_GROUP_PROTOCOL": protocol,
        },
    )
    publisher = Publisher(bootstrap, topic, args.keys, args.per_tick)
    sampler = Sampler(bootstrap, group, name, args.partitions)
    load = os.getloadavg()[0]
    say(f"{protocol}: load average {load:.2f}; group {group}")
    steps: list[Step] = []
    try:
        publisher.start()
        sampler.start()
        cluster.add_processor().wait_ready(120)
        cluster.wait_settled(60)
        time.sleep(args.settle)
        for action, n in STEPS:
            restarts = sum(p.restarts for p in cluster.processors)
            if action == "add":
                joining = [cluster.add_processor() for _ in range(n)]
                began = wait_joining(joining, 120)
            else:
                began = time.monotonic()
                cluster.processors[n - 1].kill()
            cluster.wait_settled(120)
            assigned_at = time.monotonic()
            processing_at = processing_again(sampler, assigned_at, 60)
            time.sleep(args.settle)  # then steady processing before the next change
            longest = stalls(sampler.since(began))
            step = Step(
                protocol=protocol,
                step=f"{action} {n}",
                processors=len(cluster.live_processors()),
                assigned_s=assigned_at - began,
                processing_s=processing_at - began,
                longest_stall_s=max(longest),
                stalled=sum(s > STALL_S for s in longest),
                restarts=sum(p.restarts for p in cluster.processors) - restarts,
                load_avg_1m=os.getloadavg()[0],
            )
            say(f"  {asdict(step)}")
            steps.append(step)
    finally:
        publisher.stop()
        sampler.stop()
        cluster.stop()
        for member in cluster.processors:  # kept with --work
            (work / name / f"{member.name}.log").write_text(member.log())
    return steps


def table(steps: list[Step]) -> str:
    lines = [
        "| protocol | step | processors | assigned s | processing again s | longest stall s "
        f"| partitions stalled > {STALL_S} s | pipeline restarts |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        lines.append(
            f"| {s.protocol} | {s.step} | {s.processors} | {s.assigned_s:.2f} "
            f"| {s.processing_s:.2f} | {s.longest_stall_s:.2f} | {s.stalled} | {s.restarts} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--group-protocol",
        default="classic,consumer",
        help="protocols to run, in order (default: classic,consumer)",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument(
        "--per-tick",
        type=int,
        default=2,
        help="records per partition every 20 ms (default 2: 400 records/s on 4 partitions)",
    )
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds of steady work between steps"
    )
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the processors' state directories and logs here (default: a temporary "
        "directory, removed)",
    )
    args = parser.parse_args()
    protocols = [p.strip() for p in args.group_protocol.split(",") if p.strip()]
    if not set(protocols) <= {"classic", "consumer"}:
        raise SystemExit(f"--group-protocol takes classic and consumer, got {protocols}")
    broker = start_broker(embedded="kafka")
    say(f"broker: {broker.description}")
    steps: list[Step] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = args.work or Path(tmp)
            for protocol in protocols:
                steps += scenario(args, broker.bootstrap_servers, protocol, work)
    finally:
        broker.stop()
    print(table(steps))
    if args.json_out:
        results = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": " ".join(["python", *sys.argv]),
            "cpus": os.cpu_count(),
            "broker": broker.description,
            "load_avg_1m_at_end": os.getloadavg()[0],
            "steps": [asdict(s) for s in steps],
        }
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
