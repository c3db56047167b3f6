"""Publish -> subscriber latency through the whole live path, one subscriber, hop by hop.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one) and kafka-sow as
``sow serve`` runs it (processor in a child process; replica, subscription hub and gRPC
in this process). A subscriber process opens one ``subscribe`` stream over loopback
gRPC; a publisher process writes messages to the input topic at a steady rate with a
plain producer (each carries its send time). Latency is send -> received by the
subscriber, per message. Prints p50/p99/max per rate.

Each message's way is also cut into hops (issue 18's per-hop breakdown), all measured on
CLOCK_MONOTONIC shared by the processes, except the processor's apply time, which is its
changelog envelope's wall-clock millisecond (converted):

1. publish: send -> the broker's acknowledgement to the publisher's producer (linger and
   the append);
2. to processor: acknowledged -> the processor's batch that applied it began (its
   consumer's fetch);
3. commit: applied -> readable by a separate read_committed consumer of the changelog
   (apply, changelog produce, transaction commit, that consumer's fetch);
4. deliver: readable -> received by the subscriber (the replica's fetch and apply, the
   subscription's matching and the gRPC stream).

With ``SOW_LIVE_DELIVERY=false`` the service delivers at commit time (before issue 34);
the hop ``applied -> received`` is what delivery at apply time takes.

    PYTHONPATH=. python bench/subscribe_latency.py --rates 1000 10000 --seconds 10
    PYTHONPATH=. python bench/subscribe_latency.py --via unary stream --rates 500 1000
"""

from __future__ import annotations

import argparse
import itertools
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
from confluent_kafka import Consumer, Producer

from processor import changelog
from processor.app import start
from processor.client.sow_client import ServiceError, SowClient
from processor.config import Settings
from processor.keys import key_function
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
    latencies: dict[int, float] = {}
    try:
        for message in stream:
            part = message.WhichOneof("part")
            if part == "registered":
                ready.set()
                continue
            if part != "change":
                continue
            now = time.perf_counter()
            sent = orjson.loads(message.change.record.data)
            latencies[sent["n"]] = now - sent["t"]
            if len(latencies) >= total:
                break
    except ServiceError as exc:
        print(f"subscriber ended: {exc}", file=sys.stderr)
    finally:
        stream.cancel()
        client.close()
        out.send(latencies)


def _publish(
    bootstrap: str, topic: SowTopic, rate: int, total: int, out: Any, linger_ms: float = 5.0
) -> None:
    """Child process: ``total`` messages at ``rate`` with a plain producer, each carrying
    its send time (``perf_counter``: CLOCK_MONOTONIC, shared by the processes); sends
    back the time taken and each message's send -> acknowledged latency."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "log_level": 3})
    acked: dict[int, float] = {}

    def delivered(error: Any, record: Any) -> None:
        if error is None:
            sent = orjson.loads(record.value())
            acked[sent["n"]] = time.perf_counter() - sent["t"]

    batch = max(1, rate // 1000)  # messages per millisecond tick
    started = time.perf_counter()
    for n in range(total):
        if n % batch == 0:
            delay = started + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        message = {"id": n % 10_000, "n": n, "t": time.perf_counter()}
        producer.produce(
            topic.kafka_topic,
            orjson.dumps(message),
            key_of(message).encode(),
            on_delivery=delivered,
        )
        producer.poll(0)
    producer.flush(30)
    out.send((time.perf_counter() - started, acked))


def _publish_grpc(
    address: str, topic: str, rate: int, total: int, clients: int, stream: bool, out: Any
) -> None:
    """Child process: ``total`` messages at ``rate`` through the service's gateway, as a
    user's gRPC client sends them: unary Publish calls from ``clients`` threads (message
    n from thread n % clients, at its time), or one publish stream; sends back the time
    taken and each message's send -> acknowledged (persisted) latency."""
    acked: dict[int, float] = {}
    started = time.perf_counter()

    def message(n: int) -> bytes:
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return orjson.dumps({"id": n % 10_000, "n": n, "t": time.perf_counter()})

    with SowClient(address) as client:
        if stream:
            sent: dict[int, float] = {}

            def paced() -> Any:
                for n in range(total):
                    data = message(n)
                    sent[n] = orjson.loads(data)["t"]
                    yield data

            for n, _ in enumerate(client.publish_stream(topic, paced(), batch_size=1)):
                acked[n] = time.perf_counter() - sent[n]
        else:

            def unary(first: int) -> None:
                for n in range(first, total, clients):
                    data = message(n)
                    client.publish(topic, data)
                    acked[n] = time.perf_counter() - orjson.loads(data)["t"]

            threads = [threading.Thread(target=unary, args=(i,)) for i in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    out.send((time.perf_counter() - started, acked))


def _probe(
    bootstrap: str, changelog_topic: str, total: int, ready: Any, stop: Any, out: Any
) -> None:
    """Child process: a read_committed consumer of the changelog; per message, send ->
    applied by the processor (its envelope's apply time) and send -> readable here."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 1,
            "log_level": 3,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([changelog_topic], on_assign=lambda *_: assigned.set())
    while not assigned.is_set():
        consumer.poll(0.1)
    ready.set()
    wall_minus_monotonic = time.time() - time.perf_counter()
    applied: dict[int, float] = {}
    visible: dict[int, float] = {}
    while len(visible) < total and not stop.is_set():
        first = consumer.poll(0.05)  # consume(n, t) would wait for n records or t
        for record in [first, *consumer.consume(10_000, 0)] if first is not None else ():
            now = time.perf_counter()
            value, key = record.value(), record.key()
            if record.error() or value is None or key is None or key.startswith(b"\x00"):
                continue
            envelope = changelog.decode(value)
            sent = orjson.loads(envelope.data)
            n, t = sent["n"], sent["t"]
            visible[n] = now - t
            applied[n] = envelope.apply_time_ms / 1000 - wall_minus_monotonic - t
    consumer.close()
    out.send((applied, visible))


def _hops(
    acked: dict[int, float],
    applied: dict[int, float],
    visible: dict[int, float],
    received: dict[int, float],
) -> dict[str, dict[str, float]]:
    """p50 / p99 (ms) of each hop over the messages seen at both its ends."""
    ends = {"sent": dict.fromkeys(received, 0.0), "acked": acked, "applied": applied}
    ends |= {"readable": visible, "received": received}
    names = list(ends)
    hops: dict[str, dict[str, float]] = {}
    # applied -> received: delivered at apply time, the commit is not on the way.
    for first, end in [*itertools.pairwise(names), ("applied", "received")]:
        both = [
            ends[end][n] - ends[first][n] for n in received if n in ends[first] and n in ends[end]
        ]
        ms = [d * 1000 for d in both] or [float("nan")]
        hops[f"{first} -> {end}"] = {
            "p50_ms": round(_percentile(ms, 0.5), 2),
            "p99_ms": round(_percentile(ms, 0.99), 2),
            "messages": len(both),
        }
    return hops


def measure(
    app: Any,
    topic: SowTopic,
    rate: int,
    seconds: float,
    via: str = "kafka",
    probing: bool = True,
    linger_ms: float = 5.0,
) -> dict[str, Any]:
    """One rate: publisher and subscriber each in their own process, as real clients
    are (they do not share the service's interpreter lock). ``via``: ``kafka`` (a plain
    producer), ``unary`` (4 gRPC clients' unary Publish calls) or ``stream`` (one gRPC
    publish stream). Without ``probing``, no changelog consumer: no hops but the first
    (it costs the broker and the machine what a user's set-up does not)."""
    spawn = multiprocessing.get_context("spawn")
    total = int(rate * seconds)
    ready, stop = spawn.Event(), spawn.Event()
    received, subscriber_end = spawn.Pipe(duplex=False)
    subscriber = spawn.Process(
        target=_subscribe,
        args=(app.grpc_address, topic.name, total, ready, stop, subscriber_end),
    )
    subscriber.start()
    # The probe stops on an event of its own: setting one whose waiter (the subscriber's
    # watch thread) died with its process blocks for good.
    probe_ready, probe_stop = spawn.Event(), spawn.Event()
    seen, probe_end = spawn.Pipe(duplex=False)
    if not probing:
        probe_ready.set()
        probe_end.send(({}, {}))
    probe = spawn.Process(
        target=_probe,
        args=(
            app.broker.bootstrap_servers,
            topic.changelog_topic,
            total,
            probe_ready,
            probe_stop,
            probe_end,
        ),
    )
    if probing:
        probe.start()
    if not ready.wait(60) or not probe_ready.wait(60):
        raise SystemExit("the subscriber or the changelog probe did not start within 60 s")
    sent, publisher_end = spawn.Pipe(duplex=False)
    if via == "kafka":
        target: Any = _publish
        args: tuple[Any, ...] = (
            app.broker.bootstrap_servers,
            topic,
            rate,
            total,
            publisher_end,
            linger_ms,
        )
    else:
        target = _publish_grpc
        args = (app.grpc_address, topic.name, rate, total, 4, via == "stream", publisher_end)
    publisher = spawn.Process(target=target, args=args)
    publisher.start()
    sent_s, acked = sent.recv()
    publisher.join(60)
    if not received.poll(30):  # what has not arrived 30 s after the last send is missing
        stop.set()
    latencies: dict[int, float] = received.recv()
    subscriber.join(60)
    if not seen.poll(5):
        probe_stop.set()
    applied, visible = seen.recv()
    if probing:
        probe.join(60)
    ms = [r * 1000 for r in latencies.values()] or [float("nan")]
    return {
        "rate": rate,
        "via": via,
        "linger_ms": linger_ms if via == "kafka" else None,
        "live_delivery": app.settings.live_delivery,
        "sent_per_s": round(total / sent_s),
        "received": len(latencies),
        "sent": total,
        "p50_ms": round(_percentile(ms, 0.5), 2),
        "p99_ms": round(_percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        "load_average": round(os.getloadavg()[0], 2),
        # Live units the replica applied, dropped (the changelog brought them first), and
        # committed records it dropped as handed over already (all since start).
        "live_units": {
            "applied": app.replica.live.applied,
            "dropped": app.replica.live.dropped,
            "repeats": app.replica.live.repeated,
        },
        "hops": _hops(acked, applied, visible, latencies),
        "raw": {"acked": acked, "applied": applied, "visible": visible, "received": latencies},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=5.0,
        help="the plain producer's linger.ms (5: librdkafka's default; 0 sends at once, "
        "as a publisher that wants the lowest latency is set up)",
    )
    parser.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="no read_committed changelog consumer (the hops after the first are not "
        "measured; the probe polls the broker every millisecond and decodes every record)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=30.0,
        help="seconds of publishing at the highest rate before measuring, not reported "
        "(the embedded broker is new: the JVM compiles its hot paths meanwhile)",
    )
    parser.add_argument(
        "--raw-out",
        type=Path,
        default=None,
        help="also write each message's hop times (s), one file per run: RAW.VIA.RATE.json",
    )
    parser.add_argument(
        "--via",
        nargs="+",
        default=["kafka"],
        choices=["kafka", "unary", "stream"],
        help="how messages are published: a plain Kafka producer (--linger-ms), 4 gRPC "
        "clients' unary Publish calls, or one gRPC publish stream",
    )
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
        if args.warmup > 0:  # a new broker's JIT compiles for its first minute or so
            print(f"warming up: {args.warmup:g} s at {max(args.rates)} msg/s", file=sys.stderr)
            measure(app, topic, max(args.rates), args.warmup, args.via[0], False)
        for via in args.via:
            for rate in args.rates:
                row = measure(app, topic, rate, args.seconds, via, args.probe, args.linger_ms)
                raw = row.pop("raw")
                if args.raw_out is not None:
                    args.raw_out.with_suffix(f".{via}.{rate}.json").write_text(json.dumps(raw))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        app.stop()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
