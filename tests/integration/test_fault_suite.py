"""The fault suite (heavy): 100 SIGKILLs of the processor during a publish stream, and a
60 s broker freeze; nothing lost, nothing applied twice, everything recovers by itself.

Run with ``python -m pytest -m heavy tests/integration/test_fault_suite.py``.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from processor.app import Application, start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.topology.model import SowTopic, Topology
from tests.conftest import StartOwnBroker
from tests.integration.test_crash_recovery import (
    Model,
    ProcessorProcess,
    assert_changelog_exactly_once,
    reap,
    store_contents,
    wait_until_committed,
    write_topology,
)

__all__ = ["reap"]  # the fixture that kills processors a failed test left running

KEYS = 20_000


def paced(rate: float, stop: threading.Event, seed: int) -> Iterator[bytes]:
    """Updates of random orders at about ``rate`` per second until ``stop``."""
    rng = random.Random(seed)
    began = time.monotonic()
    sent = 0
    while not stop.is_set():
        pause = began + sent / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        yield orjson.dumps({"orderId": rng.randrange(KEYS), "seq": sent})
        sent += 1


class StreamedModel(Model):
    """The dict model of a publish stream: last acknowledged message per SowKey, and the
    log's end per partition."""

    def publish(self, client: SowClient, messages: Iterator[bytes]) -> None:
        sent: collections.deque[bytes] = collections.deque()

        def remembered() -> Iterator[bytes]:
            for data in messages:
                sent.append(data)
                yield data

        for reply in client.publish_stream("ORDERS", remembered(), batch_size=200):
            data = sent.popleft()  # replies come in the order of the messages
            assert not reply.error_code, reply.error
            p = reply.position
            self.state[reply.sow_key.encode()] = data
            self.ends[p.partition] = max(self.ends.get(p.partition, 0), p.offset + 1)


def service_only(bootstrap: str, topic: SowTopic, tmp_path: Path, unique: str) -> Application:
    """The query service alone (replica, gateway, gRPC); the processor runs elsewhere."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path / "service-state",
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-unused",
        dead_letter_topic=f"{unique}.dead-letter",
    )
    return start(settings, topology=Topology({"ORDERS": topic}), processor=False)


def sigkill_scenario(bootstrap: str, unique: str, tmp_path: Path, kills_wanted: int) -> None:
    """SIGKILL the processor ``kills_wanted`` times at random points while a client
    streams publishes; then the SOW and the changelog must match the model exactly."""
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders", partitions=2)
    topology_file = write_topology(tmp_path / "orders.yaml", topic)
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    app = service_only(bootstrap, topic, tmp_path, unique)
    model = StreamedModel()
    stop = threading.Event()
    client = SowClient(app.grpc_address)
    publisher = threading.Thread(target=model.publish, args=(client, paced(2000, stop, seed=3)))
    publisher.start()
    rng = random.Random(17)
    kills = 0
    try:
        while kills < kills_wanted:
            worker = ProcessorProcess(bootstrap, topology_file, state_dir, group)
            assert worker.assigned.wait(60), worker.output
            time.sleep(rng.uniform(0.0, 1.5))
            worker.kill()
            kills += 1
            if kills % 10 == 0:
                print(f"{kills} kills, {len(model.state)} keys published", flush=True)
    finally:
        stop.set()
        publisher.join(60)
    final = ProcessorProcess(bootstrap, topology_file, state_dir, group)
    wait_until_committed(bootstrap, group, topic.kafka_topic, model.ends, 600)
    final.terminate()
    client.close()
    app.stop()
    assert store_contents(state_dir, topic) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)


@pytest.mark.heavy
@pytest.mark.timeout(3600)
def test_100_sigkills_during_a_publish_stream(bootstrap: str, unique: str, tmp_path: Path) -> None:
    # SOW_FAULT_KILLS runs a shorter version (each kill costs a session timeout, ~10 s).
    sigkill_scenario(bootstrap, unique, tmp_path, int(os.environ.get("SOW_FAULT_KILLS", "100")))


def freeze_scenario(
    tmp_path: Path, unique: str, seconds: float, own_broker: StartOwnBroker
) -> None:
    """Publish, freeze the broker for ``seconds`` while publishing goes on, thaw, and
    check the SOW against the model of every acknowledged publish."""
    broker = own_broker()
    try:
        bootstrap = broker.bootstrap_servers
        topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.o", partitions=2)
        settings = Settings(
            bootstrap_servers=bootstrap,
            state_dir=tmp_path / "state",
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            dead_letter_topic=f"{unique}.dead-letter",
        )
        app = start(settings, topology=Topology({"ORDERS": topic}))
        client = SowClient(app.grpc_address)
        # Ready first: until its processor has restored the changelogs, the service
        # answers no query (it would answer from a SOW that may be partial).
        deadline = time.monotonic() + 60
        while app.readiness() is not None:
            assert time.monotonic() < deadline, app.readiness()
            time.sleep(0.05)
        model = StreamedModel()
        model.publish(client, (orjson.dumps({"orderId": i, "v": 0}) for i in range(2000)))
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            slow = []
            while time.monotonic() - frozen_at < seconds:
                began = time.perf_counter()
                records, _, _ = client.query("ORDERS", top_n=10)
                slow.append(time.perf_counter() - began)
                time.sleep(0.5)
            assert max(slow) < 0.5, max(slow)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        # Everything after the thaw: publish updates, then compare.
        model.publish(client, (orjson.dumps({"orderId": i, "v": 1}) for i in range(0, 2000, 2)))
        last = [(f"{unique}.o", p, end - 1) for p, end in model.ends.items()]
        from processor.wire import sow_pb2

        records, _, _ = client.query(
            "ORDERS",
            min_position=[sow_pb2.Position(topic=t, partition=p, offset=o) for t, p, o in last],
            timeout=180,
            timeout_seconds=120,
        )
        assert {r.sow_key.encode(): r.data for r in records} == model.state
        client.close()
        app.stop()
        assert_changelog_exactly_once(bootstrap, replace(topic), model)
    finally:
        if broker.pid is not None:
            os.kill(broker.pid, signal.SIGCONT)
        broker.stop()


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_60s_broker_freeze(tmp_path: Path, unique: str, own_broker: StartOwnBroker) -> None:
    freeze_scenario(tmp_path, unique, 60.0, own_broker)


def test_short_broker_freeze(tmp_path: Path, unique: str, own_broker: StartOwnBroker) -> None:
    freeze_scenario(tmp_path, unique, 5.0, own_broker)
