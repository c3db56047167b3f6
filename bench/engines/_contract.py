"""The command-line contract every ingest engine script in ``bench/engines/`` follows.

Standard library only: the scripts run under different interpreters (the peers' isolated
venvs under ``.bench-venv/`` and the project's own), and each imports this module from its
own directory (a script's directory is ``sys.path[0]``).

Contract (``bench/ingest.py`` relies on it)::

    <python> bench/engines/<engine>.py --bootstrap HOST:PORT --topic INPUT --messages N
        --state-dir DIR --group GROUP [--exactly-once] [--keys K] [--timeout SECONDS]

* consume ``INPUT`` from the earliest offset in consumer group ``GROUP``;
* keep the last value per key in a RocksDB-backed store under ``DIR``, with a changelog;
* stop after ``N`` input messages have been processed and committed;
* print exactly ONE JSON object on one line to stdout (logs go to stderr), with at least
  ``engine, version, messages, seconds, msgs_per_s, guarantee, notes`` and, when the engine
  can tell, ``keys_in_state`` (``keys_expected`` is echoed from ``--keys``); on failure the
  line has ``"ok": false`` and an ``"error"`` text, and the exit status is non-zero;
* ``seconds`` runs from the first input message processed to the moment the last one is
  processed and committed: group join, rebalance and state-store opening are excluded;
* exit by itself: after ``--timeout`` seconds (default 600) a watchdog prints a failure
  line and ends the process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT_S = 600.0
EXIT_FAILED = 1
EXIT_TIMEOUT = 2


@dataclass(slots=True)
class EngineArgs:
    """The parsed command line of an engine script."""

    bootstrap: str
    topic: str
    messages: int
    state_dir: str
    group: str
    exactly_once: bool
    keys: int | None
    timeout: float


def parse_args(description: str, argv: list[str] | None = None) -> EngineArgs:
    """Parse the contract's options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--topic", required=True, help="the input topic, read from earliest")
    parser.add_argument("--messages", type=int, required=True, help="stop after N messages")
    parser.add_argument("--state-dir", required=True, help="directory for the RocksDB state")
    parser.add_argument("--group", required=True, help="consumer group id (also the app id)")
    parser.add_argument(
        "--exactly-once", action="store_true", help="use transactions (else at-least-once)"
    )
    parser.add_argument(
        "--keys", type=int, default=None, help="distinct keys expected (echoed in the result)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"hard limit in seconds for the whole run (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    ns = parser.parse_args(argv)
    if ns.messages < 1:
        parser.error("--messages must be >= 1")
    return EngineArgs(
        bootstrap=ns.bootstrap,
        topic=ns.topic,
        messages=ns.messages,
        state_dir=ns.state_dir,
        group=ns.group,
        exactly_once=ns.exactly_once,
        keys=ns.keys,
        timeout=ns.timeout,
    )


def guarantee_name(exactly_once: bool) -> str:
    """The contract's spelling of a processing guarantee."""
    return "exactly-once" if exactly_once else "at-least-once"


def log(engine: str, text: str) -> None:
    """A progress line on stderr (stdout is reserved for the one JSON result)."""
    print(f"[{engine}] {text}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class Meter:
    """Counts processed input messages and remembers when the first and last arrived.

    ``tick()`` is called once per processed input message from the engine's hot path, so
    it does the least possible work.
    """

    target: int
    count: int = 0
    first: float | None = None
    last: float | None = None
    reached: threading.Event = field(default_factory=threading.Event)

    def tick(self) -> None:
        """Record one processed message."""
        self.count += 1
        if self.first is None:
            self.first = time.perf_counter()
        if self.count >= self.target and not self.reached.is_set():
            self.last = time.perf_counter()
            self.reached.set()


class ErrorLog(logging.Handler):
    """Keeps the first few ERROR records an engine logs, to explain a failure in one line.

    Install it on the root logger: ``logging.getLogger().addHandler(ErrorLog())``.
    """

    def __init__(self, keep: int = 3) -> None:
        super().__init__(level=logging.ERROR)
        self.keep = keep
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Remember the record's message (and exception type and text, when it has one)."""
        if len(self.lines) >= self.keep:
            return
        text = record.getMessage().strip()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{text} [{type(exc).__module__}.{type(exc).__name__}: {exc}]"
        self.lines.append(text)

    def summary(self) -> str:
        """The remembered lines joined with `` | `` (empty when nothing was logged)."""
        return " | ".join(self.lines)


_emitted = threading.Lock()
_done = False


def emit(result: dict[str, Any]) -> bool:
    """Print the one result line to stdout; later calls do nothing and return False.

    Writes to the process's real stdout (``sys.__stdout__``) even when an engine has
    redirected ``sys.stdout`` into its logging (faust's worker does).
    """
    global _done  # noqa: PLW0603 - one line per process, whichever path gets there first
    out = sys.__stdout__ or sys.stdout
    with _emitted:
        if _done:
            return False
        _done = True
        out.write(json.dumps(result) + "\n")
        out.flush()
        return True


def success(
    *,
    engine: str,
    version: str,
    args: EngineArgs,
    messages: int,
    seconds: float,
    guarantee: str,
    notes: str,
    **extra: Any,
) -> dict[str, Any]:
    """Build a success result."""
    return {
        "ok": True,
        "engine": engine,
        "version": version,
        "messages": messages,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(messages / seconds, 1) if seconds > 0 else None,
        "guarantee": guarantee,
        "keys_expected": args.keys,
        "notes": notes,
        **extra,
    }


def failure(
    *, engine: str, version: str, args: EngineArgs, guarantee: str, error: str, **extra: Any
) -> dict[str, Any]:
    """Build a failure result (``ok`` false, no rate)."""
    return {
        "ok": False,
        "engine": engine,
        "version": version,
        "messages": args.messages,
        "seconds": None,
        "msgs_per_s": None,
        "guarantee": guarantee,
        "keys_expected": args.keys,
        "error": error,
        "notes": extra.pop("notes", ""),
        **extra,
    }


def start_watchdog(timeout_s: float, on_timeout: Callable[[], dict[str, Any]]) -> threading.Thread:
    """End the process after ``timeout_s``: print ``on_timeout()``'s failure line, exit 2.

    Uses ``os._exit`` because an engine stuck in a C extension or an event loop may never
    return to Python code that could raise.
    """

    def watch() -> None:
        time.sleep(timeout_s)
        try:
            result = on_timeout()
        except Exception as exc:  # the watchdog must end the process whatever happens
            result = {"ok": False, "error": f"timed out after {timeout_s:.0f}s ({exc})"}
        emit(result)
        sys.stderr.flush()
        os._exit(EXIT_TIMEOUT)

    thread = threading.Thread(target=watch, name="bench-watchdog", daemon=True)
    thread.start()
    return thread
