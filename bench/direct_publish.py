"""Direct Kafka publisher vs the raw producer: what a Python publisher pays per message
when it skips gRPC (issue 18 item 1; the target is at least 0.5x the raw producer).

One run, the embedded broker (Apache Kafka unless ``KAFKA_BOOTSTRAP_SERVERS`` names
another), interleaved rounds of:

1. raw: the confluent-kafka producer (idempotent, ``produce`` then ``flush``) writing the
   messages to a topic of 2 partitions, keyed by id: no SOW, no checks;
2. acked: the same producer and messages plus what any publisher with duplicate detection
   and per-message acknowledgements pays before doing anything else: the two headers
   (publisher name, sequence number) and a delivery callback per message, each position
   kept. No SOW, no checks: this is the floor under the direct publisher;
3. direct: ``DirectPublisher.publish_stream`` writing the same messages to a SOW topic's
   input log, each validated, keyed by its SowKey, with duplicate-detection headers,
   every acknowledgement awaited.

Each path's figure is messages per second (first produce -> last acknowledgement) and
the CPU time of this process per message. Wall time from process start is reported too.

    PYTHONPATH=. python bench/direct_publish.py --json-out bench/results/kafka/direct_publish.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

import orjson  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from processor.app import topic_specs  # noqa: E402
from processor.client.direct import DirectPublisher  # noqa: E402
from processor.log.broker import start_broker  # noqa: E402
from processor.log.kafka.settings import ensure_topics  # noqa: E402
from processor.topology.model import SowTopic, Topology  # noqa: E402


def say(text: str) -> None:
    sys.stderr.write(f"[direct-publish {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def message(i: int, keys: int) -> bytes:
    return orjson.dumps(
        {"id": i % keys, "symbol": "IBM", "price": 100.0 + i % 50, "qty": i % 7 + 1}
    )


def _timed(run: Any, count: int) -> dict[str, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"msgs_per_s": count / wall, "seconds": wall, "cpu_us_per_msg": cpu / count * 1e6}


def raw(
    bootstrap: str, payloads: list[bytes], keys: int, round_: int, acked: bool = False
) -> dict[str, Any]:
    topic = f"bench-direct-{'acked' if acked else 'raw'}-{os.getpid()}-{round_}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "log_level": 3,
        }
    )

    offsets: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        offsets.append(message.offset())

    def run() -> None:
        for i, payload in enumerate(payloads):
            while True:
                try:
                    if acked:
                        headers = [
                            ("sow.publisher", b"bench-publisher"),
                            ("sow.sequence", b"%d" % i),
                        ]
                        producer.produce(
                            topic,
                            payload,
                            str(i % keys).encode(),
                            headers=headers,
                            on_delivery=delivered,
                        )
                    else:
                        producer.produce(topic, payload, str(i % keys).encode())
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(120) == 0
        assert not acked or len(offsets) == len(payloads)

    return _timed(run, len(payloads))


def direct(bootstrap: str, payloads: list[bytes], round_: int) -> dict[str, Any]:
    topic = SowTopic("BENCH", keys=("/id",), kafka_topic=f"bench-direct-{os.getpid()}-{round_}")
    topology = Topology({"BENCH": topic})
    ensure_topics(bootstrap, topic_specs(topology, f"bench-direct-{os.getpid()}.dead-letter"))
    refused = 0
    with DirectPublisher(bootstrap, topology) as publisher:

        def run() -> None:
            nonlocal refused
            for result in publisher.publish_stream("BENCH", payloads, batch_size=5000):
                refused += isinstance(result, Exception)

        figures = _timed(run, len(payloads))
    assert refused == 0, f"{refused} messages refused"
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    broker = start_broker(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    say(f"broker: {broker.description}")
    payloads = [message(i, args.keys) for i in range(args.messages)]
    rounds: dict[str, list[dict[str, Any]]] = {"raw": [], "acked": [], "direct": []}
    try:
        for round_ in range(1, args.rounds + 1):
            for path, runs in rounds.items():
                if path != "direct":
                    figures = raw(
                        broker.bootstrap_servers, payloads, args.keys, round_, path == "acked"
                    )
                else:
                    figures = direct(broker.bootstrap_servers, payloads, round_)
                runs.append(figures)
                say(
                    f"round {round_} {path}: {figures['msgs_per_s']:,.0f} msg/s, "
                    f"{figures['cpu_us_per_msg']:.1f} CPU us/msg"
                )
    finally:
        broker.stop()
    medians = {
        path: statistics.median(r["msgs_per_s"] for r in runs) for path, runs in rounds.items()
    }
    ratio = medians["direct"] / medians["raw"]
    print("| path | msgs/s (median) | rounds | CPU us/msg (median) | vs raw |")
    print("|---|---:|---|---:|---:|")
    for path, runs in rounds.items():
        each = ", ".join(f"{r['msgs_per_s']:,.0f}" for r in runs)
        cpu = statistics.median(r["cpu_us_per_msg"] for r in runs)
        versus = medians[path] / medians["raw"]
        print(f"| {path} | {medians[path]:,.0f} | {each} | {cpu:.1f} | {versus:.2f}x |")
    wall = time.perf_counter() - STARTED
    say(f"direct vs raw: {ratio:.2f}x (target 0.5x); wall time from process start {wall:.1f}s")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M"),
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "broker": broker.description,
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "rounds": rounds,
                    "medians_msgs_per_s": medians,
                    "direct_vs_raw": ratio,
                    "wall_time_s": wall,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
