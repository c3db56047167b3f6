"""A faust-streaming app reads a SOW: its GlobalTable over the changelog equals a sow query.

The SOW runs on the session's broker; the Faust worker runs in a process of its own
(tests/integration/faust_sow_app.py) and writes its table to a file, which the test
compares with the sow query's records after publishes, updates and deletes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/id",), partitions=2)
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def faust_worker(bootstrap: str, topic: SowTopic, tmp_path: Path, unique: str) -> Iterator[Path]:
    """Run tests/integration/faust_sow_app.py as a worker; yield the file of its table."""
    with faust_process(bootstrap, topic, tmp_path, unique):
        yield tmp_path / "table.json"


@contextlib.contextmanager
def faust_process(
    bootstrap: str, topic: SowTopic, tmp_path: Path, unique: str
) -> Iterator[subprocess.Popen[bytes]]:
    """Run tests/integration/faust_sow_app.py as a worker (app id ``<unique>-faust``, its
    table written to ``tmp_path/table.json``, its log to ``tmp_path/faust.log``); yield
    the process, and stop it at the end if it still runs."""
    out = tmp_path / "table.json"
    log = tmp_path / "faust.log"
    env = {
        **os.environ,
        "SOW_FAUST_BOOTSTRAP": bootstrap,
        "SOW_FAUST_APP_ID": f"{unique}-faust",
        "SOW_FAUST_TOPIC": topic.kafka_topic,
        "SOW_FAUST_PARTITIONS": str(topic.partitions),
        "SOW_FAUST_OUT": str(out),
        "SOW_FAUST_DATADIR": str(tmp_path / "faust-data"),
    }
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.faust_sow_app"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            yield worker
        finally:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)


def sow_records(client: SowClient, at: list[Any]) -> dict[str, Any]:
    """SowKey -> record of a sow query that reflects every write up to ``at``."""
    records, _, _ = client.query("ORDERS", min_position=at)
    return {r.sow_key: orjson.loads(r.data) for r in records}


def table_when_equal(out: Path, expected: dict[str, Any], timeout_s: float = 40.0) -> Any:
    """The worker's table once it equals ``expected`` (or the last one seen, on timeout)."""
    deadline = time.monotonic() + timeout_s
    table = None
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            table = json.loads(out.read_text())
            if table == expected:
                break
        time.sleep(0.1)
    return table


def publish(client: SowClient, at: dict[int, Any], message: dict[str, Any]) -> str:
    reply = client.publish("ORDERS", json.dumps(message).encode())
    at[reply.position.partition] = reply.position
    return str(reply.sow_key)


def test_a_faust_global_table_equals_the_sow_after_publishes_updates_and_deletes(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    topic = topology.topic("ORDERS")
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (_, client):
        at: dict[int, Any] = {}
        keys = {
            i: publish(client, at, {"id": i, "qty": i, "desk": {"region": "EU"}, "tags": [i]})
            for i in range(12)
        }
        # Written before the worker starts: the table's first read of the changelog.
        first = sow_records(client, list(at.values()))
        assert len(first) == 12
        with faust_worker(bootstrap, topic, tmp_path, unique) as out:
            log = tmp_path / "faust.log"
            seen = table_when_equal(out, first, timeout_s=50.0)
            assert seen == first, log.read_text()[-3000:]

            # Read as they happen: updates, new records, deletes by key and by filter.
            for i in (1, 2, 3):
                publish(client, at, {"id": i, "qty": 100 + i, "desk": {"region": "US"}})
            publish(client, at, {"id": 20, "qty": 20, "note": "added while reading"})
            gone = [keys[4], keys[5]]
            assert client.delete("ORDERS", sow_keys=gone).records_deleted == 2
            assert client.delete("ORDERS", filter="/qty = 7").records_deleted == 1
            publish(client, at, {"id": 2, "qty": 202})  # an update after the deletes
            publish(client, at, {"id": 30, "qty": 30})  # a write to wait for after them
            expected = sow_records(client, list(at.values()))
            assert len(expected) == 12 - 3 + 2
            assert expected[keys[2]] == {"id": 2, "qty": 202}

            seen = table_when_equal(out, expected)
            assert seen == expected, log.read_text()[-3000:]
            assert {keys[4], keys[5], keys[7]} & set(seen) == set()
