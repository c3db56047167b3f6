"""Replacing a Session subscription in place (spec 3.12), real broker and gRPC."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow
from tests.integration.subscription_helpers import Collector, data

QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)


def _quote(key: int, price: int, version: int = 0) -> bytes:
    return orjson.dumps({"id": key, "price": price, "v": version})


def _parts(collector: Collector, sub_id: str) -> list[Any]:
    return [m for m in collector.messages if m.sub_id == sub_id]


def _changes(collector: Collector, sub_id: str) -> list[Any]:
    return [m.change for m in _parts(collector, sub_id) if m.WhichOneof("part") == "change"]


def _view(collector: Collector, sub_id: str) -> dict[str, Any]:
    """The subscriber's records: the query result, then publishes add, OOFs remove."""
    view: dict[str, Any] = {}
    for message in _parts(collector, sub_id):
        part = message.WhichOneof("part")
        if part == "batch":
            view.update((r.sow_key, data(r)) for r in message.batch.records)
        elif part == "change":
            change = message.change
            if change.kind == sow_pb2.CHANGE_PUBLISH:
                view[change.sow_key] = data(change.record)
            else:
                view.pop(change.sow_key, None)
    return view


def _sow(client: SowClient, text: str) -> dict[str, Any]:
    records, _, _ = client.query("QUOTES", filter=text)
    return {r.sow_key: data(r) for r in records}


def test_a_sow_and_subscribe_replace_sends_new_records_oofs_the_others_with_no_gap(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        published = [client.publish("QUOTES", _quote(k, p)) for k, p in [(1, 60), (2, 40), (3, 70)]]
        client.query("QUOTES", min_position=[p.position for p in published])
        session = client.session()
        collector = Collector(session)
        session.sow_and_subscribe("QUOTES", "q", filter="/price > 50", oof=True)
        assert collector.wait_for(
            lambda c: any(m.WhichOneof("part") == "group_end" for m in c.messages)
        )
        session.sow_and_subscribe("QUOTES", "q", filter="/price < 65", oof=True, replace=True)
        assert collector.wait_for(lambda c: len(_changes(c, "q")) >= 2)
        assert [(c.kind, data(c.record)["id"], c.oof_reason) for c in _changes(collector, "q")] == [
            (sow_pb2.CHANGE_OOF, 3, "match"),
            (sow_pb2.CHANGE_PUBLISH, 2, ""),
        ]
        # Replaces back and forth while a publisher changes every record: the view ends
        # equal to the SOW under the last filter (no gap), with no publish repeated.
        stop = threading.Event()

        def publish() -> None:
            version = 0
            while not stop.is_set():
                version += 1
                client.publish("QUOTES", _quote(version % 30, (version * 7) % 100, version))

        writer = threading.Thread(target=publish)
        writer.start()
        try:
            for turn in range(10):
                text = "/price >= 40" if turn % 2 == 0 else "/price < 65"
                session.sow_and_subscribe("QUOTES", "q", filter=text, oof=True, replace=True)
                stop.wait(0.1)
        finally:
            stop.set()
            writer.join()
        assert collector.wait_for(lambda c: _view(c, "q") == _sow(client, "/price < 65"), 20)
        last: dict[str, bytes] = {}
        for change in _changes(collector, "q"):
            if change.kind == sow_pb2.CHANGE_PUBLISH:
                assert last.get(change.sow_key) != change.record.data, "a duplicate publish"
                last[change.sow_key] = change.record.data
            else:
                last.pop(change.sow_key, None)
        assert not [m for m in collector.messages if m.WhichOneof("part") == "ended"]
        session.cancel()


def test_a_subscribe_replace_applies_from_the_next_change(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        session = client.session()
        collector = Collector(session)
        session.subscribe("QUOTES", "s", filter="/id = 1")
        assert collector.wait_for(
            lambda c: any(m.WhichOneof("part") == "registered" for m in c.messages)
        )
        client.publish("QUOTES", _quote(1, 1))
        assert collector.wait_for(lambda c: len(_changes(c, "s")) == 1)
        session.subscribe("QUOTES", "s", filter="/id = 2", replace=True)
        # The replace is in place once a change the old filter would miss arrives.
        assert collector.wait_for(
            lambda c: (
                client.publish("QUOTES", _quote(2, 2)) is not None
                and any(data(x.record)["id"] == 2 for x in _changes(c, "s"))
            ),
            20,
        )
        client.publish("QUOTES", _quote(1, 3))
        last = client.publish("QUOTES", _quote(2, 4))
        client.query("QUOTES", min_position=[last.position])
        assert collector.wait_for(lambda c: data(_changes(c, "s")[-1].record)["price"] == 4)
        assert [data(x.record)["id"] for x in _changes(collector, "s")][1:] == [2] * (
            len(_changes(collector, "s")) - 1
        )
        session.cancel()


def test_a_refused_replace_ends_the_subscription_with_the_reason(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, QUOTES)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        session = client.session()
        collector = Collector(session)
        session.sow_and_subscribe("QUOTES", "nobody", filter="/price > 1", replace=True)
        session.sow_and_subscribe("QUOTES", "page", top_n=2, skip_n=2, order_by="/id")
        session.sow_and_subscribe("QUOTES", "page", top_n=2, order_by="/id", replace=True)
        session.sow_and_subscribe("QUOTES", "bad", filter="/price > 1")
        session.sow_and_subscribe("QUOTES", "bad", filter="/price >", replace=True)

        def ended(c: Collector) -> dict[str, Any]:
            return {m.sub_id: m.ended for m in c.messages if m.WhichOneof("part") == "ended"}

        assert collector.wait_for(lambda c: len(ended(c)) == 3)
        endings = ended(collector)
        assert endings["nobody"].code == "NOT_FOUND"
        assert "no live subscription 'nobody'" in endings["nobody"].details
        assert endings["page"].code == "INVALID_ARGUMENT"
        assert "restate skip_n" in endings["page"].details
        assert endings["bad"].code == "INVALID_ARGUMENT"
        assert "replace refused" in endings["bad"].details
        session.cancel()
