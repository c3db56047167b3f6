"""Queues end to end (issue 22): delivered-and-acknowledged messages per second with 1, 4
and 16 consumers, beside a plain Kafka consumer group and a Kafka share group (KIP-932) on
the same broker in the same run.

Each engine runs ``--rounds`` times, interleaved with the others; the table gives the
median round and lists every round. Each round: ``--messages`` JSON messages are
published to a topic of ``--partitions`` partitions once every consumer is ready
(subscribed, assigned), and the clock runs from the first publish until every message
has been acknowledged. Every consumer is its own
process.

* **kafka_sow**: a queue over the (plain) topic, served as ``sow serve`` serves it: the
  query service in this process, the processor a child process of it (``--processor
  thread``: a thread of this process instead); started afresh per round, its start-up
  time reported apart. Each consumer subscribes through gRPC (``max_backlog``
  ``--backlog``, the queue's MaxPerSubscriptionBacklog the same) and acknowledges its
  leases in batches (``--ack-batch``, or whatever it holds after 2 ms without a new
  lease). The clock stops once every message was acknowledged and a ``sow`` query over
  the queue finds it empty (every acknowledgement applied).
* **consumer_group**: confluent-kafka consumers in one group (the broker's default
  protocol), committing their offsets asynchronously after each batch they consume.
* **share_group**: confluent-kafka ``ShareConsumer``s in one share group (implicit
  acknowledgement: a poll accepts what the previous one returned); they are what Kafka
  offers for queues, without priority, fairness models, backlogs or filters
  (docs/queues.md).

    PYTHONPATH=. python bench/queues.py --json-out bench/results/kafka/queues.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()
ENGINES = ("kafka_sow", "consumer_group", "share_group")


def say(text: str) -> None:
    wall = time.perf_counter() - STARTED
    sys.stderr.write(f"[queues {time.strftime('%H:%M:%S')} +{wall:.0f}s] {text}\n")
    sys.stderr.flush()


# -- the consumers (each in its own process) ---------------------------------------------


def sow_consumer(
    address: str, backlog: int, ack_batch: int, ready: Any, count: Any, stop: Any
) -> None:
    """A kafka-sow queue consumer: leases in, acknowledgements out in batches."""
    from processor.client.sow_client import SowClient

    client = SowClient(address)
    stream = client.consume("Q", max_backlog=backlog)
    leases: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def read() -> None:
        try:
            for message in stream:
                if message.WhichOneof("part") == "registered":
                    ready.set()
                else:
                    leases.put(message.lease.bookmark)
        except Exception:  # the stream ended at stop
            pass
        leases.put(None)

    threading.Thread(target=read, daemon=True).start()
    pending: list[str] = []
    while not stop.is_set():
        try:
            bookmark = leases.get(timeout=0.002)
        except queue.Empty:
            bookmark = ""
        if bookmark is None:
            break
        if bookmark:
            pending.append(bookmark)
        if pending and (len(pending) >= ack_batch or not bookmark):
            stream.ack(pending)
            with count.get_lock():
                count.value += len(pending)
            pending = []
    stream.close(drain_s=1.0)
    client.close()


def group_consumer(
    bootstrap: str, topic: str, group: str, ready: Any, count: Any, stop: Any
) -> None:
    """A consumer-group member: consumes, commits after each batch."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    consumer.subscribe([topic], on_assign=lambda _c, parts: parts and ready.set())
    while not stop.is_set():
        records = consumer.consume(1000, 0.05)
        records = [r for r in records if not r.error()]
        if records:
            consumer.commit(asynchronous=True)
            with count.get_lock():
                count.value += len(records)
    consumer.close()


def share_consumer(
    bootstrap: str, topic: str, group: str, ready: Any, count: Any, stop: Any
) -> None:
    """A share-group member: each poll accepts what the previous poll returned."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    ready.set()
    previous = 0
    while not stop.is_set():
        records = [r for r in consumer.poll(0.05) if not r.error()]
        if previous:  # accepted by this poll
            with count.get_lock():
                count.value += previous
        previous = len(records)
    if previous:
        consumer.commit_sync()
        with count.get_lock():
            count.value += previous
    consumer.close()


# -- one round -----------------------------------------------------------------------------


def publish(bootstrap: str, topic: str, messages: int, partitions: int) -> float:
    """Publish the round's messages; seconds it took."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    began = time.perf_counter()
    for n in range(messages):
        value = b'{"id":%d,"payload":"%s"}' % (n, b"x" * 64)
        while True:
            try:
                producer.produce(topic, value, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 10_000 == 0:
            producer.poll(0)
    producer.flush()
    return time.perf_counter() - began


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result()


def earliest_for_share_group(bootstrap: str, group: str) -> None:
    """A share group starts at the log's end unless told otherwise."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process and its descendants, by part: the broker (a
    JVM), kafka-sow's processor child, the consumers (and publisher: other Python
    children), and this process (the query service, for kafka-sow). Linux /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, tuple[float, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = ((int(fields[11]) + int(fields[12])) / tick, command)
    own = os.getpid()
    parts = {"broker": 0.0, "processor": 0.0, "clients": 0.0, "this process": 0.0}
    for pid, (seconds, command) in used.items():
        ancestor = pid
        while ancestor not in (own, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor != own:
            continue
        part = (
            "this process"
            if pid == own
            else "broker"
            if "java" in command.split(" ", 1)[0]
            else "processor"
            if "processor.cli process" in command
            else "clients"
        )
        parts[part] += seconds
    return parts


def run_round(
    engine: str, consumers: int, bootstrap: str, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    run = f"q{uuid.uuid4().hex[:8]}"
    topic = f"{run}.orders"
    stop = ctx.Event()
    count = ctx.Value("q", 0)
    readies = [ctx.Event() for _ in range(consumers)]
    app = client = None
    startup_s = 0.0
    acked: Callable[[], int] = lambda: int(count.value)  # noqa: E731
    create_topic(bootstrap, topic, args.partitions)
    if engine == "kafka_sow":
        from processor.client.sow_client import SowClient

        app, startup_s = start_sow(bootstrap, topic, args, work / run)
        client = SowClient(app.grpc_address)

        def acked() -> int:
            """What consumers acknowledged; every message once the queue is empty too."""
            sent = int(count.value)
            if sent < args.messages or not queue_empty(client):
                return min(sent, args.messages - 1)
            return sent

        target: Callable[..., None] = sow_consumer
        worker_args: tuple[Any, ...] = (app.grpc_address, args.backlog, args.ack_batch)
    elif engine == "consumer_group":
        target, worker_args = group_consumer, (bootstrap, topic, f"{run}-group")
    else:
        earliest_for_share_group(bootstrap, f"{run}-share")
        target, worker_args = share_consumer, (bootstrap, topic, f"{run}-share")
    workers = [
        ctx.Process(target=target, args=(*worker_args, ready, count, stop), daemon=True)
        for ready in readies
    ]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 120
        for ready in readies:
            if not ready.wait(max(deadline - time.monotonic(), 0)):
                raise RuntimeError(f"{engine}: a consumer was not ready within 120 s")
        time.sleep(args.settle)  # the group's other members take their partitions
        began, cpu = time.perf_counter(), tree_cpu()
        publish_s = publish(bootstrap, topic, args.messages, args.partitions)
        deadline = time.monotonic() + args.timeout
        last_report = time.monotonic()
        while acked() < args.messages:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{engine}: {acked():,} of {args.messages:,} acknowledged in {args.timeout}s"
                )
            if time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                say(f"  {engine} x{consumers}: {acked():,} of {args.messages:,} acknowledged")
            time.sleep(0.005)
        seconds = time.perf_counter() - began
        cpu = {part: used - cpu[part] for part, used in tree_cpu().items()}
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
        if client is not None:
            client.close()
        if app is not None:
            app.stop()
    row = {
        "engine": engine,
        "consumers": consumers,
        "messages": args.messages,
        "seconds": round(seconds, 3),
        "messages_per_s": round(args.messages / seconds),
        "publish_seconds": round(publish_s, 3),
        "startup_seconds": round(startup_s, 3),
        # CPU microseconds per message, by part (the consumers' processes end before
        # the count: theirs is what they used until the last acknowledgement).
        "cpu_us_per_message": {
            part: round(used / args.messages * 1e6, 1) for part, used in cpu.items()
        },
    }
    say(f"{row}")
    return row


def start_sow(bootstrap: str, topic: str, args: argparse.Namespace, state: Path) -> Any:
    """kafka-sow (processor and query service) with the queue Q over ``topic``; the
    application and its start-up seconds (to ready)."""
    from processor.app import start
    from processor.config import Settings
    from processor.topology.yaml_loader import parse_yaml

    text = (
        "topics:\n"
        f"  - {{name: orders, sow: false, kafka_topic: {topic}, partitions: {args.partitions}}}\n"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: orders, "
        f"max_per_subscription_backlog: {args.backlog}, lease_period: 60s}}\n"
    )
    state.mkdir(parents=True, exist_ok=True)
    path = state / "bench-queues.yaml"
    path.write_text(text)
    began = time.perf_counter()
    settings = replace(  # the environment's settings (SOW_LIVE_DELIVERY, ...), then these
        Settings.from_env(),
        bootstrap_servers=bootstrap,
        state_dir=state,
        topology=path,
        grpc_address="127.0.0.1:0",
        group_id=f"{topic}-sow",
        dead_letter_topic=f"{topic}.dead-letter",
    )
    child = args.processor == "child"
    app = start(settings, topology=parse_yaml(text, str(path)), processor_process=child)
    while app.readiness() is not None:
        time.sleep(0.05)
    return app, time.perf_counter() - began


def queue_empty(client: Any) -> bool:
    """Whether a ``sow`` query over the queue finds no message."""
    records, _, _ = client.query("Q", top_n=1)
    return not records


def _medians(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (consumers, engine): the median round's rate, every round's."""
    grouped: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rounds:
        grouped.setdefault((row["consumers"], row["engine"]), []).append(row)
    return [
        {
            "consumers": consumers,
            "engine": engine,
            "messages_per_s": round(statistics.median(r["messages_per_s"] for r in found)),
            "rounds": [r["messages_per_s"] for r in found],
            "startup_seconds": round(statistics.median(r["startup_seconds"] for r in found), 3),
        }
        for (consumers, engine), found in grouped.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--consumers", default="1,4,16")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--backlog", type=int, default=500)
    parser.add_argument("--ack-batch", type=int, default=100)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every engine, interleaved (median)"
    )
    parser.add_argument(
        "--processor",
        choices=("child", "thread"),
        default="child",
        help="kafka-sow's processor as sow serve runs it (a child process), or as a thread "
        "of the query service's process",
    )
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ENGINES for e in engines):
        say(f"unknown engine in {args.engines!r}; choose from {', '.join(ENGINES)}")
        return 2

    from processor.log.broker import EMBEDDED_ENV, start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-queues-"))
    say("starting the broker")
    broker = start_broker(embedded=os.environ.get(EMBEDDED_ENV, "").strip() or "kafka")
    say(f"broker: {broker.description}; state in {work}")
    rounds: list[dict[str, Any]] = []
    try:
        for consumers in (int(c) for c in args.consumers.split(",")):
            for n in range(args.rounds):
                for engine in engines:
                    say(f"--- {engine} with {consumers} consumers, round {n + 1}")
                    row = run_round(engine, consumers, broker.bootstrap_servers, args, work)
                    rounds.append(row)
    finally:
        say("stopping the broker")
        broker.stop()
    rows = _medians(rounds)
    print(
        "| consumers | engine | delivered and acknowledged msgs/s (median) | rounds "
        "| start-up s (median) |"
    )
    print("|---:|---|---:|---|---:|")
    for row in rows:
        each = ", ".join(f"{rate:,}" for rate in row["rounds"])
        print(
            f"| {row['consumers']} | {row['engine']} | {row['messages_per_s']:,} | {each} | "
            f"{row['startup_seconds'] or ''} |"
        )
    wall = time.perf_counter() - STARTED
    say(f"wall time from process start {wall:.1f}s")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "broker": broker.description,
            "processor": args.processor,
            "rows": rows,
            "rounds": rounds,
            "wall_seconds": wall,
        }
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
