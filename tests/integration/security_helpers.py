"""Secured gRPC services for the client tests: certificates made at run time
(tests/pki.py) and a second, TLS (and, with processor/server/auth.py, logon) server over a
running kafka-sow's replica, gateway, subscription hub and queues."""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson

from processor.app import Application
from processor.publish.gateway import Gateway
from processor.query.sow import QueryEngine
from processor.server.service import start_server
from processor.topology.yaml_loader import parse_yaml
from tests.pki import CA, Issued, issue, make_ca


@dataclass(frozen=True)
class Pki:
    """A CA, the query service's certificate (127.0.0.1 and localhost), a client's
    certificate by the same CA, and a CA and client certificate the service does not know."""

    ca: CA
    server: Issued
    alice: Issued
    other_ca: CA
    mallory: Issued


def make_pki(directory: Path) -> Pki:
    ca = make_ca("sow", directory / "sow")
    other = make_ca("other", directory / "other")
    server = issue(ca, "query-service", server=True, ips=["127.0.0.1"], dns=["localhost"])
    return Pki(ca, server, issue(ca, "alice"), other, issue(other, "mallory"))


def topology(unique: str) -> Any:
    """ORDERS (a SOW topic), the plain topic ``orders`` and the queue Q over it."""
    text = (
        "topics:\n"
        f"  - {{name: ORDERS, key: [/orderId], kafka_topic: {unique}.ORDERS}}\n"
        f"  - {{name: orders, sow: false, kafka_topic: {unique}.orders}}\n"
        "queues:\n"
        "  - {name: Q, message_type: json, underlying: orders, max_per_subscription_backlog: 10}\n"
    )
    return parse_yaml(text, "security.yaml")


def tls_credentials(pki: Pki, require_client_cert: bool = False) -> Any:
    return grpc.ssl_server_credentials(
        [(pki.server.key_pem, pki.server.chain.read_bytes())],
        root_certificates=pki.ca.pem if require_client_cert else None,
        require_client_auth=require_client_cert,
    )


@contextlib.contextmanager
def serving(app: Application, credentials: Any = None, contexts: Any = None) -> Iterator[str]:
    """A second gRPC server over ``app``'s components, with ``credentials`` (TLS) and
    ``contexts`` (logon); yields its address."""
    assert app.replica is not None
    assert app.log_writer is not None
    server, address = start_server(
        QueryEngine(app.topology, app.replica),
        Gateway(app.topology, app.log_writer, app.replica),
        "127.0.0.1:0",
        app.subscriptions,
        app.health,
        queues=app.queues,
        contexts=contexts,
        credentials=credentials,
    )
    try:
        yield address
    finally:
        server.stop(0)


def sow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``sow ARGS`` as a user runs it (environment: this one plus ``env``)."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "processor.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[Any]:
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]


class Subscriber:
    """``sow subscribe ...`` running, its JSON lines as they come."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        import os

        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", "subscribe", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(orjson.loads(line))

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(20)
        assert self.process.stderr is not None
        return code, self.process.stderr.read()
