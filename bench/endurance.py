"""Endurance: a steady publish load on the embedded default for a long time.

Starts ``sow serve`` as a user does (no bootstrap servers: the embedded broker, Apache Kafka
or, with ``--embedded-broker tansu``, Tansu), then ``--clients`` publisher processes share
``--rate`` messages per second for ``--minutes`` (streamed publishes by default; ``--unary``
sends one gRPC call per message, which Python gRPC caps at a few hundred calls per second
on 2 cores). One subscriber process receives every change and measures publish ->
delivered latency from the send time each message carries. Every 10 s the broker's and
the server's CPU and memory are sampled from /proc.

At the end: every acknowledged publish must be in the SOW (a query at the acknowledged
positions equals the publishers' model) and the subscriber must have received each one.
Prints one JSON object (also written to ``--json-out``) with per-minute p50/p99, the first
and last five minutes' p99, and the resource samples.

    PYTHONPATH=. python bench/endurance.py --minutes 30 --rate 2000 --json-out \\
        bench/results/endurance_kafka.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from processor.client.sow_client import ServiceError, SowClient
from processor.log.broker import free_loopback_port
from processor.wire import sow_pb2

TOPOLOGY = "topics:\n  - name: BENCH\n    key: [/id]\n    partitions: 2\n"
#: Keys per publisher (each publisher owns its own range, so the model is exact).
KEYS_PER_CLIENT = 250
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def say(text: str) -> None:
    sys.stderr.write(f"[endurance {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_serve(workdir: Path, address: str, embedded: str) -> tuple[subprocess.Popen[str], float]:
    """``sow serve`` on the embedded default; the process and seconds until it was ready."""
    (workdir / "topology.yaml").write_text(TOPOLOGY)
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    began = time.perf_counter()
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
            address,
            "--embedded-broker",
            embedded,
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    log = (workdir / "serve.log").open("w")
    for line in process.stderr:
        log.write(line)
        if "kafka-sow is ready" in line:
            break
    else:
        raise SystemExit(f"sow serve exited with {process.wait()}; see {workdir / 'serve.log'}")
    ready = time.perf_counter() - began

    def drain() -> None:
        for line in process.stderr or ():
            log.write(line)
            log.flush()

    threading.Thread(target=drain, daemon=True).start()
    return process, ready


def children(pid: int) -> list[int]:
    """Every descendant process of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                found.append(child)
                frontier.append(child)
    return found


def usage(pid: int) -> tuple[float, int] | None:
    """CPU seconds used so far and resident bytes of one process (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[21]) * PAGE


def broker_pid(serve: int) -> int:
    for pid in children(serve):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"kafka.Kafka" in command or b"tansu" in command:
            return pid
    raise SystemExit("no broker process under sow serve")


def sampler(pids: dict[str, int], stop: threading.Event, out: list[dict[str, Any]]) -> None:
    """Every 10 s: each process's CPU share over the interval (1.0 = one core) and RSS."""
    last = {name: usage(pid) for name, pid in pids.items()}
    began = time.monotonic()
    previous = began
    while not stop.wait(10):
        now = time.monotonic()
        row: dict[str, Any] = {
            "t_s": round(now - began, 1),
            "load1": float(Path("/proc/loadavg").read_text().split()[0]),
        }
        for name, pid in pids.items():
            current = usage(pid)
            before = last[name]
            if current is None or before is None:
                continue
            row[f"{name}_cpu"] = round((current[0] - before[0]) / (now - previous), 3)
            row[f"{name}_rss_mb"] = round(current[1] / 2**20, 1)
            last[name] = current
        previous = now
        out.append(row)


def paced(client_id: int, rate: float, seconds: float, sent: list[int]) -> Iterator[bytes]:
    """Messages of one publisher at ``rate`` per second for ``seconds``; each carries its
    send time (``perf_counter``: CLOCK_MONOTONIC, shared by processes)."""
    began = time.perf_counter()
    n = 0
    while True:
        now = time.perf_counter()
        if now - began >= seconds:
            return
        pause = began + n / rate - now
        if pause > 0:
            time.sleep(pause)
        key = client_id * KEYS_PER_CLIENT + n % KEYS_PER_CLIENT
        sent.append(n)
        yield orjson.dumps({"id": key, "c": client_id, "n": n, "t": time.perf_counter()})
        n += 1


def replies(
    client: SowClient, messages: Iterator[bytes], unary: bool
) -> Iterator[tuple[bytes, Any]]:
    """Each message with its publish reply (None: refused), one gRPC call per message or
    on one stream."""
    if unary:
        for data in messages:
            try:
                yield data, client.publish("BENCH", data, timeout=30)
            except ServiceError:
                yield data, None
        return
    pending: list[bytes] = []

    def remembered() -> Iterator[bytes]:
        for data in messages:
            pending.append(data)
            yield data

    for reply in client.publish_stream("BENCH", remembered(), batch_size=1):
        yield pending.pop(0), (None if reply.error_code else reply)


def publisher(
    address: str, client_id: int, rate: float, seconds: float, unary: bool, out: Any
) -> None:
    """Child process: publish, and send back the model (last value per key acknowledged),
    the last acknowledged position per partition and the counts."""
    client = SowClient(address)
    model: dict[str, bytes] = {}
    ends: dict[int, int] = {}
    acked = errors = 0
    sent: list[int] = []
    for data, reply in replies(client, paced(client_id, rate, seconds, sent), unary):
        if reply is None:
            errors += 1
            continue
        model[reply.sow_key] = data
        position = reply.position
        ends[position.partition] = max(ends.get(position.partition, -1), position.offset)
        acked += 1
    client.close()
    out.send({"model": model, "ends": ends, "acked": acked, "errors": errors, "sent": len(sent)})


def subscriber(address: str, ready: Any, stop: Any, out: Any) -> None:
    """Child process: one subscribe stream; (receive time, latency) of every change."""
    client = SowClient(address)
    stream = client.subscribe("BENCH", sub_id="endurance")

    def watch() -> None:
        stop.wait()
        stream.cancel()

    threading.Thread(target=watch, daemon=True).start()
    samples: list[tuple[float, float]] = []
    try:
        for message in stream:
            part = message.WhichOneof("part")
            if part == "registered":
                ready.set()
            elif part == "change":
                now = time.perf_counter()
                samples.append((now, now - orjson.loads(message.change.record.data)["t"]))
    except ServiceError as exc:
        if not stop.is_set():
            print(f"subscriber ended: {exc}", file=sys.stderr)
    finally:
        client.close()
        out.send(samples)


def per_minute(samples: list[tuple[float, float]], began: float) -> list[dict[str, Any]]:
    minutes: dict[int, list[float]] = {}
    for at, latency in samples:
        minutes.setdefault(int((at - began) // 60), []).append(latency * 1000)
    return [
        {
            "minute": m,
            "messages": len(v),
            "p50_ms": round(percentile(v, 0.5), 2),
            "p99_ms": round(percentile(v, 0.99), 2),
            "max_ms": round(max(v), 2),
        }
        for m, v in sorted(minutes.items())
    ]


def window_p99(samples: list[tuple[float, float]], start: float, end: float) -> float:
    return percentile([lat * 1000 for at, lat in samples if start <= at < end], 0.99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages/s, all clients")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--unary", action="store_true", help="one gRPC call per message")
    parser.add_argument("--embedded-broker", default="kafka", choices=("kafka", "tansu"))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    seconds = args.minutes * 60
    workdir = Path(tempfile.mkdtemp(prefix="sow-endurance-"))
    address = f"127.0.0.1:{free_loopback_port()}"
    process_start = time.perf_counter()
    serve, ready_s = start_serve(workdir, address, args.embedded_broker)
    say(f"sow serve on {args.embedded_broker} ready in {ready_s:.1f}s; log in {workdir}")
    pids = {"broker": broker_pid(serve.pid), "serve": serve.pid}
    for pid in children(serve.pid):
        if b"processor.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
            pids["processor"] = pid
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    sub_out, sub_in = context.Pipe(duplex=False)
    sub = context.Process(target=subscriber, args=(address, ready, stop, sub_in))
    sub.start()
    if not ready.wait(60):
        raise SystemExit("the subscriber did not register")
    samples_taken: list[dict[str, Any]] = []
    sampling = threading.Event()
    threading.Thread(target=sampler, args=(pids, sampling, samples_taken), daemon=True).start()
    pipes, publishers = [], []
    began = time.perf_counter()
    for c in range(args.clients):
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(
            target=publisher,
            args=(address, c, args.rate / args.clients, seconds, args.unary, send),
        )
        worker.start()
        pipes.append(receive)
        publishers.append(worker)
    say(f"{args.clients} publishers at {args.rate:.0f} msg/s for {args.minutes:g} min")
    results = [pipe.recv() for pipe in pipes]
    for worker in publishers:
        worker.join()
    published_s = time.perf_counter() - began
    model: dict[str, bytes] = {}
    ends: dict[int, int] = {}
    for result in results:
        model.update(result["model"])
        for partition, offset in result["ends"].items():
            ends[partition] = max(ends.get(partition, -1), offset)
    acked = sum(r["acked"] for r in results)
    errors = sum(r["errors"] for r in results)
    say(f"published: {acked:,} acknowledged, {errors} refused, in {published_s:.0f}s")
    with SowClient(address) as client:
        positions = [
            sow_pb2.Position(topic="BENCH", partition=p, offset=o) for p, o in ends.items()
        ]
        records, _, _ = client.query("BENCH", min_position=positions, timeout=300)
        sow = {r.sow_key: r.data for r in records}
    time.sleep(2)  # the last changes reach the subscriber
    stop.set()
    delivered: list[tuple[float, float]] = sub_out.recv() if sub_out.poll(60) else []
    sub.join(30)
    sampling.set()
    serve.send_signal(2)
    try:
        serve.wait(60)
    except subprocess.TimeoutExpired:
        serve.kill()
    end = began + published_s
    report = {
        "broker": args.embedded_broker,
        "mode": "unary" if args.unary else "stream",
        "minutes": args.minutes,
        "rate": args.rate,
        "clients": args.clients,
        "serve_ready_s": round(ready_s, 1),
        "acknowledged": acked,
        "refused": errors,
        "achieved_rate": round(acked / published_s, 1),
        "delivered": len(delivered),
        "sow_equals_model": sow == model,
        "sow_keys": len(sow),
        "first_5min_p99_ms": round(window_p99(delivered, began, began + 300), 2),
        "last_5min_p99_ms": round(window_p99(delivered, end - 300, end + 60), 2),
        "per_minute": per_minute(delivered, began),
        "resources": samples_taken,
        "wall_s": round(time.perf_counter() - process_start, 1),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    ok = report["sow_equals_model"] and len(delivered) == acked and errors == 0
    say("every publish applied and delivered" if ok else "MISMATCH: see the report")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
