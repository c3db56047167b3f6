"""delta_publish, select lists and delta subscriptions through gRPC, against the real
broker (spec 3.3, 1.19, 3.10)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import ServiceError, SowClient
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, read_topic, running_sow
from tests.integration.subscription_helpers import Collector, data

ORDERS = SowTopic("ORDERS", keys=("/id",), partitions=2)
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "status", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": ["null", "int"], "default": None},
    ],
}


def _record(client: SowClient, topic: str, reply: Any, **options: Any) -> dict[str, Any]:
    """The record a publish reply's SowKey holds once the SOW reflects the publish."""
    records, _, _ = client.query(
        topic, sow_keys=[reply.sow_key], min_position=[reply.position], **options
    )
    assert len(records) == 1
    return data(records[0])


def test_deltas_merge_into_the_stored_record(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        # a delta with no record: the delta alone is the record
        alone = client.publish("ORDERS", b'{"id": 1, "status": "new"}', delta=True)
        assert _record(client, "ORDERS", alone) == {"id": 1, "status": "new"}

        # two deltas merge into one record; nested objects merge leaf by leaf
        client.publish(
            "ORDERS",
            b'{"id": 1, "qty": 5, "owner": {"name": "ann", "desk": 3}}',
            delta=True,
            correlation_id="c1",
        )
        second = client.publish("ORDERS", b'{"id": 1, "owner": {"desk": 4}}', delta=True)
        assert _record(client, "ORDERS", second) == {
            "id": 1,
            "status": "new",
            "qty": 5,
            "owner": {"name": "ann", "desk": 4},
        }
        records, _, _ = client.query("ORDERS", sow_keys=[second.sow_key])
        assert records[0].correlation_id == "c1"  # the stored record's, the delta had none

        # a delta cannot remove a field: leaving it out keeps it
        kept = client.publish("ORDERS", b'{"id": 1}', delta=True)
        assert set(_record(client, "ORDERS", kept)) == {"id", "status", "qty", "owner"}

        # an array of subdocuments given in a delta replaces the stored one whole
        client.publish(
            "ORDERS",
            b'{"id": 2, "contents": {"packages": [{"box": "chocolates"}, {"bowl": "noodles"}]}}',
        )
        replaced = client.publish(
            "ORDERS", b'{"id": 2, "contents": {"packages": [{"basket": "eggs"}]}}', delta=True
        )
        assert _record(client, "ORDERS", replaced) == {
            "id": 2,
            "contents": {"packages": [{"basket": "eggs"}]},
        }


def test_a_delta_without_the_key_field_is_refused(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        with pytest.raises(ServiceError) as caught:
            client.publish("ORDERS", b'{"status": "lost"}', delta=True)
        assert caught.value.code == "INVALID_ARGUMENT"
        assert "delta_publish" in caught.value.details
        assert "/id" in caught.value.details
        # over the stream too, refused alone: the batch's other delta is merged
        results = list(
            client.publish_stream("ORDERS", [b'{"status": "x"}', b'{"id": 9, "a": 1}'], delta=True)
        )
        assert results[0].error_code == "INVALID_ARGUMENT"
        assert results[1].position is not None
        list(client.publish_stream("ORDERS", [b'{"id": 9, "b": 2}'], delta=True))
        (merged,) = list(client.publish_stream("ORDERS", [b'{"id": 9, "c": 3}'], delta=True))
        assert _record(client, "ORDERS", merged) == {"id": 9, "a": 1, "b": 2, "c": 3}


def test_avro_deltas_in_text_form_and_binary(backend: str, tmp_path: Path, unique: str) -> None:
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(AVRO_SCHEMA))
    topic = SowTopic("AORDERS", message_type="avro", keys=("/id",), schema=str(schema))
    with running_sow(backend, namespaced(unique, topic), tmp_path, unique) as (_, client):
        client.publish("AORDERS", b'{"id": 1, "status": "open", "qty": 2}', text_form=True)
        delta = client.publish("AORDERS", b'{"id": 1, "qty": 7}', text_form=True, delta=True)
        text = {"text_form": True}
        assert _record(client, "AORDERS", delta, **text) == {"id": 1, "status": "open", "qty": 7}
        with pytest.raises(ServiceError) as caught:  # no record, no Key field: refused
            client.publish("AORDERS", b'{"qty": 1}', text_form=True, delta=True)
        assert "Key fields" in caught.value.details


def test_the_cli_publishes_a_delta(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        client.publish("ORDERS", b'{"id": 5, "status": "open", "qty": 1}')

        def sow(*args: str) -> list[dict[str, Any]]:
            done = subprocess.run(
                [sys.executable, "-m", "processor.cli", *args, "--server", app.grpc_address],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            return [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]

        sow("publish", "ORDERS", '{"id": 5, "qty": 3}', "--delta", "--wait")
        rows = sow("query", "ORDERS", "--filter", "/id = 5", "--select", "[-/,+/id,+/qty]")
        assert rows[0]["data"] == {"id": 5, "qty": 3}
        records, _, _ = client.query("ORDERS", filter="/id = 5")
        assert data(records[0]) == {"id": 5, "status": "open", "qty": 3}


def test_select_on_a_sow_query_and_a_subscription(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        first = client.publish(
            "ORDERS", b'{"id": 1, "complaint": "late", "details": {"a": 1}, "secret": "s"}'
        )
        records, _, _ = client.query(
            "ORDERS", select="[-/,+/id,+/complaint]", min_position=[first.position]
        )
        assert [data(r) for r in records] == [{"id": 1, "complaint": "late"}]

        with pytest.raises(ServiceError) as caught:
            client.query("ORDERS", select="[-/,id]")
        assert caught.value.code == "INVALID_ARGUMENT"
        assert "'id'" in caught.value.details

        stream = client.sow_and_subscribe("ORDERS", select="[+/,-/secret,-/details/a]")
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None)
        assert [data(r) for r in collector.query_records()] == [{"id": 1, "complaint": "late"}]
        client.publish("ORDERS", b'{"id": 2, "secret": "t", "details": {"a": 2, "b": 3}}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 1)
        assert data(collector.changes()[0].record) == {"id": 2, "details": {"b": 3}}
        collector.stop()
        assert collector.error is None


def test_delta_subscription_sends_changed_fields_and_the_key(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        held = client.publish("ORDERS", b'{"id": 1, "status": "open", "qty": 1, "px": {"a": 1}}')
        client.query("ORDERS", min_position=[held.position])
        stream = client.sow_and_subscribe("ORDERS", delta=True, no_empties=True)
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None)
        assert data(collector.query_records()[0])["status"] == "open"  # the query is full

        client.publish("ORDERS", b'{"id": 1, "status": "filled", "qty": 1, "px": {"a": 1}}')
        client.publish("ORDERS", b'{"qty": 1, "id": 1, "px": {"a": 1}, "status": "filled"}')
        client.publish("ORDERS", b'{"id": 2, "status": "new"}')  # new to the subscriber
        client.publish("ORDERS", b'{"id": 1, "status": "filled", "qty": 1, "px": {"a": 2}}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 3)
        changes = collector.changes()
        # Ids 1 and 2 may be in different partitions: only each key's order is defined.
        by_key = [
            [(c.delta, data(c.record)) for c in changes if c.sow_key == key]
            for key in (held.sow_key,)
        ]
        assert by_key == [
            [
                (True, {"id": 1, "status": "filled"}),
                # the same fields in another order changed nothing: no_empties drops it
                (True, {"id": 1, "px": {"a": 2}}),
            ]
        ]
        others = [(c.delta, data(c.record)) for c in changes if c.sow_key != held.sow_key]
        assert others == [(False, {"id": 2, "status": "new"})]  # new to the subscriber
        collector.stop()
        assert len(collector.changes()) == 3


def test_delta_subscription_with_select_and_no_empties(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        stream = client.subscribe("ORDERS", delta=True, no_empties=True, select="[-/,+/status]")
        collector = Collector(stream)
        assert collector.wait_for(lambda c: bool(c.messages))
        client.publish("ORDERS", b'{"id": 1, "status": "open", "qty": 1}')
        client.publish("ORDERS", b'{"id": 1, "status": "open", "qty": 2}')  # qty not selected
        client.publish("ORDERS", b'{"id": 1, "status": "done", "qty": 2}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        assert [(c.delta, data(c.record)) for c in collector.changes()] == [
            (False, {"status": "open"}),
            (True, {"id": 1, "status": "done"}),
        ]
        collector.stop()
        assert len(collector.changes()) == 2

        # without no_empties an unchanged publish is still an update: a key-only delta
        plain = Collector(client.subscribe("ORDERS", delta=True))
        assert plain.wait_for(lambda c: bool(c.messages))
        client.publish("ORDERS", b'{"id": 3, "status": "x"}')
        client.publish("ORDERS", b'{"id": 3, "status": "x"}')
        assert plain.wait_for(lambda c: len(c.changes()) >= 2)
        assert [(c.delta, data(c.record)) for c in plain.changes()] == [
            (False, {"id": 3, "status": "x"}),
            (True, {"id": 3}),
        ]
        plain.stop()


def test_deltas_from_foreign_producers(bootstrap: str, tmp_path: Path, unique: str) -> None:
    """A delta written straight to the input topic (header sow.delta, no Kafka key) is
    re-keyed and merged; one without its Key field, or with a bad sow.delta value, goes to
    the dead-letter topic with the reason, and the next record still applies."""
    from confluent_kafka import Producer

    topology = namespaced(unique, ORDERS)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        client.publish("ORDERS", b'{"id": 4, "status": "open", "qty": 1}')
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        delta = [("sow.delta", b"1")]
        topic = f"{unique}.ORDERS"
        producer.produce(topic, b'{"status": "lost"}', None, headers=delta)
        producer.produce(topic, b'{"id": 4, "qty": 2}', None, headers=[("sow.delta", b"yes")])
        producer.produce(topic, b'{"id": 4, "qty": 3}', None, headers=delta)
        assert producer.flush(30) == 0
        letters = read_topic(bootstrap, f"{unique}.dead-letter", expect=2, timeout_s=30)
        reasons = [dict(m.headers())["sow.error.reason"] for m in letters]  # type: ignore[attr-defined]
        messages = [dict(m.headers())["sow.error.message"] for m in letters]  # type: ignore[attr-defined]
        assert sorted(reasons) == [b"invalid-message", b"missing-key-field"]
        assert any(b"delta_publish must give" in m for m in messages)
        assert any(b"sow.delta" in m for m in messages)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            records, _, _ = client.query("ORDERS", filter="/id = 4")
            # the replica follows the changelog: right after the dead letters commit it may
            # not have the record yet
            if records and data(records[0])["qty"] == 3:
                break
            time.sleep(0.1)
        assert [data(r) for r in records] == [{"id": 4, "status": "open", "qty": 3}]


def test_delta_and_select_in_a_session_and_a_message_batch(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """A session's delta subscription gets deltas and drops empty ones; one with a bad
    select list ends alone; a PublishBatch of messages with ``delta`` merges each."""

    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        session = client.session()
        collector = Collector(session)
        session.subscribe("ORDERS", "d", delta=True, no_empties=True)
        session.subscribe("ORDERS", "bad", select="[+/a,*]")
        assert collector.wait_for(
            lambda c: (
                any(m.WhichOneof("part") == "ended" for m in c.messages)
                and any(m.WhichOneof("part") == "registered" for m in c.messages)
            )
        )
        ended = [m for m in collector.messages if m.WhichOneof("part") == "ended"]
        assert [(m.sub_id, m.ended.code) for m in ended] == [("bad", "INVALID_ARGUMENT")]
        assert "'*'" in ended[0].ended.details

        client.publish("ORDERS", b'{"id": 1, "a": 1, "b": 1}')
        batch = sow_pb2.PublishBatch(
            batch_id=1,
            delta=True,
            messages=[
                sow_pb2.PublishRequest(topic="ORDERS", data=b'{"id": 1, "b": 1}'),  # unchanged
                sow_pb2.PublishRequest(topic="ORDERS", data=b'{"id": 1, "b": 2}'),
            ],
        )
        (ack,) = list(client._stub.PublishStream(iter([batch]), timeout=30))
        assert not ack.refused
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        assert [(c.delta, data(c.record)) for c in collector.changes()] == [
            (False, {"id": 1, "a": 1, "b": 1}),
            (True, {"id": 1, "b": 2}),
        ]
        records, _, _ = client.query("ORDERS")
        assert data(records[0]) == {"id": 1, "a": 1, "b": 2}
        session.cancel()
        assert collector.done.wait(10)
        assert len(collector.changes()) == 2


def test_avro_delta_subscriptions_need_the_text_form(
    backend: str, tmp_path: Path, unique: str
) -> None:
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(AVRO_SCHEMA))
    topic = SowTopic("AORDERS", message_type="avro", keys=("/id",), schema=str(schema))
    with running_sow(backend, namespaced(unique, topic), tmp_path, unique) as (_, client):
        refused = Collector(client.subscribe("AORDERS", delta=True))
        assert refused.done.wait(20)
        assert refused.error is not None
        assert refused.error.code == "INVALID_ARGUMENT"
        assert "text_form" in refused.error.details

        collector = Collector(client.subscribe("AORDERS", delta=True, text_form=True))
        assert collector.wait_for(lambda c: bool(c.messages))
        client.publish("AORDERS", b'{"id": 1, "status": "open", "qty": 2}', text_form=True)
        client.publish("AORDERS", b'{"id": 1, "qty": 3}', text_form=True, delta=True)
        assert collector.wait_for(lambda c: len(c.changes()) >= 2)
        assert [(c.delta, data(c.record)) for c in collector.changes()] == [
            (False, {"id": 1, "status": "open", "qty": 2}),
            (True, {"id": 1, "qty": 3}),
        ]
        collector.stop()


def test_a_delta_subscriber_gets_oofs_and_deletes_whole(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """An OOF carries its record whole (a deleted record's as the subscriber last
    received it), with ``delta = false``: only a publish updating a held record is a
    delta (issue 31)."""
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        one = client.publish("ORDERS", b'{"id": 1, "live": 1, "qty": 5, "desk": "a"}')
        two = client.publish("ORDERS", b'{"id": 2, "live": 1, "qty": 7, "desk": "b"}')
        client.query("ORDERS", min_position=[one.position, two.position])
        stream = client.sow_and_subscribe("ORDERS", filter="/live = 1", delta=True, oof=True)
        collector = Collector(stream)
        assert collector.wait_for(lambda c: c.group_end() is not None)

        client.publish("ORDERS", b'{"id": 1, "live": 1, "qty": 6, "desk": "a"}')  # a delta
        client.publish("ORDERS", b'{"id": 1, "live": 0, "qty": 6, "desk": "a"}')  # OOF
        client.delete("ORDERS", sow_keys=[two.sow_key])  # OOF, deleted
        assert collector.wait_for(lambda c: len(c.changes()) >= 3)
        seen = {
            (c.sow_key, c.kind, c.oof_reason): (c.delta, data(c.record))
            for c in collector.changes()
        }
        assert seen == {
            (one.sow_key, sow_pb2.CHANGE_PUBLISH, ""): (True, {"id": 1, "qty": 6}),
            # the OOF of a record no longer matching carries its new state
            (one.sow_key, sow_pb2.CHANGE_OOF, "match"): (
                False,
                {"id": 1, "live": 0, "qty": 6, "desk": "a"},
            ),
            (two.sow_key, sow_pb2.CHANGE_OOF, "deleted"): (
                False,
                {"id": 2, "live": 1, "qty": 7, "desk": "b"},
            ),
        }
        collector.stop()
