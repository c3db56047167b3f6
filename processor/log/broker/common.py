"""What every broker kind shares: the Broker protocol, the external broker, loopback ports,
and waiting for a broker to answer."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from processor.errors import BrokerError

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

#: Kafka answers a fetch as soon as records arrive: the wait only bounds idle requests
#: (at 10 ms the idle embedded broker used 14% of a core answering them, at 100 ms 8%).
KAFKA_FETCH_WAIT_MS = 100
#: The consumer-group protocol every broker speaks (``Settings.group_protocol``).
CLASSIC_GROUP_PROTOCOL = "classic"
#: KIP-848's protocol: Apache Kafka 4.0 and later.
CONSUMER_GROUP_PROTOCOL = "consumer"
#: How the processor of ``sow serve`` gets its partitions (``Settings.assignment``): from
#: its consumer group, or all of them without one.
GROUP_ASSIGNMENT = "group"
STATIC_ASSIGNMENT = "static"


class Broker(Protocol):
    """A running broker this process may use."""

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port[,host:port]`` list clients connect to."""
        ...

    @property
    def description(self) -> str:
        """One line for banners and logs: what kind of broker this is, which version, and
        where."""
        ...

    @property
    def fetch_wait_ms(self) -> int:
        """How long a consumer's fetch should wait at this broker for new records (the
        default of ``Settings.fetch_wait_ms``)."""
        ...

    @property
    def group_protocol(self) -> str:
        """The processor's consumer-group protocol on this broker when none is set (the
        default of ``Settings.group_protocol``): ``consumer`` only where the broker is
        known to have it."""
        ...

    @property
    def assignment(self) -> str:
        """How a processor on this broker gets its partitions when not told (the default
        of ``Settings.assignment``): ``static`` only where a group join is slow and the
        broker is this process's own (docs/scaling.md)."""
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
    """A broker someone else runs (Apache Kafka, Redpanda, Confluent)."""

    bootstrap_servers: str

    @property
    def description(self) -> str:
        return f"external Kafka at {self.bootstrap_servers}"

    @property
    def fetch_wait_ms(self) -> int:
        return KAFKA_FETCH_WAIT_MS

    @property
    def group_protocol(self) -> str:
        # Its version is unknown here: KIP-848 needs Kafka 4.0+, and an older broker
        # refuses a consumer-protocol member outright, so the classic protocol is safe.
        return CLASSIC_GROUP_PROTOCOL

    @property
    def assignment(self) -> str:
        # Other processors may share it (sow process --instance-id N): join the group.
        return GROUP_ASSIGNMENT

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


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port`` and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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


#: Run by :func:`dying_with_parent` before the command: Linux is to send it SIGTERM when
#: the parent (argv[1]) ends; if the parent is already gone, it does not start at all.
_DEATH_SIGNAL_SHIM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def dying_with_parent(command: list[str]) -> list[str]:
    """``command`` as started so that Linux sends it SIGTERM when this process ends
    (``PR_SET_PDEATHSIG``): through a short Python shim that sets it and then execs the
    command. A shim, not a pre-exec hook: a hook makes subprocess fork() rather than
    vfork(), and a fork of a process whose gRPC server runs can abort in the child (gRPC's
    fork handlers; a broker restarted beside a live service died so). Only from the main
    thread, which lives as long as the process (the signal follows the thread that
    started the child), and only on Linux; elsewhere the command as it is."""
    if not sys.platform.startswith("linux"):
        return command
    if threading.current_thread() is not threading.main_thread():
        return command
    return [sys.executable, "-S", "-E", "-c", _DEATH_SIGNAL_SHIM, str(os.getpid()), *command]
