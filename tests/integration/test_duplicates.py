"""Safe retries (AMPS duplicate detection): a command carrying ``sow.publisher`` and
``sow.sequence`` is applied once; a repeat (a sequence not above the highest applied for
its publisher) is discarded, also after a processor restart and after the store is
rebuilt from the changelog."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor import changelog
from processor.changelog.commands import PUBLISHER_HEADER, SEQUENCE_HEADER
from processor.keys import key_function
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, read_topic, running_sow

ORDERS = SowTopic("ORDERS", keys=("/orderId",))


def _publish(
    bootstrap: str, topic: SowTopic, sends: list[tuple[int, str, str, int]]
) -> dict[str, Any]:
    """Produce (orderId, text, publisher, sequence) straight to the input topic, keyed by
    SowKey; return the position of the last one."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    delivered: list[Any] = []
    for order_id, text, publisher, sequence in sends:
        message = {"orderId": order_id, "text": text}
        producer.produce(
            topic.kafka_topic,
            orjson.dumps(message),
            key_of(message).encode(),
            headers=[
                (PUBLISHER_HEADER, publisher.encode()),
                (SEQUENCE_HEADER, str(sequence).encode()),
            ],
            on_delivery=lambda error, record: delivered.append(record),
        )
    assert producer.flush(30) == 0
    assert all(record.error() is None for record in delivered)
    last = max(delivered, key=lambda record: record.offset())
    return {"topic": last.topic(), "partition": last.partition(), "offset": last.offset()}


def _state(client: Any, position: dict[str, Any]) -> dict[int, str]:
    records, _, _ = client.query("ORDERS", min_position=[position])
    return {orjson.loads(r.data)["orderId"]: orjson.loads(r.data)["text"] for r in records}


def test_a_repeated_publisher_sequence_is_applied_once_across_restarts_and_rebuilds(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    topic = topology.topic("ORDERS")
    state_dir = tmp_path / "state"
    with running_sow(bootstrap, topology, state_dir, unique) as (app, client):
        last = _publish(
            bootstrap,
            topic,
            [
                (1, "first", "p1", 1),
                (1, "retried copy", "p1", 1),  # the same (publisher, sequence): discarded
                (2, "second", "p1", 2),
                (3, "late", "p1", 1),  # below the highest applied for p1: discarded
                (3, "other publisher", "p2", 1),  # sequences are per publisher
            ],
        )
        assert _state(client, last) == {1: "first", 2: "second", 3: "other publisher"}
        assert app.processor is not None
        assert app.processor.duplicates == 2

    # A restart keeps the sequences with the store (p1 at 2, p2 at 1).
    with running_sow(bootstrap, topology, state_dir, unique) as (app, client):
        last = _publish(bootstrap, topic, [(4, "resent", "p1", 2), (5, "marker", "p2", 2)])
        assert _state(client, last) == {
            1: "first",
            2: "second",
            3: "other publisher",
            5: "marker",
        }
        assert app.processor is not None
        assert app.processor.duplicates == 1

    # A store rebuilt from the changelog gets them from the last PROGRESS record.
    shutil.rmtree(state_dir)
    with running_sow(bootstrap, topology, state_dir, unique) as (app, client):
        last = _publish(
            bootstrap,
            topic,
            [(6, "resent", "p1", 2), (7, "resent", "p2", 2), (8, "new", "p1", 3)],
        )
        state = _state(client, last)
        assert 6 not in state
        assert 7 not in state
        assert state[8] == "new"
        assert app.processor is not None
        assert app.processor.duplicates == 2

    upserts = [
        changelog.decode(r.value())  # type: ignore[attr-defined]
        for r in read_topic(bootstrap, topic.changelog_topic)
        if not r.key().startswith(changelog.CONTROL_PREFIX)  # type: ignore[attr-defined]
    ]
    texts = sorted(orjson.loads(e.data)["text"] for e in upserts)
    assert texts == ["first", "marker", "new", "other publisher", "second"]


def test_a_transaction_carries_only_the_publishers_it_changed(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """1,000 publishers (one per client process, as the client library names them) do not
    make later transactions bigger, and a rebuild from the changelog still knows them."""
    topology = namespaced(unique, ORDERS)
    topic = topology.topic("ORDERS")
    state_dir = tmp_path / "state"
    many = [(n, "from many", f"host-{n}-pid.1", 1) for n in range(1000)]
    with running_sow(bootstrap, topology, state_dir, unique) as (_, client):
        last = _publish(bootstrap, topic, many)
        assert len(_state(client, last)) == 1000
        last = _publish(bootstrap, topic, [(5000, "one more", "host-0-pid.1", 2)])
        assert _state(client, last)[5000] == "one more"

    records = read_topic(bootstrap, topic.changelog_topic)
    keys = [r.key() for r in records]  # type: ignore[attr-defined]
    publisher_keys = [k for k in keys if k.startswith(changelog.PUBLISHER_PREFIX)]
    assert len(publisher_keys) == 1001
    # The last transaction: the upsert, one publisher record, the progress record.
    *_, before, last_progress = [i for i, k in enumerate(keys) if k == changelog.PROGRESS_KEY]
    upsert, publisher, progress = records[before + 1 : last_progress + 1]
    assert orjson.loads(changelog.decode(upsert.value()).data)["text"] == "one more"  # type: ignore[attr-defined]
    assert (publisher.key(), publisher.value()) == (  # type: ignore[attr-defined]
        changelog.PUBLISHER_PREFIX + b"host-0-pid.1",
        b"2",
    )
    assert len(progress.value()) < 100  # type: ignore[attr-defined]

    shutil.rmtree(state_dir)
    with running_sow(bootstrap, topology, state_dir, unique) as (app, client):
        last = _publish(
            bootstrap,
            topic,
            [
                (6000, "resent", "host-0-pid.1", 2),
                (6001, "resent", "host-999-pid.1", 1),
                (6002, "new", "host-500-pid.1", 2),
            ],
        )
        state = _state(client, last)
        assert (6000 in state, 6001 in state, state[6002]) == (False, False, "new")
        assert app.processor is not None
        assert app.processor.duplicates == 2
