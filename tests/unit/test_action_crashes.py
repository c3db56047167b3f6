"""Actions exactly once across a crash between commit steps, on the broker-free driver
(processor.testing): expiries, condition timeouts and a scheduled delete-sow with the
deletes it makes each publish one audit record per event, however the processor that
made them died (the SIGKILL of a real processor: tests/integration/test_action_kills.py).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from processor.errors import SimulatedCrashError
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.memory.broker import MemoryLog
from processor.testing import MemoryBackend, start_memory
from processor.topology.yaml_loader import parse_yaml

TOPOLOGY = parse_yaml(
    """
topics:
  - {name: ORDERS, key: /id, partitions: 2, expiration: 1500ms}
  - {name: AUDIT, sow: false}
actions:
  - on: {module: sow-expire-message, topic: ORDERS}
    do: {module: publish-message, topic: AUDIT}
  - on: {module: message-condition-timeout, topic: ORDERS, filter: "/status = 'pending'",
         duration: 300ms}
    do: {module: publish-message, topic: AUDIT}
  - name: purge
    on: {module: schedule, every: 1s}
    do: {module: delete-sow, topic: ORDERS, filter: "/status = 'closed'"}
  - on: {module: sow-delete-message, topic: ORDERS}
    do: {module: publish-message, topic: AUDIT}
""",
    "crashes.yaml",
)
ORDERS = TOPOLOGY.topic("ORDERS")
STATUSES = ("open", "pending", "closed")
RECORDS = 60


def _publish(log: MemoryLog) -> dict[bytes, str]:
    generator = FieldKeyGenerator(ORDERS.domain, ORDERS.keys)
    statuses = {}
    for i in range(RECORDS):
        status = STATUSES[i % 3]
        sow_key = generator({"id": i}).encode()
        value = orjson.dumps({"id": i, "status": status})
        log.append(ORDERS.kafka_topic, partition_for(sow_key, 2), sow_key, value)
        statuses[sow_key] = status
    return statuses


def _audit(log: MemoryLog) -> Counter[tuple[bytes, bytes]]:
    """(SowKey, reason) of every committed audit record, counted."""
    end = log.stable_end("AUDIT", 0)
    found: Counter[tuple[bytes, bytes]] = Counter()
    for record in log.read("AUDIT", 0, 0, end, end + 1):
        headers = dict(record.headers() or ())
        found[(headers["sow.action.sow_key"], headers["sow.action.reason"])] += 1
    return found


@pytest.mark.parametrize("crash", ["produced:2", "committed:4"])
def test_each_event_is_acted_on_once_across_a_crash(tmp_path: Path, crash: str) -> None:
    log = MemoryLog()
    state_dir = tmp_path / "state"
    crashing = start_memory(
        TOPOLOGY,
        state_dir,
        backend=MemoryBackend(log, crash=crash),
        service=False,
        group_id="g",
    )
    statuses = _publish(log)
    deadline = time.monotonic() + 20
    while crashing.failure() is None:
        assert time.monotonic() < deadline, "the processor never reached the crash step"
        time.sleep(0.005)
    assert isinstance(crashing.errors[0], SimulatedCrashError), crashing.errors
    crashing.stop()

    survivor = start_memory(
        TOPOLOGY, state_dir, backend=MemoryBackend(log), service=False, group_id="g"
    )
    # every record ends (expired or deleted), and each pending one times out first
    expected = RECORDS + RECORDS // 3
    try:
        deadline = time.monotonic() + 20
        while sum(_audit(log).values()) < expected:
            assert survivor.failure() is None, survivor.failure()
            assert time.monotonic() < deadline, f"audit: {sorted(_audit(log).items())}"
            time.sleep(0.05)
        time.sleep(1.2)  # a record acted on twice would show by now
    finally:
        survivor.stop()
    audit = _audit(log)
    assert max(audit.values()) == 1, [event for event, n in audit.items() if n > 1]
    for sow_key, status in statuses.items():
        reasons = {reason for key, reason in audit if key == sow_key}
        if status == "pending":
            assert reasons == {b"timeout", b"time_limit"}
        elif status == "open":
            assert reasons == {b"time_limit"}
        else:  # the schedule or the expiry came first
            assert reasons in ({b"deleted"}, {b"time_limit"}), (sow_key, reasons)
