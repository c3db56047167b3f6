"""Processors and query services as separate OS processes on one broker (the scale test).

:class:`Member` runs one ``sow process`` or ``sow query-service`` the way an operator
does (``python -m processor.cli ...``) and follows its log: the ready banner, its gRPC
address and, for a processor, which input partitions it holds after each rebalance.
:class:`Cluster` starts and stops them and tells when the processors have settled on an
assignment that covers every input partition exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY = "stop with Ctrl-C"
#: Logged by a processor right before it joins its group (or restarts its pipeline).
JOINING = "processor taking its partitions"
#: Logged by a processor whose pipeline failed and starts again from the committed offsets.
RESTARTING = "restarting from committed offsets"
#: ``assigned T[p], U[q]`` (after a rebalance, or once the stores are recovered) and
#: ``revoked T[p], ...``: the eager (classic) protocol revokes everything before each
#: rebalance and then assigns a whole new set; KIP-848's (consumer) revokes and assigns
#: only the partitions that move.
_ASSIGNED = re.compile(r"processor\.engine\.assignment: assigned ?(.*)$")
_REVOKED = re.compile(r"processor\.engine\.assignment: revoked ?(.*)$")
_PARTITION = re.compile(r"([^\s,\[]+)\[(\d+)\]")


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


class Member:
    """One ``sow`` process with its stderr collected (by a reader thread).

    ``owned`` is the set of ``input_topic`` partitions the processor holds and applies:
    None before its first assignment; partitions leave it when revoked and join it when
    assigned (and recovered). Thread-safe to read.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], input_topic: str) -> None:
        self.name = name
        self.started = time.monotonic()
        self.lines: list[str] = []
        self.ready_at: float | None = None
        #: When the processor first set out to join its group (after Python's start).
        self.joining_at: float | None = None
        #: Pipeline restarts the processor logged (a failed transaction, a stall).
        self.restarts = 0
        self.grpc_address = ""
        self.owned: frozenset[int] | None = None
        #: (monotonic time, partitions) of every assignment, in order.
        self.assignments: list[tuple[float, frozenset[int]]] = []
        self.killed = False
        #: Set for a processor asked to crash (SOW_CRASH_AT): its exit is no failure.
        self.may_crash = False
        self._input_topic = input_topic
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", *argv],
            env=_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"log-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "gRPC:" in line and not self.grpc_address:
                self.grpc_address = line.split()[1]
            if READY in line and self.ready_at is None:
                self.ready_at = time.monotonic()
            if JOINING in line and self.joining_at is None:
                self.joining_at = time.monotonic()
            if RESTARTING in line:
                self.restarts += 1
            if match := _REVOKED.search(line):
                self.owned = (self.owned or frozenset()) - self._partitions(match.group(1))
            elif match := _ASSIGNED.search(line):
                owned = (self.owned or frozenset()) | self._partitions(match.group(1))
                self.owned = owned
                self.assignments.append((time.monotonic(), owned))

    def _partitions(self, listed: str) -> frozenset[int]:
        return frozenset(int(p) for t, p in _PARTITION.findall(listed) if t == self._input_topic)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return "".join(self.lines)

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from spawn to the ready banner; AssertionError with the log if not."""
        deadline = time.monotonic() + timeout_s
        while self.ready_at is None:
            if not self.alive:
                raise AssertionError(f"{self.name} exited before it was ready:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready in {timeout_s}s:\n{self.log()}")
            time.sleep(0.05)
        return self.ready_at - self.started

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no leaving the group, a transaction maybe open."""
        self.killed = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after 30 s); the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        return self.process.returncode


@dataclass
class Cluster:
    """The members of one scale test, all against ``bootstrap`` with one topology."""

    bootstrap: str
    topology: Path
    work: Path
    group: str
    input_topic: str
    partitions: int
    env: dict[str, str] = field(default_factory=dict)
    processors: list[Member] = field(default_factory=list)
    services: list[Member] = field(default_factory=list)

    def _common(self, state: Path) -> list[str]:
        return [
            *("--bootstrap-servers", self.bootstrap, "--topology", str(self.topology)),
            *("--state-dir", str(state)),
        ]

    def add_processor(
        self, env: dict[str, str] | None = None, instance: int | None = None
    ) -> Member:
        """A new ``sow process`` with its own state directory and instance id (``env``:
        environment variables for this one, e.g. ``SOW_CRASH_AT``; ``instance``: restart
        that earlier processor's instance, with its state directory)."""
        n = len(self.processors) + 1
        instance = n if instance is None else instance
        argv = [
            "process",
            *self._common(self.work / f"processor-{instance}"),
            *("--group-id", self.group, "--instance-id", str(instance)),
        ]
        member = Member(f"processor-{n}", argv, {**self.env, **(env or {})}, self.input_topic)
        member.may_crash = "SOW_CRASH_AT" in (env or {})
        self.processors.append(member)
        return member

    def add_service(self) -> Member:
        """A new ``sow query-service`` on a free loopback port."""
        n = len(self.services) + 1
        argv = [
            "query-service",
            *self._common(self.work / f"service-{n}"),
            *("--grpc-address", "127.0.0.1:0"),
        ]
        member = Member(f"service-{n}", argv, self.env, self.input_topic)
        self.services.append(member)
        return member

    def live_processors(self) -> list[Member]:
        return [p for p in self.processors if not p.killed and p.alive]

    def settled(self) -> bool:
        """Every live processor holds some partitions (when there are enough to go
        round), none twice, and together all of them."""
        live = self.live_processors()
        owned = [p.owned for p in live]
        if not live or any(o is None for o in owned):
            return False
        sets = [o for o in owned if o is not None]
        every = set().union(*sets)
        if sum(len(o) for o in sets) != len(every) or every != set(range(self.partitions)):
            return False
        return len(live) > self.partitions or all(sets)

    def wait_settled(self, timeout_s: float) -> float:
        """Block until :meth:`settled`; the seconds waited. AssertionError with the logs
        of the live processors when it does not happen in time."""
        began = time.monotonic()
        while not self.settled():
            dead = [p for p in self.processors if not (p.killed or p.may_crash or p.alive)]
            if dead:
                raise AssertionError(f"{dead[0].name} exited on its own:\n{dead[0].log()}")
            if time.monotonic() - began > timeout_s:
                logs = "\n".join(f"--- {p.name}\n{p.log()}" for p in self.live_processors())
                raise AssertionError(f"no settled assignment in {timeout_s}s:\n{logs}")
            time.sleep(0.05)
        return time.monotonic() - began

    def stop(self) -> dict[str, int]:
        """Stop every member still running; exit codes by name."""
        codes = {}
        for member in [*self.processors, *self.services]:
            if not (member.killed or member.may_crash):
                codes[member.name] = member.stop()
        return codes
