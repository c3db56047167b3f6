"""Readiness, as the standard gRPC health service (grpc.health.v1) reports it.

:class:`Health` asks a readiness check every ``poll_s`` and sets every service this
process serves to SERVING while the check passes and NOT_SERVING otherwise (with the
reason kept for the HTTP ``/readyz`` answer). The check is the application's (see
:func:`processor.app.readiness`): the processor has joined and restored, the read
replica has caught up, and no component has failed. Kubernetes' gRPC probes and
``grpc_health_probe`` ask the overall service ``""``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

#: The overall service and the product's services, by their full names.
SERVICES = ("", "kafka_sow.v1.Sow", "kafka_sow.v1.Subscriptions")

#: A readiness check: None when ready, else why not (one line).
Readiness = Callable[[], "str | None"]


class Health:
    """The health service of one gRPC server, kept current by a polling thread."""

    def __init__(self, readiness: Readiness, poll_s: float = 0.25) -> None:
        self._readiness = readiness
        self._poll_s = poll_s
        self.servicer = health.HealthServicer()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._reason: str | None = "starting"
        for service in SERVICES:
            self.servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    def add_to(self, server: Any) -> None:
        """Serve it on ``server`` (before the server starts)."""
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    @property
    def reason(self) -> str | None:
        """None while serving, else why not (as of the last poll)."""
        return self._reason

    def start(self) -> None:
        """Begin polling (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sow-health", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self.poll()
            if self._stopped.wait(self._poll_s):
                return

    def poll(self) -> None:
        """Ask the readiness check once and publish the answer."""
        try:
            reason = self._readiness()
        except Exception as exc:  # a broken check must not look healthy
            reason = f"the readiness check failed: {exc!r}"
        if reason == self._reason:
            return
        if reason is None:
            log.info("ready: the health service reports SERVING")
        elif self._reason is None:
            log.warning("not ready (%s): the health service reports NOT_SERVING", reason)
        self._reason = reason
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if reason is None
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in SERVICES:
            self.servicer.set(service, status)

    def stop(self) -> None:
        """Report NOT_SERVING for good (the process is stopping) and stop polling."""
        self._stopped.set()
        self._reason = "stopping"
        self.servicer.enter_graceful_shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
