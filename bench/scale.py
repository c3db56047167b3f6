"""Scale benchmark: ingest with 1 vs 2 `sow process` processes on one broker.

For each process count, in turn (never two runs at once):

1. ``--records`` orders over ``--keys`` keys are written, keyed by SowKey, to a fresh
   input topic of ``--partitions`` partitions (the same bytes for every run; a topic of its
   own so no run restores another's changelog).
2. That many ``sow process`` are spawned at once (consumer group, ``SOW_ASSIGNMENT=group``,
   a state directory each). The group's committed input offsets are sampled every 0.1 s.
3. Reported: ``total_s`` from the spawn to every record applied and committed (group
   join and rebalances included), ``first_commit_s`` (spawn to the first commit),
   ``settled_s`` (spawn to the last partition assignment any process logged),
   ``steady_per_s`` (records/s from then to the end: every process working), and
   ``burst_per_s`` (records/s between 20% and 80% committed, a rebalance in between
   included when one happens there), and the CPU seconds
   (``/proc/<pid>/stat`` utime+stime) of the broker and of the processors over the run,
   beside what the whole machine spent (``/proc/stat``; other work on the machine shows
   up as ``other``).

    PYTHONPATH=. python bench/scale.py --records 400000 --json-out bench/results/scale.json

``--failover-keys 200000`` then runs bench/failover.py: the failover time with and without
a standby store (``--processes ''`` runs that alone).

The machine's load average is printed before each run: on shared cores the figures move
with it. The Markdown table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from proc_cpu import cpu_seconds

from processor.app import topic_specs
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology

TICKS = os.sysconf("SC_CLK_TCK")


def say(text: str) -> None:
    sys.stderr.write(f"[scale-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def machine_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


def produce(bootstrap: str, topic: SowTopic, records: int, keys: int) -> None:
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    for i in range(records):
        order = {"orderId": i % keys, "symbol": "IBM", "price": 100.0 + i % 50, "qty": i % 7}
        key = generator({"orderId": i % keys}).encode()
        while True:
            try:
                producer.produce(
                    topic.kafka_topic,
                    orjson.dumps(order),
                    key,
                    partition_for(key, topic.partitions),
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise SystemExit("the input was not delivered in 120s")


@dataclass
class Run:
    """One run's figures (see the module docstring)."""

    processes: int
    records: int
    load_avg_1m: float
    first_commit_s: float
    settled_s: float
    assignments: int
    committed_at_settle: int
    total_s: float
    overall_per_s: float
    steady_per_s: float | None
    burst_per_s: float
    broker_cpu_s: float
    processors_cpu_s: list[float]
    machine_busy_s: float
    machine_total_s: float
    #: From the last assignment to the end (None without a steady figure): CPU
    #: microseconds per record of the processors together and of the broker, and the
    #: cores the processors used together.
    steady_processor_us_per_record: float | None
    steady_broker_us_per_record: float | None
    steady_processor_cores: float | None

    @property
    def other_cpu_s(self) -> float:
        return self.machine_busy_s - self.broker_cpu_s - sum(self.processors_cpu_s)


def assignment_times(logs: list[Path]) -> list[float]:
    """Epoch seconds of every "assigned" line the processes logged."""
    times = []
    for path in logs:
        for line in path.read_text().splitlines():
            if "processor.engine.assignment: assigned" in line:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                times.append(stamp.timestamp())
    return times


def committed_sum(consumer: Consumer, partitions: list[TopicPartition]) -> int:
    return sum(max(tp.offset, 0) for tp in consumer.committed(partitions, 10))


def at_fraction(samples: list[tuple[float, int]], count: int) -> float:
    """When ``count`` records were committed, interpolated between samples."""
    before = (0.0, 0)
    for t, n in samples:
        if n >= count:
            t0, n0 = before
            return t0 + (t - t0) * (count - n0) / max(n - n0, 1)
        before = (t, n)
    raise ValueError(f"never reached {count}")


def run(args: argparse.Namespace, bootstrap: str, broker_pid: int, processes: int) -> Run:
    name = f"scale-{processes}p-{uuid.uuid4().hex[:6]}"
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=name, partitions=args.partitions)
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), f"{name}.dead-letter"))
    say(f"{processes} process(es): writing {args.records:,} records to {name}")
    produce(bootstrap, topic, args.records, args.keys)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        topology = work / "orders.yaml"
        topology.write_text(
            "topics:\n  - name: ORDERS\n    key: /orderId\n"
            f"    kafka_topic: {name}\n    partitions: {args.partitions}\n"
        )
        partitions = [TopicPartition(name, p) for p in range(args.partitions)]
        watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "log_level": 3})
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))},
            "SOW_ASSIGNMENT": "group",
            "SOW_DEAD_LETTER_TOPIC": f"{name}.dead-letter",
        }
        load = os.getloadavg()[0]
        say(f"  load average {load:.2f}; spawning {processes} sow process")
        broker_before = cpu_seconds(broker_pid)
        busy_before, total_before = machine_seconds()
        started = time.time()
        children = [
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "processor.cli", "process"),
                    *("--bootstrap-servers", bootstrap, "--topology", str(topology)),
                    *("--state-dir", str(work / f"state-{n}"), "--group-id", name),
                    *("--instance-id", str(n)),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(work / f"process-{n}.log", "w"),  # noqa: SIM115 - closed with it
            )
            for n in range(processes)
        ]
        # (seconds since spawn, records committed, processors' CPU s, broker's CPU s)
        samples: list[tuple[float, int, float, float]] = []
        try:
            while True:
                done = committed_sum(watcher, partitions)
                now = time.time() - started
                cpu = sum(cpu_seconds(c.pid) for c in children)
                samples.append((now, done, cpu, cpu_seconds(broker_pid)))
                if done >= args.records:
                    break
                if now > args.timeout or any(c.poll() is not None for c in children):
                    logs = "\n".join(p.read_text() for p in sorted(work.glob("process-*.log")))
                    raise SystemExit(f"not applied after {now:.0f}s ({done:,}):\n{logs}")
                time.sleep(0.1)
            processors_cpu = [cpu_seconds(c.pid) for c in children]
            broker_cpu = cpu_seconds(broker_pid) - broker_before
            busy_after, total_after = machine_seconds()
        finally:
            for child in children:
                child.terminate()
            for child in children:
                child.wait(60)
            watcher.close()
        assigned = [t - started for t in assignment_times(sorted(work.glob("process-*.log")))]
    total = samples[-1][0]
    settled = max(assigned)
    settle = max((x for x in samples if x[0] <= settled), default=samples[0])
    at_settle = settle[1]
    end = samples[-1]
    first = next(x[0] for x in samples if x[1] > 0)
    progress = [(x[0], x[1]) for x in samples]
    low = at_fraction(progress, args.records // 5)
    high = at_fraction(progress, args.records * 4 // 5)
    steady = at_settle < args.records // 2  # else too few records left for a figure
    window_records = max(end[1] - settle[1], 1)
    window_s = max(end[0] - settle[0], 1e-3)
    result = Run(
        processes=processes,
        records=args.records,
        load_avg_1m=load,
        first_commit_s=first,
        settled_s=settled,
        assignments=len(assigned),
        committed_at_settle=at_settle,
        total_s=total,
        overall_per_s=args.records / total,
        # Too few records left after the last rebalance for a figure: none.
        steady_per_s=(args.records - at_settle) / (total - settled) if steady else None,
        burst_per_s=(args.records * 3 // 5) / (high - low),
        broker_cpu_s=broker_cpu,
        processors_cpu_s=processors_cpu,
        machine_busy_s=busy_after - busy_before,
        machine_total_s=total_after - total_before,
        steady_processor_us_per_record=(end[2] - settle[2]) / window_records * 1e6
        if steady
        else None,
        steady_broker_us_per_record=(end[3] - settle[3]) / window_records * 1e6 if steady else None,
        steady_processor_cores=(end[2] - settle[2]) / window_s if steady else None,
    )
    say(f"  {asdict(result)}")
    return result


def table(runs: list[Run]) -> str:
    one = runs[0]
    lines = [
        "| processes | total s | first commit s | settled s | records/s overall "
        "| steady records/s | vs 1 | 20-80% records/s | broker CPU s | processors CPU s "
        "| other CPU s | machine busy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        cores = r.machine_busy_s / r.machine_total_s * (os.cpu_count() or 1)
        steady = "-" if r.steady_per_s is None else f"{r.steady_per_s:,.0f}"
        ratio = (
            "-"
            if r.steady_per_s is None or one.steady_per_s is None
            else f"{r.steady_per_s / one.steady_per_s:.2f}x"
        )
        lines.append(
            f"| {r.processes} | {r.total_s:.1f} | {r.first_commit_s:.1f} | {r.settled_s:.1f} "
            f"| {r.overall_per_s:,.0f} | {steady} | {ratio} | {r.burst_per_s:,.0f} "
            f"| {r.broker_cpu_s:.1f} "
            f"| {' + '.join(f'{c:.1f}' for c in r.processors_cpu_s)} "
            f"| {r.other_cpu_s:.1f} | {cores:.2f} of {os.cpu_count()} cores |"
        )
    lines += [
        "",
        "| processes | processors CPU us/record | broker CPU us/record | processors' cores "
        "| CPU ceiling records/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        p, b, c = (
            r.steady_processor_us_per_record,
            r.steady_broker_us_per_record,
            r.steady_processor_cores,
        )
        if p is None or b is None or c is None:
            continue
        # Every record costs p + b CPU microseconds somewhere on the machine's cores.
        ceiling = (os.cpu_count() or 1) * 1e6 / (p + b)
        lines.append(f"| {r.processes} | {p:.1f} | {b:.1f} | {c:.2f} | {ceiling:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--processes",
        default="1,2",
        help="process counts to run, in order (default: 1,2; '' runs none)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--failover-keys",
        type=int,
        default=0,
        help="afterwards, the failover time with and without a standby store for this many "
        "keys (bench/failover.py; the issue's figure: 200000)",
    )
    args = parser.parse_args()
    if args.processes:
        ingest(args)
    if args.failover_keys:
        # After the ingest runs, never beside them: both measure a shared machine.
        failover = [sys.executable, str(Path(__file__).with_name("failover.py"))]
        subprocess.run([*failover, "--keys", str(args.failover_keys)], check=True)


def ingest(args: argparse.Namespace) -> None:
    """The ingest runs: one per process count, then their table (and JSON)."""
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    pid = getattr(broker, "pid", None)  # embedded Apache Kafka or Tansu; None: external
    if pid is None:
        broker.stop()
        raise SystemExit(
            "bench/scale.py measures the embedded broker's CPU: unset KAFKA_BOOTSTRAP_SERVERS"
        )
    try:
        runs = [run(args, broker.bootstrap_servers, pid, int(n)) for n in args.processes.split(",")]
    finally:
        broker.stop()
    print(table(runs))
    if args.json_out:
        results = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": " ".join(["python", *sys.argv]),
            "cpus": os.cpu_count(),
            "broker": broker.description,
            "runs": [{**asdict(r), "other_cpu_s": r.other_cpu_s} for r in runs],
        }
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
