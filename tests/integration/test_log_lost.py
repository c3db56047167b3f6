"""A broker that lost its log (a new cluster, a deleted log directory, or the memory-only
Tansu broker restarted): the SOW keeps its state, takes no other action, and is queryable
again (AMPS: SOW newer than the log)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from processor.topology.model import SowTopic
from tests.conftest import StartOwnBroker
from tests.integration.harness import namespaced, running_sow

#: Also run on the fallback Tansu broker in CI (pyproject.toml's smoke marker).
pytestmark = pytest.mark.smoke


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="needs a broker it can restart"
)
def test_store_survives_a_broker_that_lost_its_log(
    tmp_path: Path, unique: str, own_broker: StartOwnBroker
) -> None:
    topology = namespaced(unique, SowTopic("ORDERS", keys=("/orderId",), partitions=2))
    first = own_broker()
    try:
        with running_sow(first.bootstrap_servers, topology, tmp_path, unique) as (_, client):
            last = {}  # a min_position covers one partition: wait for each one's last write
            for order in range(20):
                reply = client.publish("ORDERS", orjson.dumps({"orderId": order, "v": 1}))
                last[reply.position.partition] = reply.position
            records, _, _ = client.query("ORDERS", min_position=list(last.values()))
            assert len(records) == 20
    finally:
        first.stop()
    second = own_broker()  # a new, empty log
    try:
        with running_sow(second.bootstrap_servers, topology, tmp_path, unique) as (app, client):
            assert app.processor is not None
            assert app.processor.ready.wait(60)
            fresh = client.publish("ORDERS", orjson.dumps({"orderId": 99, "v": 2}))
            records, _, _ = client.query("ORDERS", min_position=[fresh.position])
            ids = sorted(orjson.loads(r.data)["orderId"] for r in records)
            assert ids == [*range(20), 99]
    finally:
        second.stop()
