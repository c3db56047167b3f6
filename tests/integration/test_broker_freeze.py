"""A frozen broker (SIGSTOP): reads answer from the replica at once, publishes honour the
client's deadline with UNAVAILABLE and leave the read threads alone, and everything
recovers after SIGCONT."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import ServiceError, SowClient
from processor.topology.model import SowTopic
from tests.conftest import StartOwnBroker
from tests.integration.harness import namespaced, running_sow


def test_reads_and_deadlines_during_a_broker_freeze(
    own_broker: StartOwnBroker, tmp_path: Path, unique: str
) -> None:
    """On a broker of this test alone: freezing the session's broker would stall others."""
    broker = own_broker()
    topology = namespaced(unique, SowTopic(name="ORDERS", keys=("/orderId",), partitions=2))
    with running_sow(broker.bootstrap_servers, topology, tmp_path, unique) as (app, client):
        replies = list(
            client.publish_stream("ORDERS", (orjson.dumps({"orderId": i}) for i in range(500)))
        )
        client.query("ORDERS", min_position=[r.position for r in replies[-20:]])
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            # Publishes that wait for the broker hold up to all their slots meanwhile.
            stuck: list[str] = []

            def publish_and_fail(n: int) -> None:
                with SowClient(app.grpc_address, publisher="") as other:
                    try:
                        other.publish("ORDERS", orjson.dumps({"orderId": 10_000 + n}), timeout=4)
                    except ServiceError as exc:
                        stuck.append(exc.code)
                    else:
                        stuck.append("OK")

            publishers = [threading.Thread(target=publish_and_fail, args=(n,)) for n in range(30)]
            for thread in publishers:
                thread.start()
            time.sleep(0.3)
            took = []
            for _ in range(15):
                began = time.perf_counter()
                records, _, _ = client.query("ORDERS")
                took.append(time.perf_counter() - began)
                assert len(records) == 500
            assert statistics.median(took) < 0.1, took

            quick = SowClient(app.grpc_address, publisher="")
            began = time.perf_counter()
            with pytest.raises(ServiceError) as caught:
                quick.publish("ORDERS", orjson.dumps({"orderId": 1}), timeout=1.0)
            elapsed = time.perf_counter() - began
            quick.close()
            assert caught.value.code == "UNAVAILABLE", caught.value
            assert elapsed < 1.5
            for thread in publishers:
                thread.join(60)
            assert len(stuck) == 30
            assert set(stuck) == {"UNAVAILABLE"}, stuck
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        # Recovered by itself: a publish goes through and is applied.
        fresh = client.publish("ORDERS", orjson.dumps({"orderId": 20_000}), timeout=60)
        records, _, _ = client.query(
            "ORDERS", sow_keys=[fresh.sow_key], min_position=[fresh.position], timeout=90
        )
        assert len(records) == 1
