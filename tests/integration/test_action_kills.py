"""Actions under SIGKILL (issue 36): `sow serve` on the session's broker, its processor
child killed while records expire, time out a condition and are deleted by a schedule;
`sow serve` restarts it. Every event is acted on exactly once: the audit topic holds one
record per (record, reason), none twice, none missing (the record is produced in the
transaction of the event, so a killed transaction takes it with it; a tick's delete is
written in the transaction that notes the tick).

The many-kill run is heavy: ``python -m pytest -m heavy -s tests/integration/test_action_kills.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.harness import read_topic
from tests.integration.serve_helpers import Serve


def _topology(unique: str) -> str:
    return f"""
topics:
  - {{name: ORDERS, key: /id, kafka_topic: {unique}.ORDERS, partitions: 2, expiration: 2s}}
  - {{name: AUDIT, sow: false, kafka_topic: {unique}.AUDIT, partitions: 1}}
actions:
  - on: {{module: sow-expire-message, topic: ORDERS}}
    do: {{module: publish-message, topic: AUDIT}}
  - on: {{module: message-condition-timeout, topic: ORDERS, filter: "/status = 'pending'",
         duration: 500ms}}
    do: {{module: publish-message, topic: AUDIT}}
  - name: purge
    on: {{module: schedule, every: 1s}}
    do: {{module: delete-sow, topic: ORDERS, filter: "/status = 'closed'"}}
  - on: {{module: sow-delete-message, topic: ORDERS}}
    do: {{module: publish-message, topic: AUDIT}}
"""


STATUSES = ("open", "pending", "closed")
#: The reasons each kind of record is acted on for: it expires; a pending one times out
#: first; a closed one is deleted by the schedule, unless it expires first.
EXPECTED = {
    "open": ({b"time_limit"},),
    "pending": ({b"timeout", b"time_limit"},),
    "closed": ({b"deleted"}, {b"time_limit"}),
}


def _run(bootstrap: str, tmp_path: Path, unique: str, records: int, kills: int) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "topology.yaml").write_text(_topology(unique))
    # more restarts than kills, however close together they come
    serve = Serve(workdir, bootstrap, unique, env={"SOW_PROCESSOR_RESTARTS": str(kills + 5)})
    randomly = random.Random(36)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    began = time.monotonic()
    try:
        serve.until_ready()
        waves = kills + 1
        per_wave = records // waves
        for wave in range(waves):
            for i in range(
                wave * per_wave, records if wave == waves - 1 else (wave + 1) * per_wave
            ):
                value = json.dumps({"id": i, "status": STATUSES[i % 3]}).encode()
                producer.produce(f"{unique}.ORDERS", value, str(i).encode(), partition=i % 2)
            producer.flush(10)
            if wave < kills:
                time.sleep(randomly.uniform(0.8, 1.6))  # expiries are being made now
                os.kill(serve.processor(), signal.SIGKILL)
                time.sleep(0.2)
        expected = records + len(range(1, records, 3))
        found = read_topic(bootstrap, f"{unique}.AUDIT", expect=expected, timeout_s=60)
        time.sleep(1.5)  # anything more would show now
        found = read_topic(bootstrap, f"{unique}.AUDIT", timeout_s=10)
    finally:
        serve.process.send_signal(signal.SIGTERM)
        serve.process.wait(30)
    events: Counter[tuple[bytes, bytes]] = Counter()
    status_of: dict[bytes, str] = {}
    for record in found:
        headers = dict(record.headers())  # type: ignore[attr-defined]
        events[(headers["sow.action.sow_key"], headers["sow.action.reason"])] += 1
        status_of[headers["sow.action.sow_key"]] = json.loads(record.value())["status"]  # type: ignore[attr-defined]
    twice = {event: n for event, n in events.items() if n > 1}
    print(
        f"\n{records} records, {kills} SIGKILLs of the processor: {len(found)} action records "
        f"for {len(events)} events ({Counter(r for _, r in events)}), "
        f"in {time.monotonic() - began:.1f}s"
    )
    assert not twice, f"acted on more than once: {twice}"
    assert len(status_of) == records, f"{records - len(status_of)} records were not acted on"
    for sow_key, status in status_of.items():
        reasons = {reason for key, reason in events if key == sow_key}
        assert reasons in EXPECTED[status], (sow_key, status, reasons)


def test_each_event_is_acted_on_once_across_a_sigkill(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _run(bootstrap, tmp_path, unique, records=200, kills=1)


@pytest.mark.heavy
def test_each_event_is_acted_on_once_across_many_sigkills(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _run(bootstrap, tmp_path, unique, records=3000, kills=8)
