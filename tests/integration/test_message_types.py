"""Topics in fix and nvfix through gRPC, on both backends: publish in the topic's type,
query with a filter on its fields, delta_publish, and a malformed message refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.client.sow_client import SowClient
from processor.errors import ServiceError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", message_type="nvfix", keys=("/id",))
TRADES = SowTopic("TRADES", message_type="fix", keys=("/11",))


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
