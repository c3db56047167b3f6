"""The embedded Apache Kafka: a single-node KRaft broker (broker and controller in one JVM).

Layout of its directory (``<state dir>/kafka`` under ``sow serve``, a temporary folder for
tests and benchmarks)::

    data/               the log (log.dirs), formatted on first start; survives restarts
    server.properties   written at every start from :func:`server_properties`
    ports.json          the ports of the last start, taken again when they are free
    broker.pid          the JVM's process id while it runs
    broker.log          the broker's own log (log4j2, rolled at 20 MB)
    broker.out          the JVM's stdout and stderr (start-up failures land here)

The settings suit one node: replication factors 1, internal topics of one partition, no
initial rebalance delay, session floors low enough for short test timeouts, and timed-out
transactions aborted within a second of their deadline.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path

from processor.errors import BrokerError
from processor.log.broker.common import (
    CLASSIC_GROUP_PROTOCOL,
    CONSUMER_GROUP_PROTOCOL,
    GROUP_ASSIGNMENT,
    KAFKA_FETCH_WAIT_MS,
    dying_with_parent,
    free_loopback_port,
    port_is_free,
)
from processor.log.broker.maven import classpath, kafka_version, require_java
from processor.log.broker.secured import KafkaSecurity

log = logging.getLogger(__name__)

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
#: The JVM heap cap (MB): the broker of one development machine needs little.
DEFAULT_HEAP_MB = 512


def server_properties(
    data: Path,
    port: int,
    controller_port: int,
    overrides: Mapping[str, str] | None = None,
    *,
    node_id: int = 1,
    voters: str | None = None,
) -> dict[str, str]:
    """The broker's configuration: a combined broker+controller node on loopback, alone
    (``voters`` None) or one of the static controller quorum ``voters``
    (``id@host:port,...``, :mod:`processor.log.broker.cluster`)."""
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Short session timeouts are allowed (the product's and the tests' own).
        "group.min.session.timeout.ms": "1000",
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "500",
        # A transaction left open by a crashed producer is aborted soon after its timeout.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        # Smaller segments let the changelogs' compaction start sooner on a small node.
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    properties.update(overrides or {})
    return properties


def new_cluster_id() -> str:
    """A cluster id in Kafka's form: a random UUID as 22 URL-safe base64 characters (not
    starting with '-', as Kafka's own Uuid.randomUuid avoids)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class EmbeddedKafka:
    """Apache Kafka (the release the pom pins) as a child JVM on free loopback ports.

    Contract: after ``start()`` returns the broker answers metadata requests; ``stop()``
    shuts it down cleanly (SIGTERM, SIGKILL after ``grace_s``) and is idempotent;
    ``kill()`` is SIGKILL (fault tests) and ``start()`` may follow either, on the same log
    and ports. A broker started from a thread that lives as long as the process (the main
    thread) is killed with its parent; one left behind by an earlier crash is stopped by
    the next start on the same directory.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        heap_mb: int = DEFAULT_HEAP_MB,
        overrides: Mapping[str, str] | None = None,
        port: int | None = None,
        security: KafkaSecurity | None = None,
        taken: Collection[int] = (),
    ) -> None:
        """``directory`` None: a temporary folder, removed at ``stop()``. ``port``: the
        client port to listen on (default: the last start's when free, else a free one).
        ``security``: listen with SASL_SSL (at ``port``) and mTLS (``mtls_bootstrap_servers``)
        only, with ACLs denied by default (:mod:`processor.log.broker.secured`); None: one
        plaintext listener, no authorization."""
        self._temporary = directory is None
        self._directory = directory or Path(tempfile.mkdtemp(prefix="sow-kafka-"))
        self._heap_mb = heap_mb
        self._overrides = dict(overrides or {})
        self._version = kafka_version()
        self.security = security
        self._port, self._controller_port, self._mtls_port = self._choose_ports(set(taken))
        if port is not None:
            self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        #: Set by :meth:`join` for a member of a cluster: its node id, the quorum's
        #: voters and the cluster id every member's log is formatted with.
        self.node_id = 1
        self._voters: str | None = None
        self._cluster_id: str | None = None

    def join(self, node_id: int, voters: str, cluster_id: str) -> None:
        """Make this node member ``node_id`` of a cluster whose controller quorum is
        ``voters`` (before its first start; :mod:`processor.log.broker.cluster`)."""
        if self.security is not None:
            raise BrokerError("a secured embedded Apache Kafka runs as one node only")
        self.node_id, self._voters, self._cluster_id = node_id, voters, cluster_id

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self._port}"

    @property
    def mtls_bootstrap_servers(self) -> str:
        """The mTLS listener of a secured broker (client certificates required)."""
        if self.security is None:
            raise BrokerError("this embedded Apache Kafka is not secured: it has no mTLS listener")
        return f"127.0.0.1:{self._mtls_port}"

    @property
    def ports(self) -> set[int]:
        """Every port this broker listens on (client, controller, mTLS)."""
        return {self._port, self._controller_port, self._mtls_port}

    @property
    def controller_port(self) -> int:
        return self._controller_port

    @property
    def running(self) -> bool:
        """True while the JVM this object started has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def admin_properties(self) -> dict[str, str]:
        """librdkafka properties of the broker's super user ({} when not secured)."""
        return {} if self.security is None else self.security.admin_properties()

    @property
    def version(self) -> str:
        return self._version

    @property
    def description(self) -> str:
        return (
            f"embedded Apache Kafka {self._version} (KRaft, "
            f"{'one node' if self._voters is None else f'node {self.node_id} of a cluster'}) at "
            f"{self.bootstrap_servers}, log in {self.data_dir}"
        )

    @property
    def fetch_wait_ms(self) -> int:
        return KAFKA_FETCH_WAIT_MS

    @property
    def group_protocol(self) -> str:
        """KIP-848's protocol (Kafka 4.0+): rebalances move only the partitions that change
        owner (docs/scaling.md)."""
        major = self._version.split(".", 1)[0]
        return (
            CONSUMER_GROUP_PROTOCOL
            if major.isdigit() and int(major) >= 4
            else CLASSIC_GROUP_PROTOCOL
        )

    @property
    def assignment(self) -> str:
        # A join costs well under a second here (no initial rebalance delay), and other
        # processors may join it too (sow process against this broker).
        return GROUP_ASSIGNMENT

    @property
    def keeps_log(self) -> bool:
        return not self._temporary

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def data_dir(self) -> Path:
        return self._directory / "data"

    @property
    def log_path(self) -> Path:
        """The broker's own log file."""
        return self._directory / "broker.log"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs (fault tests freeze it with SIGSTOP)."""
        return None if self._process is None else self._process.pid

    def start(self, timeout_s: float = 90.0) -> EmbeddedKafka:
        """Start the broker (formatting its storage the first time) and wait until it
        answers; returns self. BrokerError, naming the file to read, when it does not."""
        formatted = self.launch()
        self.await_answer(timeout_s, formatted)
        return self

    def launch(self) -> bool:
        """Start the JVM (formatting the log the first time) without waiting for it to
        answer (a cluster's members start together: none answers before the quorum
        forms). Returns whether the log was formatted before."""
        java = require_java()
        jars = classpath(self._version)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        config = self._directory / "server.properties"
        secured = {}
        if self.security is not None:
            secured = self.security.server_properties(
                self._directory, self._port, self._mtls_port, self._controller_port
            )
        properties = server_properties(
            self.data_dir,
            self._port,
            self._controller_port,
            {**secured, **self._overrides},
            node_id=self.node_id,
            voters=self._voters,
        )
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        formatted = (self.data_dir / "meta.properties").exists()
        if not formatted:
            self._format(java.path, jars, config)
        command = [
            java.path,
            f"-Xmx{self._heap_mb}m",
            "-Xms64m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self._directory}",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp",
            jars,
            "kafka.Kafka",
            str(config),
        ]
        with open(self._directory / "broker.out", "ab") as output:
            self._process = subprocess.Popen(
                dying_with_parent(command),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self._directory / "broker.pid").write_text(str(self._process.pid))
        (self._directory / "ports.json").write_text(
            json.dumps(
                {"broker": self._port, "controller": self._controller_port, "mtls": self._mtls_port}
            )
        )
        return formatted

    def await_answer(self, timeout_s: float = 90.0, formatted: bool = True) -> None:
        """Wait until the launched JVM answers (then create the SCRAM users of a secured
        log formatted by an earlier start); kill it and raise BrokerError if it does not."""
        try:
            self._wait_until_answers(timeout_s)
            if formatted and self.security is not None:
                self.add_scram_users(self.security.users)
        except BrokerError:
            self.kill()
            raise
        log.info("started %s", self.description)

    def stop(self, grace_s: float = 20.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "the embedded Apache Kafka did not stop within %.0fs; killing it", grace_s
                )
                process.kill()
                process.wait(grace_s)
            log.info("stopped the embedded Apache Kafka at %s", self.bootstrap_servers)
        with contextlib.suppress(FileNotFoundError):
            (self._directory / "broker.pid").unlink()
        if self._temporary:
            shutil.rmtree(self._directory, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (no clean shutdown); the log stays for a later ``start()``."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(30)

    def pause(self) -> None:
        """SIGSTOP the JVM: alive but silent (a slow broker, for fault tests)."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused JVM (harmless when it is not paused)."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGCONT)

    def _choose_ports(self, taken: set[int]) -> tuple[int, int, int]:
        """The ports (client, controller, mTLS) of the last start when all are free
        again and none is ``taken`` (another cluster member's), else free ones (the mTLS
        one is used only when secured)."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            saved = json.loads((self._directory / "ports.json").read_text())
            port, controller = int(saved["broker"]), int(saved["controller"])
            mtls = int(saved.get("mtls", 0)) or free_loopback_port()
            ports = (port, controller, mtls)
            if len(set(ports)) == 3 and not taken & set(ports) and all(map(port_is_free, ports)):
                return port, controller, mtls
        chosen: list[int] = []
        while len(chosen) < 3:
            candidate = free_loopback_port()
            if candidate not in chosen and candidate not in taken:
                chosen.append(candidate)
        return chosen[0], chosen[1], chosen[2]

    def _format(self, java: str, jars: str, config: Path) -> None:
        cluster = self._cluster_id or new_cluster_id()
        answer = subprocess.run(
            [
                java,
                "-cp",
                jars,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster,
                "-c",
                str(config),
                *([] if self.security is None else self.security.format_arguments()),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if answer.returncode != 0:
            raise BrokerError(
                f"formatting the embedded Apache Kafka's log in {self.data_dir} failed: "
                f"{(answer.stderr or answer.stdout).strip()[-500:]}"
            )
        log.info("formatted a new Apache Kafka log in %s (cluster %s)", self.data_dir, cluster)

    def _stop_leftover(self) -> None:
        """Stop a broker an earlier process started on this directory and left running
        (it holds the log's lock, so this one could not start)."""
        pid_file = self._directory / "broker.pid"
        try:
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if str(self._directory / "server.properties").encode() not in command:
            return  # the id now belongs to some other process
        log.info("stopping the embedded Apache Kafka an earlier run left running (pid %d)", pid)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def _wait_until_answers(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "log_level": 0, **self.admin_properties}
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise BrokerError(
                    f"the embedded Apache Kafka exited while starting (code "
                    f"{None if process is None else process.returncode}); see "
                    f"{self.log_path} and {self._directory / 'broker.out'}, which ends: "
                    f"{self._output_tail()}"
                )
            with contextlib.suppress(Exception):  # any client error means "not yet"
                if admin.list_topics(timeout=1.0).brokers:
                    return
            time.sleep(0.1)
        raise BrokerError(
            f"the embedded Apache Kafka did not answer on {self.bootstrap_servers} within "
            f"{timeout_s:.0f}s; see {self.log_path}"
        )

    def add_scram_users(self, users: Mapping[str, str]) -> None:
        """Create or update SCRAM-SHA-512 users (name -> password) through the Admin API,
        as the super user (a log formatted by an earlier start has that start's users)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        assert self.security is not None
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **self.admin_properties})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(name, info, password.encode())
            for name, password in users.items()
        ]
        for name, future in admin.alter_user_scram_credentials(upserts).items():
            try:
                future.result(30)
            except Exception as exc:  # a KafkaException: say which user, stop the start
                raise BrokerError(f"cannot create the SCRAM user {name!r}: {exc}") from exc

    def _output_tail(self, lines: int = 15) -> str:
        """The last lines of the JVM's own output (a temporary directory is gone once
        the broker is stopped, so an error says what it held)."""
        try:
            text = (self._directory / "broker.out").read_text(errors="replace")
        except OSError as exc:
            return f"(unreadable: {exc})"
        return "\n".join(text.splitlines()[-lines:]) or "(nothing)"
