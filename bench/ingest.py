"""Ingest-throughput benchmark: kafka-sow vs quixstreams vs Kafka Streams vs faust, one broker.

Every engine keeps the last value per key in RocksDB with a changelog topic, reads the
same workload (``bench/workload.py``) from its own fresh topic on the same broker, and runs
exactly-once where it can. The broker is the embedded Apache Kafka
(``processor.log.broker.start_broker``), unless ``KAFKA_BOOTSTRAP_SERVERS`` names one or
``SOW_EMBEDDED_BROKER=tansu`` asks for Tansu. Usage (from the repository root)::

    bash bench/setup_peers.sh
    python bench/ingest.py [--messages 200000] [--keys 10000] [--partitions 2]
        [--engines kafka_sow,quixstreams,kstreams,faust] [--json-out bench/results/ingest.json]

Progress goes to stderr; the Markdown table goes to stdout; the JSON results to
``--json-out``. Each engine runs as a subprocess (the peers in their own venvs under
``.bench-venv/``, Kafka Streams as a Java application the project's Python starts) following
the contract in ``bench/engines/_contract.py``; its stderr is kept in a log file whose path
is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import workload

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ENGINES_DIR = BENCH / "engines"
VENVS = ROOT / ".bench-venv"
DEFAULT_ENGINES = ("kafka_sow", "kafka_sow_rekey", "quixstreams", "kstreams", "faust")
BASELINE = "quixstreams"
DEFAULT_TIMEOUT_S = 600.0
HEARTBEAT_S = 15.0
#: The embedded broker unless SOW_EMBEDDED_BROKER says otherwise: Apache Kafka, without the
#: silent fallback to Tansu that ``start_broker``'s ``auto`` allows.
DEFAULT_EMBEDDED_BROKER = "kafka"


@dataclass(frozen=True, slots=True)
class Engine:
    """How to run one engine script."""

    name: str
    script: Path
    python: Path
    # A peer that fails exactly-once is rerun at-least-once (and the failure recorded).
    fallback_to_at_least_once: bool
    setup_hint: str
    # How the input is keyed (bench/workload.py): each engine gets the keying its own
    # publishers use; the values are the same bytes for every engine.
    keying: str = "natural"
    # Arguments of a set-up run of the script, made once before the rounds (a build).
    setup_args: tuple[str, ...] = ()
    # Environment variables of the engine's runs (kafka_sow_upsert: its upsert topic).
    env: tuple[tuple[str, str], ...] = ()


def _kafka_sow(name: str, **options: Any) -> Engine:
    """kafka-sow's engine script, run in the project's own environment."""
    return Engine(
        name=name,
        script=ENGINES_DIR / "kafka_sow.py",
        python=Path(sys.executable),
        fallback_to_at_least_once=False,
        setup_hint="pip install -e . (the project's own environment)",
        **options,
    )


def engines() -> dict[str, Engine]:
    """The engines this benchmark knows, by the name ``--engines`` takes."""
    return {
        "kafka_sow": _kafka_sow("kafka_sow", keying="sowkey"),
        "kafka_sow_rekey": _kafka_sow("kafka_sow_rekey"),
        # The SOW topic with its upsert-table view on (docs/upsert-tables.md): the cost of
        # the upsert topic is this engine's rate against kafka_sow's, in the same run.
        "kafka_sow_upsert": _kafka_sow(
            "kafka_sow_upsert", keying="sowkey", env=(("BENCH_UPSERT_TOPIC", "1"),)
        ),
        "quixstreams": Engine(
            name="quixstreams",
            script=ENGINES_DIR / "quix_ingest.py",
            python=VENVS / "quix" / "bin" / "python",
            fallback_to_at_least_once=True,
            setup_hint="run bench/setup_peers.sh",
        ),
        "kstreams": Engine(
            name="kstreams",
            script=ENGINES_DIR / "kstreams_ingest.py",
            python=Path(sys.executable),
            fallback_to_at_least_once=False,
            setup_hint="needs a Java 17+ JDK and Maven (mvn) to build bench/engines/kstreams",
            setup_args=("--build",),
        ),
        "faust": Engine(
            name="faust",
            script=ENGINES_DIR / "faust_ingest.py",
            python=VENVS / "faust" / "bin" / "python",
            fallback_to_at_least_once=True,
            setup_hint="run bench/setup_peers.sh",
        ),
    }


def progress(text: str) -> None:
    """One progress line on stderr."""
    print(f"[ingest {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int | None:
    """Sum of the group's committed offsets on ``topic`` (OffsetFetch, not ListOffsets,
    which this broker can under-report). ``None`` when the broker does not answer."""
    from confluent_kafka import (
        ConsumerGroupTopicPartitions,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    try:
        futures = admin.list_consumer_group_offsets([request], request_timeout=15.0)
        answer = next(iter(futures.values())).result(timeout=20.0)
    except Exception as exc:  # a check, not the measurement: report and carry on
        progress(f"  could not read committed offsets of group {group}: {exc}")
        return None
    return sum(max(int(tp.offset), 0) for tp in answer.topic_partitions)


def checks(result: dict[str, Any], *, messages: int, keys: int) -> dict[str, bool | None]:
    """Correctness checks on a successful result: every key in state, every offset committed.

    ``None`` when the engine or the broker could not tell.
    """
    in_state = result.get("keys_in_state")
    committed = result.get("committed_offsets_broker")
    found = {
        "keys_in_state_ok": None if in_state is None else in_state == keys,
        "committed_offsets_ok": None if committed is None else committed == messages,
    }
    if "changelog_keys" in result:  # engines that read their changelog back (kstreams)
        found["changelog_keys_ok"] = result["changelog_keys"] == keys
    return found


def checks_failed(result: dict[str, Any]) -> list[str]:
    """The names of the checks that failed (not those that could not be made)."""
    return [name for name, ok in (result.get("checks") or {}).items() if ok is False]


def last_json_line(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object, if any."""
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    return parsed
    return None


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (for failure messages)."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(content[-lines:])


@dataclass(slots=True)
class Attempt:
    """One run of one engine on one fresh topic."""

    engine: Engine
    topic: str
    group: str
    messages: int
    exactly_once: bool
    log_path: Path


def run_attempt(
    attempt: Attempt, *, bootstrap: str, keys: int, partitions: int, timeout_s: float
) -> dict[str, Any]:
    """Produce the workload into a fresh topic, run the engine on it, return its result."""
    engine = attempt.engine
    progress(
        f"{engine.name}: producing {attempt.messages:,} messages over {keys:,} keys into "
        f"{attempt.topic} ({partitions} partitions)"
    )
    report = workload.prepare(
        bootstrap, attempt.topic, attempt.messages, keys, partitions, engine.keying
    )
    progress(f"{engine.name}: produced {report.bytes:,} bytes in {report.produce_seconds:.2f}s")
    state_dir = Path(tempfile.mkdtemp(prefix=f"bench-ingest-{engine.name}-"))
    command = [
        str(engine.python),
        str(engine.script),
        "--bootstrap",
        bootstrap,
        "--topic",
        attempt.topic,
        "--messages",
        str(attempt.messages),
        "--state-dir",
        str(state_dir),
        "--group",
        attempt.group,
        "--keys",
        str(keys),
        "--timeout",
        str(timeout_s),
    ]
    if attempt.exactly_once:
        command.append("--exactly-once")
    guarantee = "exactly-once" if attempt.exactly_once else "at-least-once"
    progress(
        f"{engine.name}: running ({guarantee}, timeout {timeout_s:.0f}s, "
        f"log {attempt.log_path}) ..."
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **dict(engine.env)}
    started = time.monotonic()
    try:
        with open(attempt.log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )
            stdout = wait_with_heartbeat(process, engine.name, started, timeout_s + 60.0)
        wall = time.monotonic() - started
        result = last_json_line(stdout)
        if result is None:
            result = {
                "ok": False,
                "engine": engine.name,
                "guarantee": guarantee,
                "messages": attempt.messages,
                "error": (
                    f"no JSON result (exit status {process.returncode}); "
                    f"log tail:\n{tail(attempt.log_path)}"
                ),
            }
        result.setdefault("ok", True)
        result["exit_status"] = process.returncode
        result["wall_seconds"] = round(wall, 2)
        result["topic"] = attempt.topic
        result["group"] = attempt.group
        result["log"] = str(attempt.log_path)
        result["workload"] = asdict(report)
        if result["ok"]:
            result["committed_offsets_broker"] = committed_total(
                bootstrap, attempt.group, attempt.topic, partitions
            )
            result["checks"] = checks(result, messages=attempt.messages, keys=report.keys)
        return result
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def wait_with_heartbeat(
    process: subprocess.Popen[bytes], name: str, started: float, limit_s: float
) -> str:
    """Wait for ``process``, printing a progress line every 15 s; kill it past ``limit_s``.

    Returns its stdout. The engine has its own watchdog; this is the backstop.
    """
    chunks: list[bytes] = []
    assert process.stdout is not None
    os.set_blocking(process.stdout.fileno(), False)
    next_beat = started + HEARTBEAT_S
    while True:
        with contextlib.suppress(BlockingIOError, TypeError):
            data = process.stdout.read()
            if data:
                chunks.append(data)
        if process.poll() is not None:
            break
        now = time.monotonic()
        if now - started > limit_s:
            progress(f"{name}: no exit after {limit_s:.0f}s; killing process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait()
            break
        if now >= next_beat:
            progress(f"{name}: still running ({now - started:.0f}s)")
            next_beat += HEARTBEAT_S
        time.sleep(0.1)
    with contextlib.suppress(BlockingIOError, TypeError, ValueError):
        rest = process.stdout.read()
        if rest:
            chunks.append(rest)
    process.stdout.close()
    return b"".join(chunks).decode(errors="replace")


def run_engine(
    engine: Engine,
    *,
    bootstrap: str,
    run_id: str,
    messages: int,
    keys: int,
    partitions: int,
    exactly_once: bool,
    timeout_s: float,
    log_dir: Path,
) -> dict[str, Any]:
    """Run one engine; if exactly-once fails and the engine allows it, rerun at-least-once."""

    def attempt(eos: bool, suffix: str) -> Attempt:
        tag = f"{engine.name.replace('_', '-')}-{run_id}{suffix}"
        return Attempt(
            engine=engine,
            topic=f"bench-ingest-{tag}",
            group=f"bench-ingest-{tag}",
            messages=messages,
            exactly_once=eos,
            log_path=log_dir / f"{engine.name}{suffix}.log",
        )

    first = run_attempt(
        attempt(exactly_once, ""),
        bootstrap=bootstrap,
        keys=keys,
        partitions=partitions,
        timeout_s=timeout_s,
    )
    if first.get("ok") or not exactly_once or not engine.fallback_to_at_least_once:
        return first
    reason = str(first.get("error", "unknown error"))
    progress(f"{engine.name}: exactly-once FAILED: {reason}")
    progress(f"{engine.name}: falling back to at-least-once on a fresh topic")
    second = run_attempt(
        attempt(False, "-alo"),
        bootstrap=bootstrap,
        keys=keys,
        partitions=partitions,
        timeout_s=timeout_s,
    )
    second["exactly_once_error"] = reason
    if first.get("notes"):
        second["exactly_once_notes"] = first["notes"]
    second["requested_guarantee"] = "exactly-once"
    return second


def fmt_rate(value: object) -> str:
    """A msgs/s figure for the table."""
    return f"{value:,.0f}" if isinstance(value, int | float) else "-"


def flag(value: object, result: dict[str, Any], check: str) -> str:
    """A table cell, marked when its correctness check failed."""
    failed = (result.get("checks") or {}).get(check) is False
    return f"{value} (MISMATCH)" if failed else str(value)


def median_round(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate (a failed run ranks lowest), annotated with every
    round's rate; a failure in any round is kept visible in ``rounds_msgs_per_s``."""
    ranked = sorted(runs, key=lambda r: (r.get("ok") is True, r.get("msgs_per_s") or 0.0))
    chosen = dict(ranked[len(ranked) // 2])
    chosen["rounds_msgs_per_s"] = [r.get("msgs_per_s") if r.get("ok") else None for r in runs]
    return chosen


def markdown_table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, rates relative to quixstreams."""
    baseline = next(
        (
            r.get("msgs_per_s")
            for r in results
            if r.get("bench_engine") == BASELINE and r.get("ok") and r.get("msgs_per_s")
        ),
        None,
    )
    lines = [
        "| engine | version | guarantee | messages | seconds | msgs/s | vs quixstreams "
        "| rounds (msgs/s) | keys in state | committed offsets |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        name = r.get("bench_engine", r.get("engine", "?"))
        if r.get("skipped"):
            lines.append(f"| {name} | - | - | - | - | skipped: {r['skipped']} | - | - | - | - |")
            continue
        guarantee = str(r.get("guarantee", "-"))
        if r.get("exactly_once_error"):
            guarantee += " (exactly-once failed, see notes)"
        rate = r.get("msgs_per_s") if r.get("ok") else None
        relative = f"{rate / baseline:.2f}x" if rate and baseline else "-"
        seconds = r.get("seconds")
        lines.append(
            "| {name} | {version} | {guarantee} | {messages} | {seconds} | {rate} | {rel} "
            "| {rounds} | {keys} | {committed} |".format(
                rounds=", ".join(
                    fmt_rate(x) if x else "FAILED" for x in r.get("rounds_msgs_per_s", [])
                ),
                name=name,
                version=r.get("version", "-"),
                guarantee=guarantee,
                messages=f"{r.get('messages', 0):,}",
                seconds=f"{seconds:.2f}" if isinstance(seconds, int | float) else "-",
                rate=fmt_rate(rate) if r.get("ok") else "FAILED",
                rel=relative,
                keys=flag(r.get("keys_in_state", "-"), r, "keys_in_state_ok"),
                committed=flag(r.get("committed_offsets_broker", "-"), r, "committed_offsets_ok"),
            )
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The orchestrator's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=workload.DEFAULT_MESSAGES)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds per engine; the table shows the median (faust runs once)",
    )
    parser.add_argument("--keys", type=int, default=workload.DEFAULT_KEYS)
    parser.add_argument("--partitions", type=int, default=workload.DEFAULT_PARTITIONS)
    parser.add_argument(
        "--engines",
        default=",".join(DEFAULT_ENGINES),
        help=f"comma-separated, in run order (default {','.join(DEFAULT_ENGINES)})",
    )
    parser.add_argument(
        "--messages-faust",
        type=int,
        default=None,
        help="a smaller message count for faust only (it is slow); reported in the results",
    )
    parser.add_argument(
        "--at-least-once",
        action="store_true",
        help="run every engine at-least-once (default: exactly-once where supported)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="per-engine hard limit in seconds (default 600)",
    )
    parser.add_argument(
        "--json-out", type=Path, default=BENCH / "results" / "ingest.json", help="results file"
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.keys < 1 or args.partitions < 1:
        parser.error("--messages, --keys and --partitions must be >= 1")
    if args.messages_faust is not None and args.messages_faust < 1:
        parser.error("--messages-faust must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every engine that ran succeeded (possibly after the
    at-least-once fallback) and passed its checks, else 1 (2 for usage errors)."""
    args = parse_args(argv)
    known = engines()
    selected = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = [name for name in selected if name not in known]
    if unknown or not selected:
        print(
            f"ingest: unknown engine(s) {unknown}; choose from {', '.join(known)}",
            file=sys.stderr,
        )
        return 2
    missing = [
        f"{name} ({known[name].python})"
        for name in selected
        if name != "kafka_sow" and not known[name].python.exists()
    ]
    if missing:
        print(
            f"ingest: the peer venv(s) are missing: {', '.join(missing)}; "
            f"run bench/setup_peers.sh first",
            file=sys.stderr,
        )
        return 2

    for name in selected:
        engine = known[name]
        if engine.setup_args and engine.script.exists():
            progress(f"{name}: set-up ({' '.join(engine.setup_args)})")
            setup = subprocess.run(
                [str(engine.python), str(engine.script), *engine.setup_args],
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                check=False,
            )
            if setup.returncode != 0:
                print(
                    f"ingest: {name}: the set-up failed (exit {setup.returncode}); "
                    f"{engine.setup_hint}",
                    file=sys.stderr,
                )
                return 2

    from processor.log.broker import EMBEDDED_ENV, start_broker

    run_id = uuid.uuid4().hex[:8]
    log_dir = Path(tempfile.mkdtemp(prefix=f"bench-ingest-logs-{run_id}-"))
    results: list[dict[str, Any]] = []
    rounds: dict[str, list[dict[str, Any]]] = {}
    progress("starting the broker")
    broker = start_broker(
        embedded=os.environ.get(EMBEDDED_ENV, "").strip() or DEFAULT_EMBEDDED_BROKER
    )
    progress(f"broker: {broker.description}; engine logs in {log_dir}")
    rounds = {name: [] for name in selected}
    try:
        # Rounds interleave the engines, so a slow spell of the (shared) machine hits them
        # all; the table reports each engine's median round. faust runs once: it is ~50x
        # slower and does not decide any comparison.
        for round_no in range(1, args.rounds + 1):
            for name in selected:
                engine = known[name]
                if name == "faust" and round_no > 1:
                    continue
                if not engine.script.exists():
                    if round_no == 1:
                        progress(f"{name}: SKIPPED: {engine.script.name} does not exist yet")
                        rounds[name].append(
                            {"bench_engine": name, "skipped": f"{engine.script.name} not written"}
                        )
                    continue
                messages = args.messages
                if name == "faust" and args.messages_faust is not None:
                    messages = args.messages_faust
                progress(f"round {round_no}/{args.rounds}: {name}")
                result = run_engine(
                    engine,
                    bootstrap=broker.bootstrap_servers,
                    run_id=f"{run_id}-r{round_no}",
                    messages=messages,
                    keys=args.keys,
                    partitions=args.partitions,
                    exactly_once=not args.at_least_once,
                    timeout_s=args.timeout,
                    log_dir=log_dir,
                )
                result["bench_engine"] = name
                result["round"] = round_no
                rounds[name].append(result)
                if result.get("ok"):
                    progress(
                        f"{name}: {result.get('msgs_per_s', 0):,.0f} msgs/s "
                        f"({result.get('guarantee')}, {result.get('seconds')}s, "
                        f"keys_in_state={result.get('keys_in_state')}, "
                        f"committed={result.get('committed_offsets_broker')})"
                    )
                    for failed in checks_failed(result):
                        progress(f"{name}: CHECK FAILED: {failed} (see the JSON results)")
                else:
                    progress(f"{name}: FAILED: {result.get('error')}")
        results = [median_round(runs) for runs in rounds.values() if runs]
    finally:
        progress("stopping the broker")
        broker.stop()

    table = markdown_table(results)
    print(table)
    document = {
        "benchmark": "ingest",
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "broker": broker.description,
        "workload": {
            "messages": args.messages,
            "messages_faust": args.messages_faust,
            "keys": args.keys,
            "partitions": args.partitions,
            "value_example": workload.order(0, args.keys),
        },
        "requested_guarantee": "at-least-once" if args.at_least_once else "exactly-once",
        "timing": "seconds = first input message processed -> last one processed and "
        "committed (group join, rebalance and state opening excluded)",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "results": results,
        "all_rounds": rounds,
        "table_markdown": table,
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    progress(f"wrote {args.json_out}")
    ran = [r for r in results if not r.get("skipped")]
    good = all(r.get("ok") and not checks_failed(r) for r in ran)
    return 0 if ran and good else 1


if __name__ == "__main__":
    sys.exit(main())
