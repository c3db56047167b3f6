"""Publish benchmark: what a publisher pays to get messages into the SOW, through `sow serve`.

One run, one broker (the embedded one, or ``KAFKA_BOOTSTRAP_SERVERS``), one
`sow serve` process (processor + replica + gRPC, started as a user starts it), and beside it
the raw confluent-kafka producer writing the same messages to the same broker:

1. raw producer: N messages (``produce`` then ``flush``), no SOW.
2. streaming publish (``SowClient.publish_stream``) of N messages from one client; the rate
   over the first and the last 100k acknowledged messages is reported too.
3. unary Publish from ``--clients`` concurrent client processes.
4. publish -> visible: a unary publish, then SowQuery by SowKey every millisecond until the
   new value shows (no min_position), at idle and with a background streaming publish at
   ``--background`` msg/s from another process.

    python bench/publish.py --json-out bench/results/publish.json

Progress goes to stderr, a Markdown table to stdout, every figure to ``--json-out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from proc_cpu import CpuMeter

from processor.client.sow_client import SowClient
from processor.log.broker import start_broker

TOPOLOGY = """\
topics:
  - name: BENCH
    message_type: json
    key: /id
    partitions: 2
"""


def say(text: str) -> None:
    sys.stderr.write(f"[publish-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def message(i: int, keys: int) -> bytes:
    return orjson.dumps(
        {"id": i % keys, "symbol": "IBM", "price": 100.0 + i % 50, "qty": i % 7 + 1}
    )


def start_serve(
    bootstrap: str, workdir: Path, port: int, fetch_wait_ms: int
) -> tuple[subprocess.Popen[str], float]:
    """`sow serve` as a user runs it; returns the process and seconds until it was ready."""
    (workdir / "topology.yaml").write_text(TOPOLOGY)
    # The service reaches this benchmark's broker as an external one; give it the fetch
    # wait `sow serve` would choose for that broker itself (unless one is set).
    env = {
        "SOW_FETCH_WAIT_MS": str(fetch_wait_ms),
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
    }
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "serve",
            "--topology",
            str(workdir / "topology.yaml"),
            "--state-dir",
            str(workdir / "state"),
            "--grpc-address",
            f"127.0.0.1:{port}",
            "--group-id",
            f"bench-{port}",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "kafka-sow is ready" in line:
            break
        if "error" in line.lower() and "sow" in line:
            sys.stderr.write(line)
    else:
        raise SystemExit(f"sow serve exited with {process.wait()}")
    ready = time.perf_counter() - started
    # Keep draining its log so the pipe never blocks it.
    log = workdir / "serve.log"

    def drain() -> None:
        with log.open("w") as out:
            for line in process.stderr or ():
                out.write(line)

    import threading

    threading.Thread(target=drain, daemon=True).start()
    return process, ready


def raw_producer(
    bootstrap: str, count: int, keys: int, processes: dict[str, int], copies: int = 1
) -> dict[str, Any]:
    """The raw producer's run, to a topic of ``copies`` replicas (as kafka-sow's get)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-raw-{os.getpid()}"
    for future in admin.create_topics([NewTopic(topic, 2, copies)]).values():
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
    payloads = [message(i, keys) for i in range(count)]
    meter = CpuMeter(processes, with_children=("sow serve",))
    started = time.perf_counter()
    for i, payload in enumerate(payloads):
        while True:
            try:
                producer.produce(topic, payload, str(i % keys).encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    return {
        "messages": count,
        "seconds": elapsed,
        "msgs_per_s": count / elapsed,
        "cpu_us_per_msg": per_message(meter, count),
    }


def per_message(meter: CpuMeter, count: int) -> dict[str, float]:
    """CPU µs per message of each process the meter watches (the sow serve child is
    its processor)."""
    return {name: round(used / count * 1e6, 2) for name, used in meter.used().items()}


def streaming(address: str, count: int, keys: int) -> dict[str, Any]:
    marks: list[float] = []
    refused = 0
    vector: dict[int, Any] = {}
    with SowClient(address) as client:
        started = time.perf_counter()
        source = (message(i, keys) for i in range(count))
        for done, reply in enumerate(client.publish_stream("BENCH", source, batch_size=1000), 1):
            if reply.position is None:
                refused += 1
            else:
                vector[reply.position.partition] = reply.position
            if done % 100_000 == 0:
                marks.append(time.perf_counter())
                say(f"  streaming: {done:,} acknowledged")
        elapsed = time.perf_counter() - started
    edges = [started, *marks]
    rates = [100_000 / (b - a) for a, b in itertools.pairwise(edges)]
    return {
        "messages": count,
        "refused": refused,
        "seconds": elapsed,
        "msgs_per_s": count / elapsed,
        "per_100k_msgs_per_s": rates,
        "last_vs_first_100k": rates[-1] / rates[0] if len(rates) >= 2 else None,
        "_vector": list(vector.values()),
    }


def _unary_client(address: str, start: int, count: int, keys: int, out: Any) -> None:
    with SowClient(address) as client:
        client.publish("BENCH", message(start, keys))
        out.put(("ready", 0.0))
        began = time.perf_counter()
        for i in range(start, start + count):
            client.publish("BENCH", message(i, keys))
        out.put(("done", time.perf_counter() - began))


def unary(address: str, clients: int, per_client: int, keys: int) -> dict[str, Any]:
    # Client processes are spawned, not forked: this process already uses gRPC.
    context = mp.get_context("spawn")
    out: Any = context.Queue()
    processes = [
        context.Process(target=_unary_client, args=(address, k * per_client, per_client, keys, out))
        for k in range(clients)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        out.get(timeout=60)  # every client connected
    started = time.perf_counter()
    seconds = [out.get(timeout=600)[1] for _ in processes]
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join()
    total = clients * per_client
    return {
        "clients": clients,
        "messages": total,
        "seconds": elapsed,
        "msgs_per_s": total / elapsed,
        "slowest_client_s": max(seconds),
    }


def _echo_server(port: int) -> None:
    """A gRPC server whose Publish does no work: what unary gRPC alone costs here."""
    from concurrent import futures

    import grpc

    from processor.wire import sow_pb2, sow_pb2_grpc

    class Echo(sow_pb2_grpc.SowServicer):
        def Publish(self, request: Any, context: Any) -> Any:  # noqa: N802
            return sow_pb2.PublishReply(
                position=sow_pb2.Position(topic="BENCH", partition=0, offset=1), sow_key="1"
            )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    sow_pb2_grpc.add_SowServicer_to_server(Echo(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def echo_ceiling(clients: int, per_client: int, keys: int) -> dict[str, Any]:
    """Unary calls per second to a server that does nothing, same clients as ``unary``."""
    context = mp.get_context("spawn")
    port = 51400 + os.getpid() % 300
    server = context.Process(target=_echo_server, args=(port,), daemon=True)
    server.start()
    time.sleep(2)
    try:
        return unary(f"127.0.0.1:{port}", clients, per_client, keys)
    finally:
        server.kill()


def _background(address: str, rate: int, stop: Any) -> None:
    def paced() -> Any:
        i = 0
        began = time.perf_counter()
        while not stop.is_set():
            due = began + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            yield message(10_000_000 + i, 50_000)
            i += 1

    with SowClient(address) as client:
        for _ in client.publish_stream("BENCH", paced(), batch_size=max(rate // 500, 1)):
            pass


def visibility(address: str, samples: int) -> dict[str, Any]:
    """Publish -> first query (by SowKey, no min_position) that shows the new value."""
    latencies: list[float] = []
    with SowClient(address) as client:
        for n in range(samples):
            payload = orjson.dumps({"id": "probe", "n": n})
            began = time.perf_counter()
            key = client.publish("BENCH", payload).sow_key
            while True:
                records, _, _ = client.query("BENCH", sow_keys=[key])
                if records and orjson.loads(records[0].data).get("n") == n:
                    break
                time.sleep(0.001)  # poll, without the probe itself loading the service
            latencies.append((time.perf_counter() - began) * 1000)
    latencies.sort()
    return {
        "samples": samples,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max_ms": latencies[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=2_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--background", type=int, default=20_000)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--brokers", type=int, default=1, help="3: the embedded replicated cluster (RF 3)"
    )
    args = parser.parse_args()

    broker = start_broker(nodes=args.brokers)
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "broker": broker.description,
        "args": vars(args) | {"json_out": str(args.json_out)},
    }
    serve = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            port = 50600 + os.getpid() % 300
            say("starting sow serve")
            serve, ready = start_serve(
                broker.bootstrap_servers, Path(tmp), port, broker.fetch_wait_ms
            )
            results["serve_ready_s"] = ready
            address = f"127.0.0.1:{port}"
            say(f"sow serve ready after {ready:.1f}s; raw producer, {args.messages:,} messages")
            processes = {"bench (the client)": os.getpid(), "sow serve": serve.pid}
            broker_pid = getattr(broker, "pid", None)  # the embedded brokers have one
            if broker_pid:
                processes["broker"] = broker_pid
            for node in getattr(broker, "nodes", ()):  # a cluster's members, each
                processes[f"broker {node.node_id}"] = node.pid
            results["raw_producer"] = raw_producer(
                broker.bootstrap_servers, args.messages, args.keys, processes, min(args.brokers, 3)
            )
            say(f"  {results['raw_producer']['msgs_per_s']:,.0f} msg/s; streaming publish")
            meter = CpuMeter(processes, with_children=("sow serve",))
            results["streaming"] = streaming(address, args.messages, args.keys)
            results["streaming"]["cpu_us_per_msg"] = per_message(meter, args.messages)
            vector = results["streaming"].pop("_vector")
            say(f"  {results['streaming']['msgs_per_s']:,.0f} msg/s; waiting until applied")
            began = time.perf_counter()
            with SowClient(address) as client:
                client.query(
                    "BENCH", top_n=1, min_position=vector, timeout=600, timeout_seconds=590
                )
            results["streaming"]["applied_after_s"] = time.perf_counter() - began
            say(f"  applied {results['streaming']['applied_after_s']:.1f}s later; unary publish")
            results["unary"] = unary(address, args.clients, args.per_client, args.keys)
            say(f"  {results['unary']['msgs_per_s']:,.0f} msg/s; unary gRPC ceiling (echo)")
            results["unary_echo_ceiling"] = echo_ceiling(args.clients, args.per_client, args.keys)
            say(f"  {results['unary_echo_ceiling']['msgs_per_s']:,.0f} calls/s; visibility at idle")
            time.sleep(2)  # let the processor finish the backlog: "idle"
            results["visible_idle"] = visibility(address, args.samples)
            say(f"  {results['visible_idle']}; visibility under load")
            context = mp.get_context("spawn")
            stop = context.Event()
            loader = context.Process(target=_background, args=(address, args.background, stop))
            loader.start()
            time.sleep(2)
            results["visible_loaded"] = visibility(address, args.samples)
            results["visible_loaded"]["background_msgs_per_s"] = args.background
            stop.set()
            loader.join(30)
            say(f"  {results['visible_loaded']}")
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(30)
        broker.stop()
    raw = results["raw_producer"]["msgs_per_s"]
    rows = [
        ("raw confluent-kafka producer (no SOW)", raw, "1.00x"),
        (
            "streaming publish, 1 client",
            results["streaming"]["msgs_per_s"],
            f"{results['streaming']['msgs_per_s'] / raw:.2f}x",
        ),
        (
            f"unary Publish, {args.clients} client processes",
            results["unary"]["msgs_per_s"],
            f"{results['unary']['msgs_per_s'] / raw:.2f}x",
        ),
    ]
    echo = results["unary_echo_ceiling"]["msgs_per_s"]
    rows.append((f"unary gRPC call that does nothing, {args.clients} client processes", echo, "-"))
    print("| path | msgs/s | vs raw |\n|---|---:|---:|")
    for name, rate, ratio in rows:
        print(f"| {name} | {rate:,.0f} | {ratio} |")
    for name in ("raw_producer", "streaming"):
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in results[name]["cpu_us_per_msg"].items())
        print(f"\n{name}: CPU µs per message: {cpu}")
    for name in ("visible_idle", "visible_loaded"):
        v = results[name]
        print(
            f"\n{name}: p50 {v['p50_ms']:.1f} ms, p99 {v['p99_ms']:.1f} ms, max {v['max_ms']:.1f}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
