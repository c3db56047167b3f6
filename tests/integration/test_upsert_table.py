"""Upsert-table views of SOW topics (issue 37 part 2, docs/upsert-tables.md): a random
stream of publishes, updates, deletes by key and by filter, and expirations; then the
upsert topic, read as a table, equals the SOW (a sow query), and holds each record's
changes once, in the SOW's order (read_committed: no record twice, no lost tombstone).

Read by a plain consumer (its reduction: the last value per key, tombstones remove), on
both backends; by a Kafka Streams KTable (tests/integration/kstreams_ktable, built from
Maven); and across a SIGKILL of `sow serve`'s processor mid-stream. The 10,000-operation
runs are heavy: ``python -m pytest -m heavy -s tests/integration/test_upsert_table.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from processor.client.sow_client import SowClient
from processor.topology.yaml_loader import parse_yaml
from tests.conftest import MEMORY
from tests.integration.harness import MEMORY_LOGS, difference, running_sow, waited_for
from tests.integration.serve_helpers import Serve
from tests.integration.upsert_helpers import (
    Model,
    histories,
    kafka_records,
    ktable,
    memory_records,
    operations,
    reduced,
    run,
    sow_state,
)


def _topology_text(unique: str, partitions: int, key: str) -> str:
    return f"""
topics:
  - name: ORDERS
    key: /id
    kafka_topic: {unique}.ORDERS
    partitions: {partitions}
    expiration: 0s
    upsert: {{key: {key}}}
"""


def _settled(
    read: Callable[[], dict[bytes, bytes]], expected: dict[bytes, bytes], within_s: float = 60
) -> dict[bytes, bytes]:
    """``read()``'s table once it equals ``expected`` (expiries are still being made at
    first), or the last one read when it never does (the caller's assert shows how)."""
    deadline = time.monotonic() + within_s
    while True:
        got = read()
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def _by_id(model: Model) -> dict[bytes, bytes]:
    return {ident.encode(): value for ident, value in model.state.items()}


def test_a_plain_consumer_of_the_upsert_topic_reads_the_sow(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = parse_yaml(_topology_text(unique, 2, "sow_key"), "test.yaml")
    upsert = f"{unique}.ORDERS.sow-upsert"
    model = Model()
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        run(client, "ORDERS", operations(37, 600, keys=120), model)
        expected = {model.sow_keys[i].encode(): v for i, v in model.state.items()}

        def records() -> list[tuple[bytes, bytes | None]]:
            if backend == MEMORY:
                return memory_records(MEMORY_LOGS[unique], upsert, 2)
            return kafka_records(backend, upsert, 2)

        table = _settled(lambda: reduced(records()), expected)
        assert table == expected, difference(table, expected)
        sow = {model.sow_keys[i].encode(): v for i, v in sow_state(client, "ORDERS").items()}
        assert sow == expected, difference(sow, expected)
        by_key = {model.sow_keys[i].encode(): h for i, h in model.history.items()}
        assert histories(records()) == by_key
    assert all(model.counts.get(kind) for kind in ("filter", "expiring", "delete")), model.counts


def _ktable_run(bootstrap: str, tmp_path: Path, unique: str, count: int) -> None:
    topology = parse_yaml(_topology_text(unique, 3, "fields"), "test.yaml")
    upsert = f"{unique}.ORDERS.sow-upsert"
    model = Model()
    began = time.monotonic()
    with running_sow(bootstrap, topology, tmp_path / "sow", unique) as (_, client):
        run(client, "ORDERS", operations(2037, count, keys=count // 5), model)
        sent = time.monotonic() - began
        expected = _by_id(model)
        plain = _settled(lambda: reduced(kafka_records(bootstrap, upsert, 3)), expected)
        sow = {i.encode(): v for i, v in sow_state(client, "ORDERS").items()}
    table = ktable(bootstrap, upsert, f"{unique}-ktable", tmp_path / "kstreams")
    print(
        f"\n{count} operations {model.counts} in {sent:.1f}s; SOW {len(sow)} records, "
        f"KTable {len(table)}, in {time.monotonic() - began:.1f}s"
    )
    assert plain == expected, difference(plain, expected)
    assert sow == expected, difference(sow, expected)
    assert table == expected, difference(table, expected)
    assert histories(kafka_records(bootstrap, upsert, 3)) == {
        i.encode(): h for i, h in model.history.items()
    }


@pytest.mark.heavy  # CI's SIGKILL test below builds the same KTable, after a kill
def test_a_kafka_streams_ktable_of_the_upsert_topic_equals_the_sow_10000(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _ktable_run(bootstrap, tmp_path, unique, 10_000)


def _sigkill_run(bootstrap: str, tmp_path: Path, unique: str, count: int, kills: int) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "topology.yaml").write_text(_topology_text(unique, 3, "fields"))
    upsert = f"{unique}.ORDERS.sow-upsert"
    serve = Serve(workdir, bootstrap, unique, env={"SOW_PROCESSOR_RESTARTS": str(kills + 5)})
    model = Model()
    killed: list[float] = []
    began = time.monotonic()
    try:
        serve.until_ready()
        done = threading.Event()
        rng = random.Random(count)

        def killer() -> None:
            # Each kill once a random share of its stretch of the stream has been sent
            # (by operations, not by time: a fast machine must not finish first).
            for stretch in range(kills):
                due = count * (stretch + rng.uniform(0.2, 0.8)) / kills
                while sum(model.counts.values()) < due:
                    if done.wait(0.01):
                        return
                os.kill(serve.processor(), signal.SIGKILL)
                killed.append(time.monotonic() - began)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        client = SowClient(serve.address)
        try:
            run(client, "ORDERS", operations(3037, count, keys=count // 5), model)
            done.set()
            thread.join()
            expected = _by_id(model)
            plain = _settled(lambda: reduced(kafka_records(bootstrap, upsert, 3)), expected, 120)
            sow = {i.encode(): v for i, v in sow_state(client, "ORDERS").items()}
        finally:
            client.close()
    finally:
        serve.process.send_signal(signal.SIGTERM)
        serve.process.wait(60)
    records = kafka_records(bootstrap, upsert, 3)
    table = ktable(bootstrap, upsert, f"{unique}-ktable", tmp_path / "kstreams")
    print(
        f"\n{count} operations {model.counts}, SIGKILLs at {[round(k, 1) for k in killed]}s: "
        f"{len(records)} upsert records, SOW {len(sow)}, KTable {len(table)}, "
        f"in {time.monotonic() - began:.1f}s"
    )
    assert killed, "the processor was not killed mid-stream: make the stream longer"
    assert plain == expected, difference(plain, expected)
    assert sow == expected, difference(sow, expected)
    assert table == expected, difference(table, expected)
    got, want = histories(records), {i.encode(): h for i, h in model.history.items()}
    wrong = [k for k in want.keys() | got.keys() if got.get(k) != want.get(k)]
    assert not wrong, [(k, got.get(k), want.get(k)) for k in wrong[:3]]


def test_the_upsert_topic_is_exact_across_a_processor_sigkill(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _sigkill_run(bootstrap, tmp_path, unique, 1200, kills=1)


@pytest.mark.heavy
def test_the_upsert_topic_is_exact_across_processor_sigkills_10000(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    _sigkill_run(bootstrap, tmp_path, unique, 10_000, kills=3)


def test_the_upsert_key_of_several_key_fields_is_a_json_array(tmp_path: Path, unique: str) -> None:
    topology = parse_yaml(
        """
topics:
  - {name: T, key: [/a, /b], upsert: {topic: t-table, key: fields}}
""",
        "test.yaml",
    )
    with running_sow(MEMORY, topology, tmp_path, unique) as (_, client):
        client.publish("T", b'{"a": "x", "b": 2, "v": 1}', ack="processed")
        client.delete("T", filter="/b = 2")
        records = memory_records(MEMORY_LOGS[unique], "t-table", 1)
    assert records == [(b'["x","2"]', b'{"a": "x", "b": 2, "v": 1}'), (b'["x","2"]', None)]
    assert json.loads(records[0][0]) == ["x", "2"]


def test_a_pattern_topics_upsert_topic_keeps_its_topics_apart(tmp_path: Path, unique: str) -> None:
    topology = parse_yaml(
        """
topics:
  - {name: ORDERS, pattern: "^orders\\\\.", key: /id, partitions: 2, upsert: true}
""",
        "test.yaml",
    )
    with running_sow(MEMORY, topology, tmp_path, unique) as (_, client):
        us = client.publish("orders.us", b'{"id":1,"v":"us"}', ack="processed")
        eu = client.publish("orders.eu", b'{"id":1,"v":"eu"}', ack="processed")
        client.delete("orders.us", [us.sow_key])
        records = memory_records(MEMORY_LOGS[unique], "ORDERS.sow-upsert", 2)
    assert us.sow_key != eu.sow_key
    assert reduced(records) == {eu.sow_key.encode(): b'{"id":1,"v":"eu"}'}
    assert histories(records)[us.sow_key.encode()] == [b'{"id":1,"v":"us"}', None]


def test_a_views_upsert_topic_is_the_view(tmp_path: Path, unique: str) -> None:
    topology = parse_yaml(
        """
topics:
  - {name: ORDERS, key: /id, partitions: 2}
views:
  - name: BY_REGION
    message_type: json
    underlying: ORDERS
    projection: ["/region AS /region", "SUM(/qty) AS /qty"]
    grouping: [/region]
    upsert: true
""",
        "test.yaml",
    )
    with running_sow(MEMORY, topology, tmp_path, unique) as (_, client):
        for ident, region, qty in [(1, "eu", 5), (2, "eu", 7), (3, "us", 1), (1, "eu", 6)]:
            body = json.dumps({"id": ident, "region": region, "qty": qty}).encode()
            client.publish("ORDERS", body, ack="processed")
        client.delete("ORDERS", filter="/region = 'us'")

        def view() -> dict[bytes, bytes]:
            records, _, _ = client.query("BY_REGION")
            return {r.sow_key.encode(): bytes(r.data) for r in records}

        def table() -> dict[bytes, bytes]:
            return reduced(memory_records(MEMORY_LOGS[unique], "BY_REGION.sow-upsert", 2))

        eu = [{"region": "eu", "qty": 13}]
        waited_for(lambda: [json.loads(v) for v in view().values()] == eu, 10, "the view")
        expected = view()
        got = _settled(table, expected, within_s=10)
    assert got == expected, difference(got, expected)
    history = histories(memory_records(MEMORY_LOGS[unique], "BY_REGION.sow-upsert", 2))
    assert [None] in [h[-1:] for h in history.values()]  # the us group's tombstone
