"""Publish -> subscriber latency of a plain topic (no SOW) next to a SOW topic.

One process: the embedded broker, processor, read replica, plain-topic tail and gRPC
service on loopback. A client subscribes to a topic, then publishes one message at a time
and waits until its subscription delivers it; the first ``--warmup`` messages are not
counted. A plain topic's message skips the processor and the changelog (input topic ->
plain tail -> subscription); a SOW topic's goes through both.

    PYTHONPATH=. python bench/plain_latency.py --messages 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from processor.client.sow_client import SowClient
from processor.log.broker import start_broker
from processor.topology.model import PlainTopic, SowTopic, Topology
from tests.integration.harness import running_sow


def measure(client: SowClient, topic: str, messages: int, warmup: int) -> list[float]:
    """Milliseconds from each publish until its subscription delivered it."""
    stream = client.subscribe(topic)
    received = iter(stream)
    next(received)  # registered
    latencies = []
    for i in range(messages + warmup):
        started = time.perf_counter()
        client.publish(topic, f'{{"id": {i % 10}, "n": {i}}}'.encode())
        next(received)
        latencies.append((time.perf_counter() - started) * 1000)
    stream.cancel()
    return sorted(latencies[warmup:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    topology = Topology(
        {"ORDERS": SowTopic("ORDERS", keys=("/id",), kafka_topic="bench.ORDERS")},
        (),
        {"TICKS": PlainTopic("TICKS", kafka_topic="bench.TICKS")},
    )
    try:
        with (
            tempfile.TemporaryDirectory() as state,
            running_sow(broker.bootstrap_servers, topology, Path(state), "bench") as (_, client),
        ):
            for topic, kind in (("TICKS", "plain"), ("ORDERS", "SOW")):
                ms = measure(client, topic, args.messages, args.warmup)
                p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
                print(
                    f"{topic} ({kind}): publish -> delivered median "
                    f"{statistics.median(ms):.2f} ms, p99 {p99:.2f} ms ({len(ms)} messages)"
                )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
