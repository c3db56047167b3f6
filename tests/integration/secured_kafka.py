"""A secured embedded Apache Kafka for the security tests: SASL_SSL with SCRAM users, an
mTLS listener, ACLs denied by default; certificates made at run time (tests/pki.py).

Each test makes principals of its own (:meth:`SecuredKafka.user`, :meth:`SecuredKafka.
certificate`), grants them exactly what ``processor.log.kafka.acls`` computes, and runs
the product as a user runs it (``sow serve``, ``sow process``, ``sow query-service``)
with ``KAFKA_BOOTSTRAP_SERVERS`` and ``SOW_KAFKA_PROPERTIES``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from processor.errors import BrokerError
from processor.log.broker import EmbeddedKafka
from processor.log.broker.maven import require_java
from processor.log.broker.secured import KafkaSecurity, properties_text
from processor.log.kafka.acls import Acl, AclContext, component_acls, grant
from processor.log.kafka.settings import use_client_properties
from processor.topology.model import SowTopic, Topology
from tests.integration.harness import namespaced
from tests.integration.serve_helpers import serve_env
from tests.pki import CA, Issued, issue, make_ca

ADMIN_PASSWORD = "admin-secret"
#: The SOW topic every secured test serves (Kafka topics namespaced per test).
ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)
_numbers = itertools.count()


@dataclasses.dataclass
class SecuredKafka:
    """The session's secured broker, its CA and a way to make principals."""

    broker: EmbeddedKafka
    security: KafkaSecurity
    ca: CA
    #: Another CA, which the broker does not trust.
    stranger: CA
    directory: Path

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    @property
    def mtls_bootstrap(self) -> str:
        return self.broker.mtls_bootstrap_servers

    @property
    def admin(self) -> dict[str, str]:
        return self.security.admin_properties()

    def user(self, name: str = "") -> tuple[str, dict[str, str]]:
        """A new SCRAM user (no ACLs): its principal and client properties."""
        name = name or f"u{next(_numbers)}-{uuid.uuid4().hex[:6]}"
        password = uuid.uuid4().hex
        self.broker.add_scram_users({name: password})
        return f"User:{name}", {
            **self.security.sasl_properties(self.security.admin, password),
            "sasl.username": name,
        }

    def certificate(self, cn: str = "", **options: object) -> tuple[str, Issued]:
        """A new client certificate signed by the broker's CA: its principal and files."""
        cn = cn or f"c{next(_numbers)}-{uuid.uuid4().hex[:6]}"
        return f"User:{cn}", issue(self.ca, cn, **options)  # type: ignore[arg-type]

    def grant(self, principal: str, acls: Sequence[Acl]) -> None:
        grant(self.bootstrap, self.admin, principal, acls)


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    """One secured embedded Apache Kafka for the session (skipped without Java 17+: the
    Tansu fallback has no security)."""
    try:
        require_java()
    except BrokerError as exc:
        pytest.skip(f"the secured Kafka tests need the embedded Apache Kafka: {exc}")
    directory = tmp_path_factory.mktemp("kafka-pki")
    ca = make_ca("sow-test", directory)
    stranger = make_ca("stranger", directory / "stranger")
    broker_cert = issue(ca, "broker", server=True, ips=["127.0.0.1"], dns=["localhost"])
    security = KafkaSecurity(ca.cert, broker_cert.chain, broker_cert.key, {"admin": ADMIN_PASSWORD})
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    broker = EmbeddedKafka(security=security, overrides=overrides).start()
    try:
        yield SecuredKafka(broker, security, ca, stranger, directory)
    finally:
        gc.collect()  # the tests' clients go while the broker answers (as tests/conftest.py)
        broker.stop()


def topology_file(workdir: Path, unique: str) -> tuple[Path, Topology]:
    """A topology of ORDERS with Kafka topics unique to a test, as a file and a model."""
    topology = namespaced(unique, ORDERS)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "topology.yaml"
    path.write_text(
        "topics:\n"
        f"  - name: ORDERS\n    kafka_topic: {unique}.ORDERS\n    key: /orderId\n"
        "    partitions: 2\n"
    )
    return path, topology


def dead_letter_topic(topology: Topology) -> str:
    """The dead-letter topic of a test's topology (unique too: ``SOW_DEAD_LETTER_TOPIC``)."""
    return topology.topics["ORDERS"].kafka_topic.replace(".ORDERS", ".dead-letter")


def event_topic_prefix(dead_letters: str) -> str:
    """The event topics' prefix of a test (unique too: ``SOW_EVENT_TOPIC_PREFIX``)."""
    return dead_letters.replace(".dead-letter", ".events")


def acls(component: str, topology: Topology, group: str = "sow-processor") -> list[Acl]:
    """The ACLs of ``component`` for a test's topology, group, dead-letter topic and
    event topics."""
    dead_letters = dead_letter_topic(topology)
    context = AclContext(
        group_id=group,
        dead_letter_topic=dead_letters,
        event_topic_prefix=event_topic_prefix(dead_letters),
    )
    return component_acls(component, topology, context)


class Sow:
    """One ``sow <command>`` run as a user runs it, against the secured broker, its stderr
    collected by a thread."""

    def __init__(
        self,
        command: str,
        workdir: Path,
        bootstrap: str,
        properties: dict[str, str],
        group: str,
        *extra: str,
        dead_letters: str = "",
    ) -> None:
        """``dead_letters``: the dead-letter topic (default: the product's), and with it
        the event topics' prefix (:func:`event_topic_prefix`)."""
        grpc = ["--grpc-address", "127.0.0.1:0"] if command != "process" else []
        env = {
            **serve_env(),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SOW_KAFKA_PROPERTIES": properties_text(properties),
        }
        if dead_letters:
            env["SOW_DEAD_LETTER_TOPIC"] = dead_letters
            env["SOW_EVENT_TOPIC_PREFIX"] = event_topic_prefix(dead_letters)
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "processor.cli", command, *grpc),
                *("--topology", "topology.yaml", "--group-id", group),
                *("--state-dir", f"state-{command}", *extra),
            ],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "stop with Ctrl-C" in line:
                self.ready.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def address(self) -> str:
        return next(line.split()[1] for line in self.lines if "gRPC:" in line)

    def until_ready(self, within_s: float = 60) -> None:
        deadline = time.monotonic() + within_s
        while not self.ready.wait(0.1):
            assert self.process.poll() is None, (
                f"exited with {self.process.returncode} before it was ready:\n{self.output}"
            )
            assert time.monotonic() < deadline, f"not ready within {within_s}s:\n{self.output}"

    def until_exit(self, within_s: float = 60) -> int:
        """The exit code, once it exits by itself (fails the test if it does not)."""
        try:
            return self.process.wait(within_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"still running after {within_s}s:\n{self.output}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> Sow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def client_properties(properties: dict[str, str]) -> Iterator[None]:
    """This process's Kafka clients made with ``properties`` (as SOW_KAFKA_PROPERTIES)."""
    use_client_properties(properties)
    try:
        yield
    finally:
        use_client_properties({})


def refusal_lines(output: str) -> list[str]:
    """The lines that name a refusal (credentials or a missing permission)."""
    return [
        line
        for line in output.splitlines()
        if "Kafka refused" in line or "authentication failed" in line or "TLS" in line
    ]
