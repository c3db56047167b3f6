"""The processor of ``sow serve`` as a child process (``sow process``).

One Python process has one interpreter lock: the processor's apply loop, the replica's
apply loop, the publish gateway and the gRPC service would all take turns on it. Running
the processor in a child process gives it a core of its own; the two halves already talk
only through Kafka (the log and the changelogs), so nothing else changes.

The child runs with the parent's settings (passed as environment variables) and the
parent's broker. Its log lines are forwarded to the parent's stderr, except its ready
banner; ``ready`` is set when it has joined its group and restored its stores. The child
dies with the parent (PR_SET_PDEATHSIG on Linux), and an exit the parent did not ask for
is reported through ``on_exit``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable

from processor import progress
from processor.config import Settings

log = logging.getLogger(__name__)

#: The first and last lines of the banner ``sow process`` prints when it is ready.
READY_LINE = "kafka-sow is ready"
BANNER_END = "stop with Ctrl-C"
#: What the processor's watchdog logs when it gets stuck and when it works again.
STUCK_MARK = "processor stuck: "
RESUMED_MARK = "processor resumed:"
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ProcessorChild:
    """``sow process`` started with ``settings`` against ``bootstrap``.

    ``on_exit(code)`` is called (from a watcher thread) when the child exits without
    ``stop`` having been called. Thread-safe.
    """

    def __init__(self, settings: Settings, bootstrap: str, on_exit: Callable[[int], None]) -> None:
        # The one processor of ``sow serve`` takes every partition without a group join
        # (seconds saved at every start) unless SOW_ASSIGNMENT says otherwise.
        env = {
            "SOW_ASSIGNMENT": "static",
            **os.environ,
            **settings.environment(),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            # The child serves its figures on a port of its own, which the parent's
            # /metrics relays (see ``metrics``).
            "SOW_METRICS_ADDRESS": "127.0.0.1:0" if settings.metrics_address else "",
            # Its progress lines come marked, to be shown as this process's own.
            progress.RELAY_ENV: "1",
        }
        #: The child's metrics endpoint (from its ready banner; "" before or without).
        self.metrics_address = ""
        #: What its watchdog found stuck (from its log; None while it works).
        self.stalled: str | None = None
        self.ready = threading.Event()
        self._on_exit = on_exit
        self._stopping = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", "process"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # terminal signals go to the parent, which stops it
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
        self._watcher = threading.Thread(target=self._watch, name="sow-processor-child")
        self._watcher.daemon = True
        self._watcher.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _watch(self) -> None:
        assert self.process.stderr is not None
        in_banner = False
        for line in self.process.stderr:
            if READY_LINE in line:
                in_banner = True
                self.ready.set()
            if STUCK_MARK in line:
                self.stalled = line.split(STUCK_MARK, 1)[1].strip()
            elif RESUMED_MARK in line:
                self.stalled = None
            if in_banner and "metrics:" in line and "http://" in line:
                self.metrics_address = line.split("http://", 1)[1].split("/", 1)[0]
            if not in_banner:
                progress.forward(line)
            elif BANNER_END in line:
                in_banner = False
        code = self.process.wait()
        if not self._stopping.is_set():
            log.error("the processor (pid %d) exited with code %d", self.process.pid, code)
            self._on_exit(code)

    def metrics(self) -> bytes:
        """The child's Prometheus text (empty until it is ready, or if it does not
        answer within a second)."""
        if not self.metrics_address:
            return b""
        try:
            with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=1) as r:
                return bytes(r.read())
        except OSError:
            return b""

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after ``grace_s``); idempotent."""
        self._stopping.set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(grace_s)
        self._watcher.join(timeout=5)
