"""The AMPS configuration examples of seeds 002 and 000, loaded from their XML text
unchanged (tests/data/seeds/, copied verbatim and wrapped in <AMPSConfig> where the seed
shows only the <SOW> section), behave as the seeds describe, through gRPC on both
backends: orders in nvfix, customers with three hash indexes, catalog with History,
sales-reps in bflat with its Enrichment; ORDERS (json) and ALERTS (xml); fix topics with
a topic Expiration and with per-message expiration only. The custom KeyGenerator example
names a native library, which kafka-sow refuses with a clear error."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from processor.errors import TopologyError
from processor.log.memory.broker import MemoryLog
from processor.messages import codec_for
from processor.topology.amps_xml import load_amps_config
from tests.conftest import MEMORY
from tests.integration.harness import MEMORY_LOGS, namespaced, running_sow

SEEDS = Path(__file__).resolve().parent.parent / "data" / "seeds"


def _load(name: str, unique: str) -> tuple[object, dict[str, object]]:
    topology = load_amps_config(SEEDS / name)
    return namespaced(unique, *topology.topics.values()), dict(topology.topics)


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def test_seed_002_sow_example(backend: str, tmp_path: Path, unique: str) -> None:
    topology, topics = _load("seed002_sow_example.xml", unique)
    assert list(topics) == ["orders", "customers", "catalog", "sales-reps"]
    clock = [time.time()]
    MEMORY_LOGS[unique] = MemoryLog(clock=lambda: clock[0])
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        # orders: nvfix, keyed by /orderId.
        client.publish("orders", b"orderId=1\x01sym=IBM\x01qty=10\x01")
        last = client.publish("orders", b"orderId=1\x01sym=IBM\x01qty=25\x01")
        records, _, _ = client.query("orders", filter="/qty > 20", min_position=[last.position])
        assert [r.data for r in records] == [b"orderId=1\x01sym=IBM\x01qty=25\x01"]

        # customers: json with three hash indexes; an exact match uses one.
        for n, (name, company) in enumerate((("Ann", "ACME"), ("Bob", "ACME"), ("Ann", "Init"))):
            last = client.publish(
                "customers",
                orjson.dumps({"customerId": n, "customerName": name, "company": company}),
            )
        for text, ids, plan in (
            ("/customerName = 'Ann'", [0, 2], "hash"),
            ("/company = 'ACME'", [0, 1], "hash"),
            ("/customerName = 'Ann' AND /company = 'ACME'", [0], "hash"),
        ):
            records, _, end = client.query("customers", filter=text, min_position=[last.position])
            assert sorted(orjson.loads(r.data)["customerId"] for r in records) == ids
            assert plan in end.plan, (text, end.plan)

        # catalog: History (7d window, 15m granularity): the SOW as of a past time keeps
        # a record deleted since. One version is saved per record per 15 minutes, so on
        # the memory log (whose clock stamps the records) 20 minutes pass between the
        # publishes and the delete; on Kafka, where they cannot, the check is the edges.
        client.publish("catalog", b'{"sku":"A1","price":10}')
        last = client.publish("catalog", b'{"sku":"A2","price":12}', ack="processed")
        published_ms = int(clock[0] * 1000)
        clock[0] += 20 * 60
        deleted = client.delete("catalog", filter="/sku = 'A2'")
        now, _, _ = client.query("catalog", min_position=[*deleted.positions, last.position])
        assert [orjson.loads(r.data)["sku"] for r in now] == ["A1"]
        before_all, _, _ = client.query("catalog", bookmark="0")
        assert list(before_all) == []
        if backend == MEMORY:
            past, _, _ = client.query("catalog", bookmark=_stamp(published_ms + 60_000))
            assert sorted(orjson.loads(r.data)["sku"] for r in past) == ["A1", "A2"]

        # sales-reps: bflat, keyed by /employeeId and /id, enriched with /fullName.
        bflat = codec_for(topics["sales-reps"])  # type: ignore[arg-type]
        rep = {"employeeId": 7, "id": 70, "firstName": "Ada", "lastName": "Lovelace"}
        last = client.publish("sales-reps", bflat.encode_json(rep), ack="processed")
        records, _, _ = client.query(
            "sales-reps", filter="/fullName = 'Ada Lovelace'", min_position=[last.position]
        )
        assert [bflat.decode(r.data) for r in records] == [rep | {"fullName": "Ada Lovelace"}]


def test_seed_000_examples(backend: str, tmp_path: Path, unique: str) -> None:
    topology, topics = _load("seed000_example_7_3.xml", unique)
    assert list(topics) == ["ORDERS", "ALERTS"]
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        # ORDERS: one record per (invoice, customerId); a hash index on /region.
        client.publish("ORDERS", b'{"invoice":1,"customerId":"c1","region":"EU","amt":5}')
        client.publish("ORDERS", b'{"invoice":1,"customerId":"c2","region":"US","amt":6}')
        last = client.publish("ORDERS", b'{"invoice":1,"customerId":"c1","region":"EU","amt":7}')
        records, _, end = client.query("ORDERS", filter="/region = 'EU'", min_position=[
            last.position
        ])  # fmt: skip
        assert [orjson.loads(r.data)["amt"] for r in records] == [7]
        assert "hash" in end.plan
        # ALERTS: xml keyed by /alert/id, an Index on /alert/type.
        client.publish("ALERTS", b"<alert><id>1</id><type>disk</type></alert>")
        last = client.publish("ALERTS", b"<alert><id>2</id><type>cpu</type></alert>")
        records, _, _ = client.query(
            "ALERTS", filter="/alert/type = 'cpu'", min_position=[last.position]
        )
        assert [r.data for r in records] == [b"<alert><id>2</id><type>cpu</type></alert>"]


def test_seed_000_expiration_examples(backend: str, tmp_path: Path, unique: str) -> None:
    timed, timed_topics = _load("seed000_example_7_1.xml", unique)
    enabled = load_amps_config(SEEDS / "seed000_example_7_2.xml").topic("ORDERS")
    assert timed_topics["ORDERS"].expiration_s == 30  # type: ignore[attr-defined]
    assert enabled.expiration_s == 0  # only messages that carry an expiration expire
    assert enabled.keys == ("/55", "/109")
    with running_sow(backend, timed, tmp_path, unique) as (_, client):
        client.publish("ORDERS", b"35=D\x0155=IBM\x01109=ACC1\x0138=100\x01", expiration=0.2)
        last = client.publish("ORDERS", b"35=D\x0155=MSFT\x01109=ACC1\x0138=5\x01")
        deadline = time.monotonic() + 20
        while True:  # the message's own 0.2 s lifetime overrides the topic's 30 s
            records, _, _ = client.query("ORDERS", min_position=[last.position])
            if len(records) == 1:
                break
            assert time.monotonic() < deadline, [r.data for r in records]
            time.sleep(0.1)
        assert records[0].data == b"35=D\x0155=MSFT\x01109=ACC1\x0138=5\x01"


def test_seed_000_custom_key_generator_is_refused_clearly() -> None:
    with pytest.raises(TopologyError) as error:
        load_amps_config(SEEDS / "seed000_key_generator.xml")
    text = str(error.value)
    assert "AMPSConfig/Modules/Module" in text
    assert "libmy_key_generator.so" in text
