"""`sow publish` as a user runs it: a file of JSON lines piped into the command beside a
running `sow serve`, wall time from the command's start to its exit.

Paths, interleaved over ``--rounds``: ``--via kafka`` (the direct publisher), ``--via
grpc`` (the gRPC stream), and ``--via kafka --ack processed`` (each batch acknowledged once
the service has applied it). One `sow serve` on the embedded broker (Apache Kafka where
Java is installed; ``SOW_EMBEDDED_BROKER`` or ``KAFKA_BOOTSTRAP_SERVERS`` pick another).

    PYTHONPATH=. python bench/cli_publish.py --json-out bench/results/kafka/cli_publish.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from publish import message, say, start_serve

from processor.log.broker import start_broker

PATHS = {
    "--via kafka": ["--via", "kafka"],
    "--via grpc": ["--via", "grpc"],
    "--via kafka --ack processed": ["--via", "kafka", "--ack", "processed"],
}


def run(path: list[str], lines: Path, workdir: Path, count: int) -> dict[str, Any]:
    env = {**os.environ, "SOW_STATE_DIR": str(workdir / "state")}
    started = time.perf_counter()
    with lines.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "processor.cli", "publish", "BENCH", *path],
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            timeout=600,
            check=False,
        )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sow publish {' '.join(path)} exited {done.returncode}: {done.stderr}")
    return {"wall_s": round(wall, 2), "msgs_per_s": round(count / wall)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    broker = start_broker()
    say(f"broker: {broker.description}")
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in PATHS}
    serve = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            lines = workdir / "messages.jsonl"
            with lines.open("wb") as out:
                for i in range(args.messages):
                    out.write(message(i, args.keys) + b"\n")
            port = 50900 + os.getpid() % 300
            serve, ready = start_serve(
                broker.bootstrap_servers, workdir, port, broker.fetch_wait_ms
            )
            say(f"sow serve ready after {ready:.1f}s; {args.messages:,} lines per run")
            for round_ in range(1, args.rounds + 1):
                for name, path in PATHS.items():
                    figures = run(path, lines, workdir, args.messages)
                    rounds[name].append(figures)
                    say(f"round {round_} sow publish {name}: {figures}")
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(30)
        broker.stop()
    print("| `sow publish BENCH < file` | wall s from start (median) | msgs/s | rounds (s) |")
    print("|---|---:|---:|---|")
    for name, runs in rounds.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        each = ", ".join(str(r["wall_s"]) for r in runs)
        print(f"| {name} | {wall} | {args.messages / wall:,.0f} | {each} |")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "broker": broker.description,
            "args": vars(args) | {"json_out": str(args.json_out)},
            "rounds": rounds,
        }
        args.json_out.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
