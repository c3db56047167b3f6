"""`sow serve` as a user runs it, for tests: a child process on the session's broker (or
its embedded Kafka), its stderr collected by a thread, its children found in /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = "stop with Ctrl-C"


def serve_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))}
    return {**env, "PYTHONUNBUFFERED": "1"}


class Serve:
    """One `sow serve` (on the session's broker, or on its embedded Kafka when
    ``bootstrap`` is empty), its stderr collected by a thread."""

    def __init__(
        self, workdir: Path, bootstrap: str, group: str, env: dict[str, str] | None = None
    ) -> None:
        broker = ["--bootstrap-servers", bootstrap] if bootstrap else []
        self.began = time.monotonic()
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "processor.cli", "serve", "--grpc-address", "127.0.0.1:0"),
                *("--topology", "topology.yaml", "--group-id", group, *broker),
            ],
            cwd=workdir,
            env={**serve_env(), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if READY in line:
                self.ready.set()
        self.ended.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def until_ready(self, within_s: float = 120) -> float:
        """Seconds from the start until ready; fails if it exits first."""
        deadline = time.monotonic() + within_s
        while not self.ready.wait(0.1):
            assert self.process.poll() is None, (
                f"sow serve exited with {self.process.returncode} before it was ready:\n"
                + self.output
            )
            assert time.monotonic() < deadline, f"not ready within {within_s}s:\n{self.output}"
        return time.monotonic() - self.began

    @property
    def address(self) -> str:
        return next(line.split()[1] for line in self.lines if "gRPC:" in line)

    def children(self) -> list[int]:
        """The processes this `sow serve` started (its processor, an embedded broker)."""
        return children(self.process.pid)

    def processor(self) -> int:
        """The pid of its processor child (`sow process`), once started."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for pid in self.children():
                if b"processor.cli\0process" in cmdline(pid):
                    return pid
            time.sleep(0.05)
        raise AssertionError("no processor child:\n" + self.output)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(word) for word in text.split()]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
