"""Queue latency (issue 34): publish -> lease received, one consumer, at a steady rate,
with the processor handing its at-least-once leases to the query service before their
commit (``SOW_QUEUE_HANDOVER=true``, the default) and without (``false``: a lease reaches
the consumer once its transaction committed and the service read it back), beside a
Kafka share group (KIP-932) consuming the same kind of stream on the same broker.

One run, the embedded broker (Apache Kafka unless ``KAFKA_BOOTSTRAP_SERVERS`` names
another). Each round: a new topic of ``--partitions`` partitions; kafka-sow's queue over
it (``sow serve``'s set-up: the query service in this process, the processor a child
process) with one gRPC consumer acknowledging each lease as it comes, or one share
consumer; ``--warmup`` seconds of publishing not counted, then ``--seconds`` at
``--rate`` messages per second, each stamped with its send time; the latency is from the
send to the consumer's receipt (the same clock: every process is on this host).

    PYTHONPATH=. python bench/queue_latency.py --json-out bench/results/kafka/queue_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from argparse import Namespace
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

# bench/ is sys.path[0] when this script runs.
from queues import create_topic, earliest_for_share_group, start_sow  # noqa: E402

from processor.log.broker import start_broker  # noqa: E402


def say(text: str) -> None:
    wall = time.perf_counter() - STARTED
    sys.stderr.write(f"[queue-latency {time.strftime('%H:%M:%S')} +{wall:.0f}s] {text}\n")
    sys.stderr.flush()


def publish(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> int:
    """Publish at ``rate`` for ``seconds``, each message carrying its send time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
    count = int(rate * seconds)
    began = time.perf_counter()
    for n in range(count):
        wait = began + n / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        value = b'{"id":%d,"sent":%.6f}' % (n, time.perf_counter())
        producer.produce(topic, value, partition=n % partitions)
        producer.poll(0)
    producer.flush(30)
    return count


def sow_consumer(address: str, latencies: list[float], ready: threading.Event) -> Any:
    """One kafka-sow queue consumer on a thread, acknowledging each lease as it comes."""
    from processor.client.sow_client import SowClient

    client = SowClient(address)
    stream = client.consume("Q", max_backlog=100)

    def read() -> None:
        try:
            for message in stream:
                if message.WhichOneof("part") == "registered":
                    ready.set()
                    continue
                now = time.perf_counter()
                sent = json.loads(message.lease.record.data)["sent"]
                latencies.append((now - sent) * 1000)
                stream.ack([message.lease.bookmark])
        except Exception:  # the stream ends when the round does
            return

    threading.Thread(target=read, daemon=True).start()
    return stream, client


def share_consumer(
    bootstrap: str, topic: str, latencies: list[float], ready: threading.Event, stop: Any
) -> None:
    from confluent_kafka import ShareConsumer

    group = f"{topic}-share"
    earliest_for_share_group(bootstrap, group)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    ready.set()
    while not stop.is_set():
        for record in consumer.poll(0.05):
            if record.error() is None:
                sent = json.loads(record.value())["sent"]
                latencies.append((time.perf_counter() - sent) * 1000)
    consumer.close()


def one_round(engine: str, bootstrap: str, args: Namespace, work: Path) -> dict[str, Any]:
    run = f"ql{uuid.uuid4().hex[:8]}"
    topic = f"{run}.orders"
    create_topic(bootstrap, topic, args.partitions)
    latencies: list[float] = []
    ready, stop = threading.Event(), threading.Event()
    app = stream = client = None
    if engine == "share_group":
        worker = threading.Thread(
            target=share_consumer, args=(bootstrap, topic, latencies, ready, stop), daemon=True
        )
        worker.start()
    else:
        os.environ["SOW_QUEUE_HANDOVER"] = "true" if engine == "handed_over" else "false"
        options = Namespace(partitions=args.partitions, backlog=100, processor="child")
        app, _ = start_sow(bootstrap, topic, options, work / run)
        stream, client = sow_consumer(app.grpc_address, latencies, ready)
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{engine}: the consumer was not ready within 60 s")
        time.sleep(2)
        publish(bootstrap, topic, args.partitions, args.rate, args.warmup)
        time.sleep(1)
        latencies.clear()
        sent = publish(bootstrap, topic, args.partitions, args.rate, args.seconds)
        deadline = time.monotonic() + 30
        while len(latencies) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        if stream is not None:
            stream.close()
        if client is not None:
            client.close()
        if app is not None:
            app.stop()
    got = sorted(latencies)
    cuts = statistics.quantiles(got, n=100)
    row = {
        "engine": engine,
        "partitions": args.partitions,
        "rate": args.rate,
        "sent": sent,
        "received": len(got),
        "p50_ms": round(cuts[49], 2),
        "p99_ms": round(cuts[98], 2),
        "max_ms": round(got[-1], 2),
        "load": round(os.getloadavg()[0], 2),
    }
    say(f"{row}")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--engines", default="not_handed_over,handed_over,share_group", help="comma-separated"
    )
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    broker = start_broker(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    say(f"broker: {broker.description}")
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="queue-latency-") as work:
            for partitions in args.partitions:
                for _ in range(args.rounds):
                    for engine in args.engines.split(","):
                        one = Namespace(**{**vars(args), "partitions": partitions})
                        rows.append(one_round(engine, broker.bootstrap_servers, one, Path(work)))
    finally:
        broker.stop()
    print("| partitions | engine | rate | received | p50 ms | p99 ms | max ms | load |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['partitions']} | {r['engine']} | {r['rate']} | {r['received']}/{r['sent']} "
            f"| {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['load']} |"
        )
    wall = time.perf_counter() - STARTED
    say(f"wall time from process start {wall:.1f}s")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"rows": rows, "wall_s": round(wall, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
