"""SOW Preprocessing and Enrichment through gRPC, on both backends (seed 002, spec 1.16):
preprocessing builds a Key field before the SowKey, enrichment adds fields with
``OF PREVIOUS`` and ``SOW_KEY()``, deltas are enriched before they merge, and a field that
fails on a message dead-letters that message alone. On Kafka, a foreign producer's record
re-keyed through the repartition topic is reshaped once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from tests.conftest import MEMORY
from tests.integration.harness import namespaced, running_sow

REPS = SowTopic(
    "REPS",
    keys=("/employeeId", "/id"),
    enrichment=(
        'CONCAT(/firstName, " ", /lastName) AS /fullName',
        "COALESCE(/hired OF PREVIOUS, /hired OF CURRENT) AS /hired",
        "COALESCE(/versions OF PREVIOUS, 0) + 1 AS /versions",
        "SOW_KEY() AS /key",
    ),
)
PRICES = SowTopic(
    "PRICES",
    message_type="nvfix",
    keys=("/id",),
    preprocessing=(
        "UPPER(/sym) AS /sym HINT SET_CURRENT",
        "CONCAT(UPPER(/venue), ':', /sym) AS /id",
    ),
    enrichment=("/px * /qty AS /notional",),
)


def _query(client: SowClient, topic: str, at: Any, **query: Any) -> list[Any]:
    records, _, _ = client.query(topic, min_position=[at.position], **query)
    return sorted((r.data for r in records), key=str)


def test_preprocessing_and_enrichment_reshape_every_publish(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, REPS, PRICES)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        first = client.publish(
            "REPS", b'{"employeeId":7,"id":1,"firstName":"Ada","lastName":"Lovelace","hired":1843}'
        )
        again = client.publish(
            "REPS", b'{"employeeId":7,"id":1,"firstName":"Ada","lastName":"King","hired":1999}'
        )
        [record] = _query(client, "REPS", again)
        assert orjson.loads(record) == {
            "employeeId": 7,
            "id": 1,
            "firstName": "Ada",
            "lastName": "King",
            "hired": 1843,  # OF PREVIOUS: the first version's value is kept
            "fullName": "Ada King",
            "versions": 2,
            "key": first.sow_key,
        }
        # A delta is enriched (against the stored record) before it merges.
        merged = client.publish(
            "REPS", b'{"employeeId":7,"id":1,"lastName":"Byron"}', delta=True, ack="processed"
        )
        [record] = _query(client, "REPS", merged)
        fields = orjson.loads(record)
        assert fields["lastName"] == "Byron"
        assert fields["versions"] == 3
        assert fields["hired"] == 1843
        # The delta has no /firstName: its CONCAT gives " Byron", as AMPS computes it.
        assert fields["fullName"] == " Byron"

        # Preprocessing builds the Key field: two spellings of one instrument are one record.
        client.publish("PRICES", b"venue=xnys\x01sym=ibm\x01px=10\x01qty=3\x01")
        last = client.publish("PRICES", b"venue=XNYS\x01sym=IBM\x01px=11\x01qty=3\x01")
        assert _query(client, "PRICES", last, filter="/id = 'XNYS:IBM'") == [
            b"venue=XNYS\x01sym=IBM\x01px=11\x01qty=3\x01id=XNYS:IBM\x01notional=33\x01"
        ]
        assert last.sow_key == _query_key(client, "PRICES", last)
        assert app.processor is not None
        assert app.processor.dead_lettered == 0


def _query_key(client: SowClient, topic: str, at: Any) -> str:
    records, _, _ = client.query(topic, min_position=[at.position])
    [record] = records
    return str(record.sow_key)


def test_a_field_that_fails_dead_letters_its_message_and_later_ones_apply(
    backend: str, tmp_path: Path, unique: str
) -> None:
    broken = SowTopic("NAMES", keys=("/id",), enrichment=("UPPER(/first) AS /name/first",))
    with running_sow(backend, namespaced(unique, broken), tmp_path, unique) as (app, client):
        client.publish("NAMES", b'{"id":1,"first":"ada","name":"a string"}', ack="processed")
        later = client.publish("NAMES", b'{"id":2,"first":"alan"}', ack="processed")
        records = _query(client, "NAMES", later)
        assert [orjson.loads(r) for r in records] == [
            {"id": 2, "first": "alan", "name": {"first": "ALAN"}}
        ]
        assert app.processor is not None
        assert app.processor.dead_lettered == 1


def test_a_foreign_record_rekeyed_through_the_repartition_topic_is_reshaped_once(
    backend: str, tmp_path: Path, unique: str
) -> None:
    if backend == MEMORY:
        return  # a foreign producer writes to Kafka itself; the memory log has no producer
    counter = SowTopic(
        "COUNTER",
        keys=("/id",),
        partitions=3,
        preprocessing=("/n + 1 AS /n",),
        enrichment=("COALESCE(/seen OF PREVIOUS, 0) + 1 AS /seen",),
    )
    topology = namespaced(unique, counter)
    topic = topology.topic("COUNTER")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        producer = Producer({"bootstrap.servers": backend, "log_level": 3})
        for n in range(5):  # no Kafka key: each is re-keyed, in order, to its SowKey's partition
            producer.produce(topic.kafka_topic, orjson.dumps({"id": "a", "n": n}), partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while True:
            records, _, _ = client.query("COUNTER")
            if records and orjson.loads(records[0].data)["seen"] == 5:
                break
            assert time.monotonic() < deadline, [r.data for r in records]
            time.sleep(0.1)
        assert orjson.loads(records[0].data) == {"id": "a", "n": 5, "seen": 5}


def test_the_direct_publisher_path_is_reshaped_too(
    backend: str, tmp_path: Path, unique: str
) -> None:
    if backend == MEMORY:
        return  # the direct publisher writes to Kafka itself
    from processor.client.direct import DirectPublisher

    topology = namespaced(unique, PRICES)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        publisher = DirectPublisher(backend, topology, server=app.grpc_address)
        try:
            done = publisher.publish(
                "PRICES", b"venue=xlon\x01sym=vod\x01px=2\x01qty=5\x01", ack="processed"
            )
        finally:
            publisher.close()
        topic, partition, offset = done.position
        records, _, _ = client.query(
            "PRICES", min_position=[{"topic": topic, "partition": partition, "offset": offset}]
        )
        assert [r.data for r in records] == [
            b"venue=xlon\x01sym=VOD\x01px=2\x01qty=5\x01id=XLON:VOD\x01notional=10\x01"
        ]
