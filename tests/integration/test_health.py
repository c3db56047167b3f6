"""The grpc.health.v1 service and the refusal of a taken gRPC port."""

from __future__ import annotations

import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from processor.app import start
from processor.config import Settings
from processor.errors import ConfigurationError
from processor.server.health import Health
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/orderId",))
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _status(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return int(reply.status)


def test_a_ready_service_reports_serving_for_itself_and_its_services(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(bootstrap, namespaced(unique, ORDERS), tmp_path, unique) as (app, _):
        deadline = time.monotonic() + 20
        while app.readiness() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert app.readiness() is None
        time.sleep(0.5)  # one poll of the health service
        for service in ("", "kafka_sow.v1.Sow", "kafka_sow.v1.Subscriptions"):
            assert _status(app.grpc_address, service) == SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            _status(app.grpc_address, "no.such.Service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_flips_to_serving_only_once_the_processor_is_ready(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    (tmp_path / "topology.yaml").write_text(
        f"topics:\n  - name: ORDERS\n    key: [/orderId]\n"
        f"    kafka_topic: {topology.topic('ORDERS').kafka_topic}\n"
    )
    settings = Settings(
        bootstrap_servers=bootstrap,
        topology=tmp_path / "topology.yaml",
        state_dir=tmp_path / "state",
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
    )
    # The processor runs as a child process (as in `sow serve`): it takes a while to join
    # and restore, and the service must not say SERVING before.
    app = start(settings, processor_process=True)
    try:
        seen: list[int] = []
        with grpc.insecure_channel(app.grpc_address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=60
            )
            for reply in watch:
                seen.append(int(reply.status))
                if reply.status == SERVING:
                    ready = app.processor_ready
                    assert ready is not None
                    assert ready.is_set()
                    break
            watch.cancel()
        assert seen[0] == NOT_SERVING
        assert seen[-1] == SERVING
    finally:
        app.stop()


def test_the_health_service_follows_the_readiness_check() -> None:
    reasons: list[str | None] = ["catching up"]
    health = Health(lambda: reasons[-1], poll_s=0.02)
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health.add_to(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    health.start()
    try:
        address = f"127.0.0.1:{port}"
        assert _status(address) == NOT_SERVING
        assert health.reason == "catching up"
        reasons.append(None)
        time.sleep(0.2)
        assert _status(address) == SERVING
        assert health.reason is None
        reasons.append("a component failed")
        time.sleep(0.2)
        assert _status(address) == NOT_SERVING
        health.stop()
        assert _status(address) == NOT_SERVING
    finally:
        server.stop(0)


def test_a_taken_grpc_port_is_refused_not_shared(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(bootstrap, topology, tmp_path / "a", unique) as (app, _):
        settings = Settings(
            bootstrap_servers=bootstrap,
            state_dir=tmp_path / "b",
            grpc_address=app.grpc_address,
            group_id=f"{unique}-other",
        )
        began = time.monotonic()
        with pytest.raises(ConfigurationError, match="port is taken"):
            start(settings, topology=topology, processor=False)
        assert time.monotonic() - began < 5
