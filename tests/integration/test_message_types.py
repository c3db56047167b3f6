"""Topics of every message type but json through gRPC, on both backends: publish in the
topic's type, query with a filter on its fields, delta_publish, and a malformed message
refused; msgpack, protobuf and composite topics with select lists, enrichment, a view and
a queue too."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import SowClient
from processor.errors import ServiceError
from processor.messages import codec_for
from processor.messages.composite import join
from processor.topology.loader import load_topology
from processor.topology.model import MessagePart, SowTopic, Topology
from tests.integration.harness import namespaced, running_sow
from tests.integration.queue_helpers import Consumer

ORDERS = SowTopic("ORDERS", message_type="nvfix", keys=("/id",))
TRADES = SowTopic("TRADES", message_type="fix", keys=("/11",))

PROTO = """
syntax = "proto3";
package conf;
message Order {
  optional int64 id = 1;
  optional string sym = 2;
  optional int64 qty = 3;
  optional double px = 4;
  repeated string tags = 5;
  optional double notional = 6;
}
"""


def _records(client: SowClient, topic: str, **query: object) -> list[bytes]:
    records, _, _ = client.query(topic, **query)
    return sorted(record.data for record in records)


def test_nvfix_and_fix_topics_publish_query_and_merge(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS, TRADES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        client.publish("ORDERS", b"id=1\x01sym=IBM\x01qty=10\x01")
        client.publish("ORDERS", b"id=2\x01sym=MSFT\x01qty=30\x01")
        merged = client.publish("ORDERS", b"id=1\x01qty=20\x01", delta=True)
        trade = client.publish("TRADES", b"35=D\x0111=T1\x0155=IBM\x0138=100\x01")
        at = [merged.position, trade.position]
        assert _records(client, "ORDERS", filter="/qty > 15", min_position=at) == [
            b"id=1\x01sym=IBM\x01qty=20\x01",
            b"id=2\x01sym=MSFT\x01qty=30\x01",
        ]
        assert _records(client, "TRADES", filter="/55 = 'IBM' AND /38 >= 100") == [
            b"35=D\x0111=T1\x0155=IBM\x0138=100\x01"
        ]
        with pytest.raises(ServiceError, match="not tag=value"):
            client.publish("ORDERS", b"id=3\x01broken\x01")


ALERTS = SowTopic("ALERTS", message_type="xml", keys=("/alert/id",), indexes=("/alert/type",))
DOCS = SowTopic("DOCS", message_type="bson", keys=("/id",), hash_indexes=())


def test_xml_and_bson_topics_publish_query_and_merge(
    backend: str, tmp_path: Path, unique: str
) -> None:
    import bson

    topology = namespaced(unique, ALERTS, DOCS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        client.publish("ALERTS", b'<alert level="2"><id>1</id><type>disk</type></alert>')
        client.publish("ALERTS", b'<alert level="5"><id>2</id><type>cpu</type></alert>')
        merged = client.publish("ALERTS", b"<alert><id>1</id><type>net</type></alert>", delta=True)
        assert _records(
            client,
            "ALERTS",
            filter="/alert/@level < 3 AND /alert/type = 'net'",
            min_position=[merged.position],
        ) == [b'<alert level="2"><id>1</id><type>net</type></alert>']
        client.publish("DOCS", bson.encode({"id": 1, "pos": {"qty": 5}, "tags": ["a", "b"]}))
        last = client.publish(
            "DOCS", b'{"id": 2, "pos": {"qty": 50}, "tags": ["c"]}', text_form=True
        )
        records, _, _ = client.query(
            "DOCS", filter="/pos/qty > 10 OR /tags = 'b'", min_position=[last.position]
        )
        assert sorted(bson.decode(r.data)["id"] for r in records) == [1, 2]
        with pytest.raises(ServiceError, match="not well-formed XML"):
            client.publish("ALERTS", b"<alert><id>3</alert>")
        with pytest.raises(ServiceError, match="not a BSON document"):
            client.publish("DOCS", b"\x05\x00\x00")


def test_malformed_messages_of_every_type_are_dead_lettered_with_the_reason(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Foreign producers write straight to Kafka: a malformed fix, nvfix, xml, bson,
    bflat, msgpack, protobuf or composite message, and one whose Preprocessing fails,
    reach the dead-letter topic with the reason; the good records after them apply."""
    import msgpack
    from confluent_kafka import Producer

    from tests.integration.harness import read_topic

    (tmp_path / "order.proto").write_text(PROTO)

    topics = [
        SowTopic("FX", message_type="fix", keys=("/11",)),
        SowTopic("NV", message_type="nvfix", keys=("/id",)),
        SowTopic("XM", message_type="xml", keys=("/o/id",)),
        SowTopic("BS", message_type="bson", keys=("/id",)),
        SowTopic("BF", message_type="bflat", keys=("/id",)),
        SowTopic("PP", keys=("/id",), preprocessing=("UPPER(/s) AS /name/first",)),
        SowTopic("MP", message_type="msgpack", keys=("/id",)),
        SowTopic(
            "PB",
            message_type="protobuf",
            keys=("/id",),
            schema=str(tmp_path / "order.proto"),
            proto_type="conf.Order",
        ),
        SowTopic(
            "CL",
            message_type="composite-local",
            keys=("/0/id",),
            parts=(MessagePart("json"), MessagePart("binary")),
        ),
    ]
    bad_and_good = {
        "FX": (b"35=D\x01not a field\x01", b"35=D\x0111=A\x01"),
        "NV": (b"id=1\x01=oops\x01", b"id=1\x01x=2\x01"),
        "XM": (b"<o><id>1</o>", b"<o><id>1</id></o>"),
        "BS": (b"\x10\x00\x00\x00garbage", codec_for(topics[3]).encode_json({"id": 1})),
        "BF": (b"\x19a", codec_for(topics[4]).encode_json({"id": 1})),
        "PP": (b'{"id":1,"s":"x","name":"not an object"}', b'{"id":2,"s":"x"}'),
        "MP": (b"\xc1", msgpack.packb({"id": 1})),
        "PB": (b"\xff\xff", codec_for(topics[7]).encode_json({"id": 1})),
        "CL": (b"\x00\x00\x00\x09{}", join([b'{"id": 1}', b"\x00"])),
    }
    topology = namespaced(unique, *topics)
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        for name, (bad, good) in bad_and_good.items():
            kafka_topic = topology.topic(name).kafka_topic
            producer.produce(kafka_topic, bad, partition=0)
            producer.produce(kafka_topic, good, partition=0)
        assert producer.flush(30) == 0
        dead = read_topic(bootstrap, f"{unique}.dead-letter", expect=9, timeout_s=60)
        reasons = {
            dict(m.headers())["sow.source.topic"].decode().rsplit(".", 1)[1]: (  # type: ignore[attr-defined]
                dict(m.headers())["sow.error.reason"].decode(),  # type: ignore[attr-defined]
                dict(m.headers())["sow.error.message"].decode(),  # type: ignore[attr-defined]
            )
            for m in dead
        }
        assert {name: reason for name, (reason, _) in reasons.items()} == {
            "FX": "undecodable",
            "NV": "undecodable",
            "XM": "undecodable",
            "BS": "undecodable",
            "BF": "undecodable",
            "PP": "enrichment-failed",
            "MP": "undecodable",
            "PB": "undecodable",
            "CL": "undecodable",
        }
        assert "not tag=value" in reasons["FX"][1]
        assert "not well-formed XML" in reasons["XM"][1]
        assert "not a BSON document" in reasons["BS"][1]
        assert "bflat" in reasons["BF"][1]
        assert "writes below /name" in reasons["PP"][1]
        assert "not a MessagePack message" in reasons["MP"][1]
        assert "not a conf.Order message" in reasons["PB"][1]
        assert "claims 9 bytes" in reasons["CL"][1]
        deadline = time.monotonic() + 30
        for name in bad_and_good:
            while not client.query(name)[0]:
                assert time.monotonic() < deadline, f"the good record of {name} was not applied"
                time.sleep(0.1)
        assert app.processor is not None
        assert app.processor.dead_lettered == 9


def test_topics_are_scoped_by_message_type(backend: str, tmp_path: Path, unique: str) -> None:
    """[json].[orders] and [nvfix].[orders] are two topics (seed 000, spec 1.3): each is
    published to and queried by its scoped name; the bare name is refused as ambiguous."""
    from processor.topology.assemble import assemble

    loaded = [
        (SowTopic("orders", keys=("/id",)), "t", "1"),
        (SowTopic("orders", message_type="nvfix", keys=("/id",)), "t", "2"),
    ]
    topology = namespaced(unique, *assemble(loaded, ("t",)).topics.values())
    assert list(topology.topics) == ["[json].[orders]", "[nvfix].[orders]"]
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        client.publish("[json].[orders]", b'{"id":1,"venue":"json"}')
        last = client.publish("[nvfix].[orders]", b"id=1\x01venue=nvfix\x01")
        assert _records(client, "[nvfix].[orders]", min_position=[last.position]) == [
            b"id=1\x01venue=nvfix\x01"
        ]
        assert _records(client, "[json].[orders]") == [b'{"id":1,"venue":"json"}']
        with pytest.raises(ServiceError, match="several message types"):
            client.query("orders")


def _new_types(tmp_path: Path, unique: str) -> Topology:
    """msgpack (delta), protobuf (enrichment, a view over it, a queue over it),
    composite-local and composite-global topics, each on a Kafka topic of this test."""
    (tmp_path / "order.proto").write_text(PROTO)
    proto = "schema: order.proto, proto_type: conf.Order"
    path = tmp_path / "topology.yaml"
    path.write_text(
        "topics:\n"
        f"  - {{name: MP, message_type: msgpack, key: /id, kafka_topic: {unique}.MP}}\n"
        f"  - {{name: PB, message_type: protobuf, {proto}, key: /id, kafka_topic: {unique}.PB,"
        "  enrichment: ['/qty * /px AS /notional']}\n"
        "  - {name: CL, message_type: composite-local, parts: [json, binary], key: /0/id,"
        f"  kafka_topic: {unique}.CL}}\n"
        "  - {name: CG, message_type: composite-global, parts: [msgpack, binary], key: /id,"
        f"  kafka_topic: {unique}.CG}}\n"
        "views:\n"
        "  - {name: BYSYM, message_type: json, underlying: PB, grouping: [/sym],"
        f"  projection: ['/sym AS /sym', 'SUM(/qty) AS /qty'], kafka_topic: {unique}.BYSYM}}\n"
        f"queues:\n  - {{name: Q, message_type: protobuf, schema: order.proto, underlying: PB}}\n"
    )
    return load_topology(path)


def _until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_msgpack_protobuf_and_composite_topics_through_the_processor(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """The new message types on both backends, as json's tests hold json: the SowKey from
    their fields, filters, select lists, delta_publish (merged in the type), enrichment,
    a view and a queue over a protobuf topic; composite-global refuses a delta."""
    import msgpack

    topology = _new_types(tmp_path, unique)
    pb = codec_for(topology.topics["PB"])
    with running_sow(backend, topology, tmp_path / "state", unique) as (_, client):
        # msgpack: keys, filters, select, delta_publish in the type and as JSON text
        client.publish("MP", msgpack.packb({"id": 1, "sym": "IBM", "qty": 10, "tags": ["a"]}))
        client.publish("MP", msgpack.packb({"id": 2, "sym": "MSFT", "qty": 3}))
        client.publish("MP", msgpack.packb({"id": 1, "qty": 20}), delta=True)
        last = client.publish("MP", b'{"id": 2, "sym": "ORCL"}', delta=True, text_form=True)
        records, _, _ = client.query("MP", filter="/qty > 15", min_position=[last.position])
        assert [msgpack.unpackb(r.data) for r in records] == [
            {"id": 1, "sym": "IBM", "qty": 20, "tags": ["a"]}
        ]
        records, _, _ = client.query("MP", select="[-/,+/sym]")
        assert sorted(r.data for r in records) == [b'{"sym":"IBM"}', b'{"sym":"ORCL"}']

        # protobuf: enrichment computes /notional; a view groups it; a queue leases it
        consumer = Consumer(client, "Q", ack=True)
        client.publish("PB", pb.encode_json({"id": 1, "sym": "IBM", "qty": 10, "px": 2.5}))
        client.publish("PB", b'{"id": 2, "sym": "IBM", "qty": 4, "px": 1.0}', text_form=True)
        # enrichment runs on a delta's own fields (spec 3.3): no /px, so /notional is NULL
        last = client.publish("PB", pb.encode_json({"id": 2, "sym": "MSFT"}), delta=True)
        records, _, _ = client.query("PB", filter="/notional > 20", min_position=[last.position])
        assert [pb.decode(r.data) for r in records] == [
            {"id": 1, "sym": "IBM", "qty": 10, "px": 2.5, "notional": 25.0}
        ]
        records, _, _ = client.query("PB", filter="/id = 2")
        assert [pb.decode(r.data) for r in records] == [
            {"id": 2, "sym": "MSFT", "qty": 4, "px": 1.0}
        ]
        with pytest.raises(ServiceError, match=r"conf\.Order"):
            client.publish("PB", b"\xff\xff\xff")

        def view_rows() -> list[Any]:
            return [orjson.loads(r.data) for r in client.query("BYSYM")[0]]

        _until(
            lambda: (
                sorted(view_rows(), key=str)
                == [{"sym": "IBM", "qty": 10}, {"sym": "MSFT", "qty": 4}]
            )
        )
        _until(lambda: len(consumer.leases) >= 3)  # each publish to PB, the delta too
        leased = [pb.decode(lease.record.data) for lease in consumer.leases]
        assert [m["id"] for m in leased] == [1, 2, 2]
        assert leased[0]["notional"] == 25.0
        consumer.close()

        # composite-local: /0/... reads the json part; a delta keeps the binary part
        client.publish("CL", join([b'{"id": 1, "qty": 5}', b"\x00image"]))
        client.publish("CL", join([b'{"id": 2, "qty": 1}', b""]))
        last = client.publish("CL", b'[{"id": 1, "qty": 7}, null]', delta=True, text_form=True)
        records, _, _ = client.query("CL", filter="/0/qty > 2", min_position=[last.position])
        assert [r.data for r in records] == [join([b'{"id":1,"qty":7}', b"\x00image"])]

        # composite-global: one tree over the parts; no delta (as in AMPS)
        last = client.publish("CG", join([msgpack.packb({"id": 9, "sym": "X"}), b"blob"]))
        records, _, _ = client.query("CG", filter="/sym = 'X'", min_position=[last.position])
        assert len(records) == 1
        with pytest.raises(ServiceError, match="no delta_publish"):
            client.publish("CG", join([msgpack.packb({"id": 9}), b""]), delta=True)
