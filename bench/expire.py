"""Expiration under load: a flood of records falling due while a steady publish goes on.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one) and one processor (in
this process) for two SOW topics: ``EXP`` (expiration 1 s, the topic default) and
``STEADY`` (no expiration). ``--records`` messages are written to EXP's input topic before
the processor starts, so it applies them as fast as it can and they fall due over the
time that takes; meanwhile ``--rate`` messages/s of other keys go to STEADY. Two
read_committed consumers tail the changelogs:

* EXP: each upsert's due time (``expiration_ms``) and the moment its ``expired``
  tombstone became visible: lateness = visible - due (also written - due, by the
  tombstone's Kafka timestamp, which leaves out the reader's own delay); rate =
  tombstones/s.
* STEADY: written -> committed and visible, per message (now - its Kafka timestamp).

    python bench/expire.py --records 1000000 --rate 3000 --json-out bench/results/expire.json
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from processor.app import build_processor, topic_specs
from processor.changelog import REASON_HEADER, expiration_of
from processor.config import Settings
from processor.keys import key_function
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Tail:
    """Reads one changelog partition (read_committed) in a child process (so its decoding
    does not compete with the processor for this process's GIL) and notes what the bench
    needs; ``collect`` stops it and returns its findings."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.stop = multiprocessing.Event()
        self.progress = multiprocessing.Value("q", 0)
        self._results: multiprocessing.Queue[Any] = multiprocessing.Queue()
        self._process = multiprocessing.Process(
            target=self._run, args=(bootstrap, topic), daemon=True
        )
        self._process.start()
        #: (visible at ms, visible - due ms, written - due ms) per expired tombstone.
        self.expired: list[tuple[float, float, float]] = []
        #: (visible at ms, written -> visible ms) per upsert.
        self.lags: list[tuple[float, float]] = []

    def collect(self) -> None:
        self.stop.set()
        self.expired, self.lags = self._results.get(timeout=120)
        self._process.join(30)

    def _run(self, bootstrap: str, topic: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "bench-unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
                "log_level": 3,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        due: dict[bytes, int] = {}
        expired: list[tuple[float, float, float]] = []
        lags: list[tuple[float, float]] = []
        while not self.stop.is_set():
            batch = consumer.consume(10000, 0.05)
            now = time.time() * 1000
            for record in batch:
                if record.error():
                    continue
                key, value = record.key(), record.value()
                if not key or key.startswith(b"\x00"):
                    continue
                if value is None:
                    if dict(record.headers() or ()).get(REASON_HEADER) == b"expired":
                        due_ms = due.get(key, now)
                        written = record.timestamp()[1]
                        expired.append((now, now - due_ms, written - due_ms))
                        self.progress.value = len(expired)
                    continue
                expiration_ms = expiration_of(value)
                if expiration_ms is not None:
                    due[key] = expiration_ms
                lags.append((now, now - record.timestamp()[1]))
        consumer.close()
        self._results.put((expired, lags))


def _quantiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"p50": values[0] if values else 0.0, "p99": 0.0, "max": max(values, default=0)}
    cuts = statistics.quantiles(values, n=100)
    return {"p50": round(cuts[49], 1), "p99": round(cuts[98], 1), "max": round(max(values), 1)}


def _flood(bootstrap: str, topic: SowTopic, records: int, rate: int = 0) -> float:
    """Write ``records`` messages to the topic's input, as fast as possible (``rate`` 0)
    or at ``rate`` messages/s in 10 ms slices; return the seconds it took."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "log_level": 3}
    )
    began = time.perf_counter()
    per_slice = max(rate // 100, 1)
    for i in range(records):
        if rate and i % per_slice == 0:
            pause = began + i / rate - time.perf_counter()
            if pause > 0:
                producer.poll(0)
                time.sleep(pause)
        message = {"id": i, "symbol": f"S{i % 5000}", "price": i % 997}
        while True:
            try:
                producer.produce(topic.kafka_topic, orjson.dumps(message), key_of(message).encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - began


def _steady(bootstrap: str, topic: SowTopic, rate: int, stop: threading.Event) -> None:
    """``rate`` messages/s over 10,000 keys, in 10 ms slices."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "log_level": 3})
    per_slice = max(rate // 100, 1)
    n = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        for _ in range(per_slice):
            message = {"id": n % 10000, "n": n}
            producer.produce(topic.kafka_topic, orjson.dumps(message), key_of(message).encode())
            n += 1
        producer.poll(0)
        next_at += 0.01
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    producer.flush(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=3000, help="steady publishes per second")
    parser.add_argument(
        "--flood-rate",
        type=int,
        default=0,
        help="write the records at this rate (msg/s) while the processor runs "
        "(0: all of them before it starts)",
    )
    parser.add_argument(
        "--expiration", type=float, default=1.0, help="EXP's lifetime (s); 0: disabled"
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("processor.engine.assignment").setLevel(logging.INFO)  # rebalances
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        run = f"expire-{uuid.uuid4().hex[:8]}"
        exp = SowTopic(
            "EXP", keys=("/id",), kafka_topic=f"{run}.exp", expiration_s=args.expiration or None
        )
        steady = SowTopic("STEADY", keys=("/id",), kafka_topic=f"{run}.steady")
        topology = Topology({"EXP": exp, "STEADY": steady})
        settings = Settings.from_env(
            state_dir=Path(tempfile.mkdtemp()),
            group_id=run,
            dead_letter_topic=f"{run}.dl",
            fetch_wait_ms=broker.fetch_wait_ms,
        )
        bootstrap = broker.bootstrap_servers
        ensure_topics(bootstrap, topic_specs(topology, settings.dead_letter_topic))
        load_before = _loadavg()
        if not args.flood_rate:
            took = _flood(bootstrap, exp, args.records)
            print(f"wrote {args.records:,} records to {exp.kafka_topic} in {took:.1f}s")
        tails = {t.name: Tail(bootstrap, t.changelog_topic) for t in (exp, steady)}
        processor = build_processor(settings, bootstrap, topology)
        worker = threading.Thread(target=processor.run, daemon=True)
        worker.start()
        if not processor.ready.wait(60):
            raise SystemExit("the processor did not join its group within 60 s")
        stop_steady = threading.Event()
        publisher = threading.Thread(
            target=_steady, args=(bootstrap, steady, args.rate, stop_steady), daemon=True
        )
        started = time.time() * 1000
        publisher.start()
        if args.flood_rate:  # a child process, so its Python does not hold this one's GIL
            flood = multiprocessing.Process(
                target=_flood, args=(bootstrap, exp, args.records, args.flood_rate), daemon=True
            )
            flood.start()
        loads = []
        deadline = time.monotonic() + args.timeout
        visible = tails["EXP"].progress
        wanted = args.records if args.expiration else 0
        while (
            visible.value < wanted or processor.applied < args.records
        ) and time.monotonic() < deadline:
            time.sleep(1.0)
            loads.append(_loadavg())
            print(
                f"  applied {processor.applied:,}, expired {processor.expired:,} "
                f"(visible {visible.value:,}), load {loads[-1]:.1f}",
                file=sys.stderr,
            )
        time.sleep(2.0)  # the steady publish after the flood, for comparison
        stop_steady.set()
        publisher.join(30)
        time.sleep(1.0)
        processor.stop()
        worker.join(30)
        for tail in tails.values():
            tail.collect()
        result = _report(args, tails, started, processor.transactions, loads, load_before)
    finally:
        broker.stop()
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def _report(
    args: Any,
    tails: dict[str, Tail],
    started: float,
    transactions: int,
    loads: list[float],
    load_before: float,
) -> dict[str, Any]:
    expired = tails["EXP"].expired
    lateness = [late for _, late, _ in expired]
    written_lateness = [late for _, _, late in expired]
    first = expired[0][0] if expired else 0.0
    last = expired[-1][0] if expired else 0.0
    flood_end = last or time.time() * 1000
    lags = tails["STEADY"].lags
    during = [lag for at, lag in lags if at <= flood_end]
    after = [lag for at, lag in lags if at > flood_end]
    return {
        "records": args.records,
        "expired_visible": len(expired),
        "all_expired": len(expired) >= args.records,
        "expired_per_s": round(len(expired) / max((last - first) / 1000, 1e-3)),
        "first_expiry_after_start_s": round((first - started) / 1000, 2) if expired else None,
        "lateness_ms": _quantiles(lateness),
        "tombstone_written_lateness_ms": _quantiles(written_lateness),
        "within_5s_of_due": sum(1 for late in lateness if late <= 5000),
        "flood_rate": args.flood_rate or "all written before the processor starts",
        "steady_rate": args.rate,
        "steady_written_to_visible_ms_during_flood": _quantiles(during),
        "steady_written_to_visible_ms_after": _quantiles(after),
        "steady_messages": len(lags),
        "transactions": transactions,
        "load_average": {
            "before": load_before,
            "max_during": max(loads, default=0.0),
            "mean_during": round(sum(loads) / max(len(loads), 1), 2),
        },
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(main())
