"""The foundation's behaviour through gRPC against the real broker and RocksDB."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import orjson
import pytest

from processor.client.sow_client import ServiceError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, read_topic, running_sow

#: Also run on the fallback Tansu broker in CI (pyproject.toml's smoke marker).
pytestmark = pytest.mark.smoke

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)


def _data(record: object) -> dict[str, object]:
    return orjson.loads(record.data)  # type: ignore[attr-defined]


def test_seed_example_update_replaces_the_record(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        first = client.publish("ORDERS", b'{"orderId":1,"symbol":"MSFT","price":50}')
        second = client.publish("ORDERS", b'{"orderId":2,"symbol":"IBM","price":120}')
        update = client.publish("ORDERS", b'{"orderId":2,"symbol":"IBM","price":95}')
        assert update.sow_key == second.sow_key != first.sow_key
        records, begin, end = client.query(  # a position covers its partition: wait for both
            "ORDERS", min_position=[first.position, update.position], query_id="q1", batch_size=1
        )
        assert begin.query_id == end.query_id == "q1"
        by_key = {r.sow_key: _data(r) for r in records}
        assert len(records) == 2
        assert end.records_returned == 2
        assert by_key[second.sow_key] == {"orderId": 2, "symbol": "IBM", "price": 95}
        assert by_key[first.sow_key]["price"] == 50
        only, _, _ = client.query("ORDERS", sow_keys=[second.sow_key])
        assert [r.sow_key for r in only] == [second.sow_key]


def test_composite_keys_and_key_domains(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(
        unique,
        SowTopic("INVOICES", keys=("/invoice", "/customerId")),
        SowTopic("ShippingStatus", keys=("/orderId",), key_domain="orders"),
        SowTopic("OpenOrders", keys=("/orderId",), key_domain="orders"),
        SowTopic("Other", keys=("/orderId",)),
    )
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        keys = {
            (inv, cust): client.publish(
                "INVOICES", json.dumps({"invoice": inv, "customerId": cust}).encode()
            )
            for inv, cust in [(1, "a"), (1, "b"), (2, "a"), (1, "a")]
        }
        assert len({p.sow_key for p in keys.values()}) == 3
        records, _, _ = client.query("INVOICES", min_position=[p.position for p in keys.values()])
        assert len(records) == 3
        shipping = client.publish("ShippingStatus", b'{"orderId": 7, "status": "sent"}')
        open_order = client.publish("OpenOrders", b'{"orderId": 7, "qty": 3}')
        other = client.publish("Other", b'{"orderId": 7}')
        assert shipping.sow_key == open_order.sow_key
        assert other.sow_key != shipping.sow_key


def test_delete_by_sow_keys_counts_what_existed(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        a = client.publish("ORDERS", b'{"orderId": 1}')
        b = client.publish("ORDERS", b'{"orderId": 2}')
        reply = client.delete("ORDERS", [a.sow_key, "1234567"])
        assert reply.records_deleted == 1
        records, _, _ = client.query("ORDERS", min_position=[b.position])
        assert [r.sow_key for r in records] == [b.sow_key]


def test_bad_requests_get_clear_errors(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS, SowTopic("BLOBS", message_type="binary"))
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        with pytest.raises(ServiceError) as unknown:
            client.query("NOPE")
        assert unknown.value.code == "NOT_FOUND"
        assert "ORDERS" in unknown.value.details
        with pytest.raises(ServiceError) as too_big:
            client.query("ORDERS", batch_size=10001)
        assert too_big.value.code == "INVALID_ARGUMENT"
        assert "10000" in too_big.value.details
        with pytest.raises(ServiceError) as malformed:
            client.publish("ORDERS", b'{"orderId": ')
        assert malformed.value.code == "INVALID_ARGUMENT"
        assert "JSON" in malformed.value.details
        with pytest.raises(ServiceError) as missing:
            client.publish("ORDERS", b'{"symbol": "IBM"}')
        assert "/orderId" in missing.value.details
        with pytest.raises(ServiceError) as no_key:
            client.publish("BLOBS", b"\x00\x01")
        assert "SowKey" in no_key.value.details
        with pytest.raises(ServiceError) as bad_key:
            client.publish("BLOBS", b"\x00\x01", sow_key="not base64!")
        assert "Base64" in bad_key.value.details
        blob = client.publish("BLOBS", b"\x00\x01", sow_key="YmxvYg==")
        records, _, _ = client.query("BLOBS", min_position=[blob.position])
        assert [(r.sow_key, r.data) for r in records] == [("YmxvYg==", b"\x00\x01")]


def test_bad_records_go_to_the_dead_letter_topic(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Foreign producers write straight to Kafka: bad records are dead-lettered, the rest
    (including records keyed by something other than the SowKey) are applied."""
    from confluent_kafka import Producer

    schema = {
        "type": "record",
        "name": "Quote",
        "fields": [{"name": "symbol", "type": "string"}, {"name": "bid", "type": "double"}],
    }
    schema_path = tmp_path / "quote.avsc"
    schema_path.write_text(json.dumps(schema))
    topology = namespaced(
        unique,
        ORDERS,
        SowTopic("QUOTES", message_type="avro", keys=("/symbol",), schema=str(schema_path)),
    )
    orders = topology.topic("ORDERS").kafka_topic
    quotes = topology.topic("QUOTES").kafka_topic
    good = io.BytesIO()
    fastavro.schemaless_writer(good, fastavro.parse_schema(schema), {"symbol": "IBM", "bid": 1.5})
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(orders, b'{"orderId": 1, "price": 10', b"k1")  # malformed JSON
        producer.produce(orders, b'{"price": 10}', b"k2")  # no key field
        producer.produce(quotes, b"\x02\xff\xff\xff", b"k3")  # not a Quote
        producer.produce(orders, b'{"orderId": 5, "price": 11}', b"foreign-key")
        producer.produce(quotes, good.getvalue(), b"IBM")
        producer.flush(10)
        dead = read_topic(bootstrap, f"{unique}.dead-letter", expect=3)
        reasons = sorted(dict(m.headers())["sow.error.reason"].decode() for m in dead)
        assert reasons == ["missing-key-field", "undecodable", "undecodable"]
        for message in dead:
            headers = dict(message.headers())
            assert headers["sow.error.message"]
            assert headers["sow.source.topic"]
        follow = client.publish("ORDERS", b'{"orderId": 6}')
        records, _, _ = client.query("ORDERS", min_position=[follow.position])
        assert sorted(_data(r)["orderId"] for r in records) == [5, 6]
        quote = client.publish("QUOTES", good.getvalue())
        records, _, _ = client.query("QUOTES", min_position=[quote.position])
        assert len(records) == 1
        assert app.processor is not None
        assert app.processor.dead_lettered == 3


def test_text_form_publishes_and_reads_avro_and_binary(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """The CLI's path: JSON text in, encoded with the topic's Avro schema; JSON text out."""
    schema = {
        "type": "record",
        "name": "Quote",
        "fields": [{"name": "symbol", "type": "string"}, {"name": "bid", "type": "double"}],
    }
    schema_path = tmp_path / "quote.avsc"
    schema_path.write_text(json.dumps(schema))
    topology = namespaced(
        unique,
        SowTopic("QUOTES", message_type="avro", keys=("/symbol",), schema=str(schema_path)),
        SowTopic("BLOBS", message_type="binary"),
    )
    with running_sow(backend, topology, tmp_path / "state", unique) as (_, client):
        quote = client.publish("QUOTES", b'{"symbol": "IBM", "bid": 1.5}', text_form=True)
        records, _, _ = client.query("QUOTES", min_position=[quote.position], text_form=True)
        assert [orjson.loads(r.data) for r in records] == [{"symbol": "IBM", "bid": 1.5}]
        raw, _, _ = client.query("QUOTES")
        decoded = fastavro.schemaless_reader(
            io.BytesIO(raw[0].data), fastavro.parse_schema(schema), None
        )
        assert decoded == {"symbol": "IBM", "bid": 1.5}
        with pytest.raises(ServiceError) as wrong:
            client.publish("QUOTES", b'{"symbol": "IBM"}', text_form=True)
        assert wrong.value.code == "INVALID_ARGUMENT"
        assert "schema" in wrong.value.details
        blob = client.publish("BLOBS", b"AAEC", sow_key="b1", text_form=True)
        records, _, _ = client.query("BLOBS", min_position=[blob.position], text_form=True)
        assert [(r.sow_key, r.data) for r in records] == [("b1", b"AAEC")]
