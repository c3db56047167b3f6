"""Exactly-once across a crash between every pair of commit steps, on the broker-free
driver (processor.testing): the real engine loop, commit protocol and RocksDB stores over
the memory log. The counterpart on Apache Kafka, with the processor SIGKILLed for real, is
tests/integration/test_crash_recovery.py::test_crash_between_commit_steps.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import orjson
import pytest

from processor.app import Application
from processor.errors import SimulatedCrashError
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.memory.broker import MemoryLog
from processor.testing import MemoryBackend, start_memory
from processor.topology.model import SowTopic, Topology
from processor.topology.upserts import UpsertSpec
from tests.integration.harness import store_contents
from tests.integration.test_crash_recovery import changelog_sow

#: With its upsert topic (docs/upsert-tables.md), written in the same transactions.
ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2, upsert=UpsertSpec())
TOPOLOGY = Topology({"ORDERS": ORDERS})


def _publish(
    log: MemoryLog,
    updates: int,
    keys: int,
    seed: int = 7,
    history: dict[bytes, list[bytes | None]] | None = None,
) -> dict[bytes, bytes]:
    """Publish updates keyed by SowKey (2% deletes); return the SOW they leave, and note
    each record's changes in ``history``."""
    changes: dict[bytes, list[bytes | None]] = {} if history is None else history
    rng = random.Random(seed)
    generator = FieldKeyGenerator(ORDERS.domain, ORDERS.keys)
    model: dict[bytes, bytes] = {}
    for i in range(updates):
        order = rng.randrange(keys)
        sow_key = generator({"orderId": order}).encode()
        partition = partition_for(sow_key, ORDERS.partitions)
        if rng.random() < 0.02:
            log.append(ORDERS.kafka_topic, partition, sow_key, None)
            if model.pop(sow_key, None) is not None:
                changes.setdefault(sow_key, []).append(None)
        else:
            value = orjson.dumps({"orderId": order, "seq": i})
            log.append(ORDERS.kafka_topic, partition, sow_key, value)
            model[sow_key] = value
            changes.setdefault(sow_key, []).append(value)
    return model


def _wait_applied(app: Application, log: MemoryLog, timeout_s: float = 20.0) -> None:
    """Until the group's committed offsets reach the input's end, or the processor fails."""
    deadline = time.monotonic() + timeout_s
    ends = {p: log.stable_end(ORDERS.kafka_topic, p) for p in range(ORDERS.partitions)}
    while time.monotonic() < deadline:
        assert app.failure() is None, app.failure()
        committed = {p: log.committed("g", ORDERS.kafka_topic, p) for p in ends}
        if all(committed[p] >= end for p, end in ends.items()):
            return
        time.sleep(0.005)
    raise AssertionError(f"not applied within {timeout_s}s: {committed} of {ends}")


def _changelog_exactly_once(log: MemoryLog) -> dict[bytes, bytes]:
    """The SOW the committed changelog holds, checking no update is in it twice."""
    records = []
    for p in range(ORDERS.partitions):
        end = log.stable_end(ORDERS.changelog_topic, p)
        records += log.read(ORDERS.changelog_topic, p, 0, end, end + 1)
    return changelog_sow(records)


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("step", ["produced", "offsets-sent", "committed", "stored"])
def test_a_crash_between_commit_steps_loses_and_repeats_nothing(
    tmp_path: Path, step: str, nth: int
) -> None:
    log = MemoryLog()
    state_dir = tmp_path / "state"
    crashing = start_memory(
        TOPOLOGY,
        state_dir,
        backend=MemoryBackend(log, crash=f"{step}:{nth}"),
        service=False,
        group_id="g",
        max_batch=500,
    )
    history: dict[bytes, list[bytes | None]] = {}
    model = _publish(log, 3_000, 400, history=history)
    deadline = time.monotonic() + 20
    while crashing.failure() is None:
        assert time.monotonic() < deadline, "the processor never reached the crash step"
        time.sleep(0.005)
    assert isinstance(crashing.errors[0], SimulatedCrashError), crashing.errors
    crashing.stop()

    survivor = start_memory(
        TOPOLOGY, state_dir, backend=MemoryBackend(log), service=False, group_id="g", max_batch=500
    )
    try:
        _wait_applied(survivor, log)
    finally:
        survivor.stop()
    assert store_contents(state_dir, ORDERS) == model
    assert _changelog_exactly_once(log) == model
    assert _upsert_records(log) == history  # each change once, in order: none lost or repeated


def _upsert_records(log: MemoryLog) -> dict[bytes, list[bytes | None]]:
    """Each key's committed records in the upsert topic, in order."""
    topic = ORDERS.upsert_topic
    assert topic is not None
    records: dict[bytes, list[bytes | None]] = {}
    for p in range(ORDERS.partitions):
        end = log.stable_end(topic, p)
        for record in log.read(topic, p, 0, end, end + 1):
            records.setdefault(record.key(), []).append(record.value())
    return records


def test_a_store_rebuilt_from_the_changelog_holds_the_sow(tmp_path: Path) -> None:
    log = MemoryLog()
    first = start_memory(
        TOPOLOGY, tmp_path / "a", backend=MemoryBackend(log), service=False, group_id="g"
    )
    model = _publish(log, 2_000, 300)
    try:
        _wait_applied(first, log)
    finally:
        first.stop()
    rebuilt = start_memory(
        TOPOLOGY, tmp_path / "b", backend=MemoryBackend(log), service=False, group_id="g"
    )
    try:
        assert rebuilt.processor is not None
        assert rebuilt.processor.ready.wait(20)
    finally:
        rebuilt.stop()
    assert store_contents(tmp_path / "b", ORDERS) == model
