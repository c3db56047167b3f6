"""Actions under SIGKILL (issue 36): `sow serve` on the session's broker, its processor
child killed while records expire; `sow serve` restarts it. Every expiry is acted on
exactly once: the action's topic holds one record per expired record, none twice, none
missing (the record is produced in the transaction of the expiry, so a killed
transaction takes it with it).

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
  - {{name: ORDERS, key: /id, kafka_topic: {unique}.ORDERS, partitions: 2, expiration: 1s}}
  - {{name: EXPIRED, sow: false, kafka_topic: {unique}.EXPIRED, partitions: 1}}
actions:
  - on: {{module: sow-expire-message, topic: ORDERS}}
    do: {{module: publish-message, topic: EXPIRED}}
"""


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
                value = json.dumps({"id": i}).encode()
                producer.produce(f"{unique}.ORDERS", value, str(i).encode(), partition=i % 2)
            producer.flush(10)
            if wave < kills:
                time.sleep(randomly.uniform(0.8, 1.6))  # expiries are being made now
                os.kill(serve.processor(), signal.SIGKILL)
                time.sleep(0.2)
        found = read_topic(bootstrap, f"{unique}.EXPIRED", expect=records, timeout_s=120)
        time.sleep(1)  # anything more would show now
        found = read_topic(bootstrap, f"{unique}.EXPIRED", timeout_s=10)
    finally:
        serve.process.send_signal(signal.SIGTERM)
        serve.process.wait(30)
    counts = Counter(
        dict(r.headers())["sow.action.sow_key"]  # type: ignore[attr-defined]
        for r in found
    )
    twice = {key: n for key, n in counts.items() if n > 1}
    print(
        f"\n{records} records, {kills} SIGKILLs of the processor: {len(found)} action records, "
        f"{len(counts)} distinct, in {time.monotonic() - began:.1f}s"
    )
    assert not twice, f"acted on more than once: {twice}"
    assert len(counts) == records, f"{records - len(counts)} expiries were not acted on"


def test_each_expiry_is_acted_on_once_across_a_sigkill(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _run(bootstrap, tmp_path, unique, records=200, kills=1)


@pytest.mark.heavy
def test_each_expiry_is_acted_on_once_across_many_sigkills(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _run(bootstrap, tmp_path, unique, records=3000, kills=8)
