"""Republishing a lost changelog survives a crash: a processor killed after its first
republish transaction leaves a cursor in the store, and the next one carries on after it,
so every record reaches the new changelog exactly once."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from processor.app import topic_specs
from processor.engine.republish import REPUBLISH_CURSOR
from processor.log.kafka.settings import ensure_topics
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic, Topology
from tests.conftest import StartOwnBroker
from tests.integration.test_crash_recovery import (
    Model,
    ProcessorProcess,
    publish,
    read_topic_partition,
    reap,
    wait_until_committed,
    write_topology,
)

KEYS = 25_000
STATIC = {"SOW_ASSIGNMENT": "static"}

__all__ = ["reap"]  # the fixture that kills processors a failed test left running


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="needs a broker it can restart"
)
def test_a_republish_cut_by_a_crash_resumes_after_its_cursor(
    tmp_path: Path, unique: str, own_broker: StartOwnBroker
) -> None:
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders", partitions=1)
    topology_file = write_topology(tmp_path / "orders.yaml", topic)
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    model = Model()
    first = own_broker()
    try:
        ensure_topics(
            first.bootstrap_servers, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter")
        )
        publish(first.bootstrap_servers, topic, KEYS * 2, KEYS, 0.0, model, seed=3)
        worker = ProcessorProcess(first.bootstrap_servers, topology_file, state_dir, group, STATIC)
        wait_until_committed(first.bootstrap_servers, group, topic.kafka_topic, model.ends, 120)
        worker.terminate()
    finally:
        first.stop()
    assert len(model.state) > 20_000  # three republish transactions of 10,000

    second = own_broker()  # a new, empty log
    try:
        bootstrap = second.bootstrap_servers
        crashing = ProcessorProcess(
            bootstrap, topology_file, state_dir, group, {**STATIC, "SOW_CRASH_AT": "republished:1"}
        )
        assert crashing.process.wait(120) == 86, crashing.output
        assert "re-publishing" in crashing.output
        store = RocksDBStore(state_dir / "ORDERS" / "0")
        cursor = store.get_meta(REPUBLISH_CURSOR)
        store.close()
        assert cursor is not None
        assert cursor.startswith(b"r"), cursor

        resumed = ProcessorProcess(bootstrap, topology_file, state_dir, group, STATIC)
        assert resumed.assigned.wait(120), resumed.output
        resumed.terminate()
        assert "resuming the re-publishing" in resumed.output, resumed.output
        for done, total in re.findall(
            r"re-published ([\d,]+) records \(of ([\d,]+) in the store\)", resumed.output
        ):  # publisher sequences are not counted as records
            assert int(done.replace(",", "")) <= int(total.replace(",", "")), resumed.output
        store = RocksDBStore(state_dir / "ORDERS" / "0")
        assert store.get_meta(REPUBLISH_CURSOR) is None
        store.close()

        upserts = [
            r.key()  # type: ignore[attr-defined]
            for r in read_topic_partition(bootstrap, topic.changelog_topic, 0)
            if not r.key().startswith(b"\x00")  # type: ignore[attr-defined]
        ]
        assert len(upserts) == len(set(upserts)), "a record was republished twice"
        assert set(upserts) == set(model.state)
    finally:
        second.stop()
