"""Publish -> subscriber latency through the whole live path, one subscriber.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one) and kafka-sow as
``sow serve`` runs it (processor in a child process; replica, subscription hub and gRPC
in this process). A subscriber process opens one ``subscribe`` stream over loopback
gRPC; a publisher process writes messages to the input topic at a steady rate with a
plain producer (each carries its send time). Latency is send -> received by the
subscriber, per message. Prints p50/p99/max per rate.

    PYTHONPATH=. python bench/subscribe_latency.py --rates 1000 10000 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor.app import start
from processor.config import Settings
from processor.keys import key_function
from processor.service.client import ServiceError, SowClient
from processor.topology.model import SowTopic, Topology


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _subscribe(address: str, topic: str, total: int, ready: Any, stop: Any, out: Any) -> None:
    """Child process: one subscribe stream; the latency of each change, sent back when
    all arrived or when ``stop`` is set."""
    client = SowClient(address)
    stream = client.subscribe(topic, sub_id="bench")

    def watch() -> None:
        stop.wait()
        stream.cancel()

    threading.Thread(target=watch, daemon=True).start()
    latencies: list[float] = []
    try:
        for message in stream:
            part = message.WhichOneof("part")
            if part == "registered":
                ready.set()
                continue
            if part != "change":
                continue
            now = time.perf_counter()
            latencies.append(now - orjson.loads(message.change.record.data)["t"])
            if len(latencies) >= total:
                break
    except ServiceError as exc:
        print(f"subscriber ended: {exc}", file=sys.stderr)
    finally:
        stream.cancel()
        client.close()
        out.send(latencies)


def _publish(bootstrap: str, topic: SowTopic, rate: int, total: int, out: Any) -> None:
    """Child process: ``total`` messages at ``rate`` with a plain producer, each carrying
    its send time (``perf_counter``: CLOCK_MONOTONIC, shared by the processes)."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    batch = max(1, rate // 1000)  # messages per millisecond tick
    started = time.perf_counter()
    for n in range(total):
        if n % batch == 0:
            delay = started + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        message = {"id": n % 10_000, "n": n, "t": time.perf_counter()}
        producer.produce(topic.kafka_topic, orjson.dumps(message), key_of(message).encode())
        producer.poll(0)
    producer.flush(30)
    out.send(time.perf_counter() - started)


def measure(app: Any, topic: SowTopic, rate: int, seconds: float) -> dict[str, Any]:
    """One rate: publisher and subscriber each in their own process, as real clients
    are (they do not share the service's interpreter lock)."""
    spawn = multiprocessing.get_context("spawn")
    total = int(rate * seconds)
    ready, stop = spawn.Event(), spawn.Event()
    received, subscriber_end = spawn.Pipe(duplex=False)
    subscriber = spawn.Process(
        target=_subscribe,
        args=(app.grpc_address, topic.name, total, ready, stop, subscriber_end),
    )
    subscriber.start()
    if not ready.wait(60):
        raise SystemExit("the subscriber did not register within 60 s")
    sent, publisher_end = spawn.Pipe(duplex=False)
    publisher = spawn.Process(
        target=_publish,
        args=(app.broker.bootstrap_servers, topic, rate, total, publisher_end),
    )
    publisher.start()
    sent_s = sent.recv()
    publisher.join(60)
    if not received.poll(30):  # what has not arrived 30 s after the last send is missing
        stop.set()
    latencies: list[float] = received.recv()
    subscriber.join(60)
    ms = [r * 1000 for r in latencies] or [float("nan")]
    return {
        "rate": rate,
        "sent_per_s": round(total / sent_s),
        "received": len(latencies),
        "sent": total,
        "p50_ms": round(_percentile(ms, 0.5), 2),
        "p99_ms": round(_percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    name = f"sublat-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp())
    topology_file = work / "lat.yaml"
    topology_file.write_text(
        f"topics:\n  - name: LAT\n    key: /id\n    kafka_topic: {name}\n    partitions: 1\n"
    )
    settings = Settings.from_env(
        topology=topology_file,
        state_dir=work / "state",
        group_id=name,
        grpc_address="127.0.0.1:0",
    )
    topic = SowTopic("LAT", keys=("/id",), kafka_topic=name)
    app = start(settings, topology=Topology({"LAT": topic}), processor_process=True)
    print(f"broker: {app.broker.description}", file=sys.stderr, flush=True)
    rows = []
    try:
        ready = app.processor_ready
        if ready is not None and not ready.wait(120):
            raise SystemExit("the processor did not start within 120 s")
        assert app.replica is not None
        app.replica.wait_caught_up(60)
        for rate in args.rates:
            row = measure(app, topic, rate, args.seconds)
            rows.append(row)
            print(json.dumps(row))
    finally:
        app.stop()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
