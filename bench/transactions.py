"""The floor under the processor's commit hop: one Kafka transaction as the processor makes
it (one changelog record, the consumer offsets, commit), back to back, on the embedded
broker, nothing else running; and when the record is readable by a read_committed
consumer after the commit returned.

Each round makes ``--transactions`` transactions with librdkafka's default retry backoff
(100 ms) and with the processor's (``KafkaTransactionalLog.RETRY_BACKOFF``): a transaction
begun while the coordinator still writes the previous one's markers is answered
CONCURRENT_TRANSACTIONS and retried after that backoff. A third row leaves 5 ms between
transactions (the markers are then written before the next one begins).

    PYTHONPATH=. python bench/transactions.py --json-out bench/results/kafka/transactions.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.log.broker import start_broker
from processor.log.kafka.transactional import KafkaTransactionalLog

STARTED = time.perf_counter()


def say(text: str) -> None:
    sys.stderr.write(f"[transactions {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Readable:
    """A read_committed consumer of the output topic noting when each value arrives."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.seen: dict[bytes, float] = {}
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"probe-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                "log_level": 3,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, -1)])  # from the end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            record = self._consumer.poll(0.01)
            value = None if record is None or record.error() else record.value()
            if value is not None:
                self.seen[value] = time.perf_counter()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def round_(
    bootstrap: str, group: Any, readable: Readable, count: int, backoff: dict[str, int], gap: float
) -> dict[str, Any]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": uuid.uuid4().hex,
            "enable.idempotence": True,
            "linger.ms": 5,
            "log_level": 3,
            **backoff,
        }
    )
    producer.init_transactions(30)
    took: list[float] = []
    committed_at: list[tuple[bytes, float]] = []
    for i in range(count):
        value = uuid.uuid4().bytes
        began = time.perf_counter()
        producer.begin_transaction()
        producer.produce("bench-txn-out", value, b"key", 0)
        producer.send_offsets_to_transaction([TopicPartition("bench-txn-in", 0, i)], group, 10)
        producer.commit_transaction(10)
        committed = time.perf_counter()
        took.append(committed - began)
        committed_at.append((value, committed))
        if gap:
            time.sleep(gap)
    time.sleep(1.0)  # the last ones reach the consumer
    lags = [readable.seen[v] - t for v, t in committed_at if v in readable.seen]
    return {
        "transactions": count,
        "txn_p50_ms": round(percentile(took, 0.5), 2),
        "txn_p99_ms": round(percentile(took, 0.99), 2),
        "readable": len(lags),
        "readable_after_commit_p50_ms": round(percentile(lags, 0.5), 2) if lags else None,
        "readable_after_commit_p99_ms": round(percentile(lags, 0.99), 2) if lags else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    broker = start_broker()
    say(f"broker: {broker.description}")
    bootstrap = broker.bootstrap_servers
    rows: dict[str, dict[str, Any]] = {}
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic("bench-txn-in", 1, 1), NewTopic("bench-txn-out", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        del admin  # an admin client cannot be closed: gone before the broker stops
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn"})
        consumer.subscribe(["bench-txn-in"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        group = consumer.consumer_group_metadata()
        readable = Readable(bootstrap, "bench-txn-out")
        cases = {
            "librdkafka default backoff (100 ms), back to back": ({}, 0.0),
            "the processor's backoff, back to back": (KafkaTransactionalLog.RETRY_BACKOFF, 0.0),
            "the processor's backoff, 5 ms apart": (KafkaTransactionalLog.RETRY_BACKOFF, 0.005),
        }
        for name, (backoff, gap) in cases.items():
            rows[name] = round_(bootstrap, group, readable, args.transactions, backoff, gap)
            say(f"{name}: {rows[name]}")
        readable.close()
        consumer.close()
    finally:
        broker.stop()
    print("| transactions | p50 / p99 ms | readable after the commit, p50 / p99 ms |")
    print("|---|---:|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['txn_p50_ms']} / {row['txn_p99_ms']} | "
            f"{row['readable_after_commit_p50_ms']} / {row['readable_after_commit_p99_ms']} |"
        )
    wall = time.perf_counter() - STARTED
    say(f"wall time from process start {wall:.1f}s")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"broker": broker.description, "rows": rows, "wall_time_s": wall}
        args.json_out.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
