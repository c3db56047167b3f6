"""A stuck processor is never silent (processor/engine/watchdog.py): readiness and gRPC
health turn false within seconds, one log line says what is stuck, and the processor
recovers by itself with nothing lost or applied twice (checked against a dict model of
every acknowledged publish, and the changelog holds each update once)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import orjson
import pytest
from confluent_kafka import Consumer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from processor.app import Application, start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.log import Record
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.conftest import StartOwnBroker
from tests.integration.harness import waited_for
from tests.integration.test_crash_recovery import assert_changelog_exactly_once
from tests.integration.test_fault_suite import StreamedModel, paced

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: The acceptance bound: readiness false within this long of getting stuck.
NOTICED_WITHIN_S = 10.0


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return int(reply.status)


def stuck(app: Application) -> bool:
    reason = app.readiness()
    return reason is not None and "stuck" in reason


@pytest.fixture
def orders(unique: str) -> SowTopic:
    return SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.o", partitions=2)


@contextlib.contextmanager
def sow_on(
    bootstrap: str, topic: SowTopic, tmp_path: Path, unique: str, membership: str = "dynamic"
) -> Iterator[Application]:
    """Processor (a thread, group mode), replica and gRPC service, ready."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path / "state",
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
        membership=membership,
    )
    app = start(settings, topology=Topology({"ORDERS": topic}))
    try:
        assert app.processor is not None
        assert app.processor.ready.wait(60)
        waited_for(lambda: app.readiness() is None, 60, "readiness")
        yield app
    finally:
        app.stop()


def matches_the_model(
    app: Application, client: SowClient, model: StreamedModel, bootstrap: str, topic: SowTopic
) -> None:
    """Every acknowledged publish is in the SOW (last value per key), and in the
    changelog exactly once."""
    last = [
        sow_pb2.Position(topic=topic.kafka_topic, partition=p, offset=end - 1)
        for p, end in model.ends.items()
    ]
    records, _, _ = client.query("ORDERS", min_position=last, timeout=120, timeout_seconds=90)
    assert {r.sow_key.encode(): r.data for r in records} == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)


def lose_the_partitions(app: Application) -> None:
    """The fault: the live consumer drops its partitions inside its next ``consume`` (on
    the poll loop's thread, as the client requires) and the processor is not told."""
    assert app.processor is not None
    consumer = app.processor._input
    assert consumer is not None
    consume = consumer.consume
    lost = threading.Event()

    def consume_after_losing(max_records: int, timeout_s: float) -> Sequence[Record]:
        if not lost.is_set():
            lost.set()
            consumer._consumer.unassign()  # type: ignore[attr-defined]
        return consume(max_records, timeout_s)

    consumer.consume = consume_after_losing  # type: ignore[method-assign]
    assert lost.wait(10)


def test_a_consumer_that_silently_lost_its_partitions_is_noticed_and_replaced(
    bootstrap: str, orders: SowTopic, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer is unassigned behind the processor's back (what a membership lost
    without a rebalance callback looks like): it waits in consume for records that never
    come while publishes go on."""
    with (
        caplog.at_level(logging.INFO, logger="processor.engine.processor"),
        sow_on(bootstrap, orders, tmp_path, unique) as app,
        SowClient(app.grpc_address) as client,
    ):
        assert app.processor is not None
        model = StreamedModel()
        model.publish(client, (orjson.dumps({"orderId": i, "v": 0}) for i in range(1000)))
        stop = threading.Event()
        publisher = threading.Thread(
            target=model.publish, args=(client, paced(300, stop, seed=5)), daemon=True
        )
        publisher.start()
        try:
            time.sleep(1.0)
            lose_the_partitions(app)
            noticed = waited_for(lambda: stuck(app), 30, "readiness false")
            assert noticed < NOTICED_WITHIN_S, noticed
            # The health service follows readiness within its 0.25 s check interval.
            waited_for(lambda: health(app.grpc_address) == NOT_SERVING, 2, "NOT_SERVING")
            waited_for(lambda: app.readiness() is None, 60, "recovery")
            waited_for(lambda: health(app.grpc_address) == SERVING, 2, "SERVING again")
        finally:
            stop.set()
            publisher.join(60)
        matches_the_model(app, client, model, bootstrap, orders)
        assert app.processor.stalls >= 1
    lines = [r.getMessage() for r in caplog.records if "processor stuck" in r.getMessage()]
    assert lines, "the stall was not logged"
    assert "has stayed at" in lines[0], lines[0]  # what is stuck, in one line
    assert any("processor resumed" in r.getMessage() for r in caplog.records)


def test_a_frozen_broker_turns_readiness_false_and_loses_nothing(
    own_broker: StartOwnBroker, orders: SowTopic, tmp_path: Path, unique: str
) -> None:
    broker = own_broker()
    bootstrap = broker.bootstrap_servers
    with (
        sow_on(bootstrap, orders, tmp_path, unique) as app,
        SowClient(app.grpc_address) as client,
    ):
        model = StreamedModel()
        model.publish(client, (orjson.dumps({"orderId": i, "v": 0}) for i in range(1000)))
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            noticed = waited_for(lambda: stuck(app), 30, "readiness false")
            assert noticed < NOTICED_WITHIN_S, noticed
            # Whatever the loop was doing when the broker froze, the reason names the broker.
            assert "broker has not answered" in str(app.readiness())
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        waited_for(lambda: app.readiness() is None, 90, "recovery after the thaw")
        model.publish(client, (orjson.dumps({"orderId": i, "v": 1}) for i in range(0, 1000, 3)))
        matches_the_model(app, client, model, bootstrap, orders)


def test_a_processor_fenced_out_of_its_group_rejoins_and_loses_nothing(
    bootstrap: str, orders: SowTopic, tmp_path: Path, unique: str
) -> None:
    """Static membership: another consumer joins with the processor's group.instance.id,
    which fences the processor's member at the broker. The processor must take its
    partitions back (a new consumer) and apply everything published meanwhile."""
    with (
        sow_on(bootstrap, orders, tmp_path, unique, membership="static") as app,
        SowClient(app.grpc_address) as client,
    ):
        assert app.processor is not None
        model = StreamedModel()
        model.publish(client, (orjson.dumps({"orderId": i, "v": 0}) for i in range(500)))
        stop = threading.Event()
        publisher = threading.Thread(
            target=model.publish, args=(client, paced(300, stop, seed=7)), daemon=True
        )
        publisher.start()
        try:
            rogue = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"{unique}-group",
                    "group.instance.id": f"{unique}-group-0",
                    "session.timeout.ms": 6000,
                    "partition.assignment.strategy": "range",
                    "enable.auto.commit": False,
                    "log_level": 0,
                }
            )
            rogue.subscribe([orders.kafka_topic])
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                rogue.poll(0.2)  # joins (fencing the processor) and holds the partitions
            rogue.close()
            waited_for(lambda: app.readiness() is None, 90, "recovery")
            time.sleep(2.0)
        finally:
            stop.set()
            publisher.join(60)
        matches_the_model(app, client, model, bootstrap, orders)
