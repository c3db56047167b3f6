"""How the broker copes with a partition that accumulates small record batches.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one), produces
messages at a steady rate with a given linger (0: about one message per batch) while one
consumer tails the partition, and prints each second what was sent, what the consumer
got and, for the embedded broker, its CPU. On the embedded Tansu broker the CPU grows
with the number of batches in the partition until fetches starve (docs/brokers.md).

    PYTHONPATH=. python bench/broker_batches.py --linger-ms 0 --rate 1000 --seconds 25
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.log.broker import start_broker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--linger-ms", type=float, default=0.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=25)
    parser.add_argument("--isolation", default="read_committed")
    args = parser.parse_args()
    broker = start_broker(None)
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    bootstrap = broker.bootstrap_servers
    topic = f"batches-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": args.linger_ms, "log_level": 3}
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "isolation.level": args.isolation,
            "fetch.wait.max.ms": 2,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = [0]
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            got[0] += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)

    threading.Thread(target=consume, daemon=True).start()
    pid = getattr(broker, "pid", None)
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float | None:
        """The embedded broker's CPU time so far (None: not ours, or not Linux)."""
        if pid is None:
            return None
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    last_cpu, last_at = cpu_seconds(), time.perf_counter()
    started = time.perf_counter()
    sent = 0
    try:
        for second in range(1, args.seconds + 1):
            while sent < second * args.rate:
                delay = started + sent / args.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                producer.produce(topic, b"x" * 100)
                producer.poll(0)
                sent += 1
            now_cpu, now = cpu_seconds(), time.perf_counter()
            cpu = "n/a"
            if now_cpu is not None and last_cpu is not None:
                cpu = f"{100 * (now_cpu - last_cpu) / (now - last_at):5.1f}%"
            last_cpu, last_at = now_cpu, now
            print(
                f"{second:3d}s sent {sent:7d} consumed {got[0]:7d} lag {sent - got[0]:7d} "
                f"broker cpu {cpu}",
                flush=True,
            )
    finally:
        stop.set()
        producer.flush(5)
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
