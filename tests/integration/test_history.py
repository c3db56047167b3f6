"""Issue 10 item 8: historical SOW queries on a topic with History.

Real broker, processor and gRPC. The oracle is a dict model built from the changelog
records themselves (each change and the time it was written): a historical query at
time T must equal the model's state at T, for 20 random T, before and after the query
service restarts from its replica snapshot (history is then read back from the
changelogs). A historical sow_and_subscribe returns the state at T, replays from
there, then goes live.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor import changelog as codec
from processor.changelog import CONTROL_PREFIX
from processor.client.sow_client import SowClient
from processor.topology.model import History, SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, read_topic, running_sow
from tests.integration.subscription_helpers import Collector

HQUOTES = SowTopic("HQUOTES", keys=("/id",), partitions=2, history=History(3600, 0))


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def publish_rounds(client: SowClient, rng: random.Random, rounds: int, each: int) -> None:
    last = None
    for _ in range(rounds):
        for _ in range(each):
            key = rng.randint(0, 25)
            if rng.random() < 0.2:
                client.delete("HQUOTES", [orjson.dumps(key).decode()], timeout=30)
            else:
                message = {"id": key, "price": rng.randint(0, 100)}
                last = client.publish("HQUOTES", orjson.dumps(message))
        time.sleep(0.05)
    if last is not None:
        client.query("HQUOTES", min_position=[last.position], timeout=30)


def timeline(bootstrap: str, topology: Topology) -> list[tuple[int, str, bytes | None]]:
    """(time, SowKey, message or None) of every change, in time order (offset order
    within a partition, which is all the model needs: a key lives in one partition)."""
    name = topology.topic("HQUOTES").changelog_topic
    records: Any = read_topic(bootstrap, name, 2, timeout_s=120)
    changes = [
        (r.timestamp()[1], r.partition(), r.offset(), r.key().decode(), r.value())
        for r in records
        if not r.key().startswith(CONTROL_PREFIX)
    ]
    changes.sort(key=lambda c: (c[0], c[1], c[2]))
    return [(t, k, None if v is None else codec.data_of(v)) for t, _, _, k, v in changes]


def model_at(changes: list[tuple[int, str, bytes | None]], moment: int) -> dict[str, bytes]:
    state: dict[str, bytes] = {}
    for at, key, data in changes:
        if at > moment:
            break
        if data is None:
            state.pop(key, None)
        else:
            state[key] = data
    return state


def historical(client: SowClient, moment: int, **fields: Any) -> dict[str, bytes]:
    records, _, _ = client.query("HQUOTES", bookmark=_stamp(moment), batch_size=10000, **fields)
    return {r.sow_key: r.data for r in records}


@pytest.fixture
def topology(unique: str) -> Topology:
    return namespaced(unique, HQUOTES)


def test_historical_query_equals_the_model_at_20_random_times(
    bootstrap: str, tmp_path: Path, unique: str, topology: Topology
) -> None:
    rng = random.Random(11)
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        publish_rounds(client, rng, rounds=8, each=25)
        changes = timeline(bootstrap, topology)
        first, last = changes[0][0], changes[-1][0]
        moments = [rng.randint(first - 20, last + 20) for _ in range(20)]
        for moment in moments:
            assert historical(client, moment) == model_at(changes, moment), moment
        # The same from the command line (sow query --bookmark).
        moment = moments[1]
        command = ["query", "HQUOTES", "--bookmark", _stamp(moment), "--server", app.grpc_address]
        printed = subprocess.run(
            [sys.executable, "-m", "processor.cli", *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        rows = [orjson.loads(line) for line in printed if '"sow_key"' in line]
        assert {r["sow_key"]: orjson.dumps(r["data"]) for r in rows} == {
            k: orjson.dumps(orjson.loads(v)) for k, v in model_at(changes, moment).items()
        }
        # Filter and top_n apply to the historical state.
        moment = moments[0]
        cheap = {
            k: v for k, v in model_at(changes, moment).items() if orjson.loads(v)["price"] < 40
        }
        assert historical(client, moment, filter="/price < 40") == cheap
        # Before the Window: empty.
        assert historical(client, first - 7200_000) == {}
    # Restarted from its snapshot, the service reads the history back from the changelog.
    assert (tmp_path / "replica").exists()
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        client.query("HQUOTES", wait_for_catch_up=True, timeout=60)
        for moment in moments:
            assert historical(client, moment) == model_at(changes, moment), moment


def test_historical_sow_and_subscribe_returns_then_replays_then_goes_live(
    bootstrap: str, tmp_path: Path, unique: str, topology: Topology
) -> None:
    rng = random.Random(12)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        publish_rounds(client, rng, rounds=6, each=25)
        changes = timeline(bootstrap, topology)
        moment = changes[len(changes) // 2][0]
        collector = Collector(
            client.sow_and_subscribe("HQUOTES", bookmark=_stamp(moment), batch_size=1000)
        )
        assert collector.wait_for(
            lambda c: any(m.WhichOneof("part") == "completed" for m in c.messages), 60
        )
        state = {r.sow_key: r.data for r in collector.query_records()}
        assert state == model_at(changes, moment)
        publish_rounds(client, rng, rounds=2, each=25)
        records, _, _ = client.query("HQUOTES", batch_size=10000)
        current = {r.sow_key: r.data for r in records}
        assert collector.wait_for(lambda c: _rebuilt(c) == current, 30), "live after replay"
        positions = [
            (c.changelog_position.partition, c.changelog_position.offset)
            for c in collector.changes()
        ]
        assert len(positions) == len(set(positions)), "a change delivered twice"
        collector.stop()


def _rebuilt(collector: Collector) -> dict[str, bytes]:
    state = {r.sow_key: r.data for r in collector.query_records()}
    for change in collector.changes():
        if change.kind == sow_pb2.CHANGE_PUBLISH:
            state[change.sow_key] = change.record.data
        else:
            state.pop(change.sow_key, None)
    return state
