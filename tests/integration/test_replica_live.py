"""The read replica on the live path: a whole kafka-sow (processor, replica, gRPC) on the
real broker; change events and atomic processor transactions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence

import orjson
import pytest

from processor import changelog
from processor.app import Application
from processor.changelog.events import ChangeEvent, ChangeReason
from processor.client.sow_client import SowClient
from processor.log import Headers
from processor.log.kafka.writer import KafkaLogWriter
from processor.publish.gateway import Gateway
from processor.replica.table import SowTable
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow
from tests.integration.replica_helpers import eventually

EVENTS = SowTopic("EVENTS", keys=("/id",))
BULK = SowTopic("BULK", keys=("/id",))
TOPICS = (EVENTS, BULK)


@pytest.fixture(scope="module")
def sow(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Application, SowClient]]:
    unique = f"replica-live-{tmp_path_factory.getbasetemp().name}"
    state = tmp_path_factory.mktemp("state")
    with running_sow(bootstrap, namespaced(unique, *TOPICS), state, unique) as running:
        yield running


def test_events_for_publish_update_and_delete_in_order(
    sow: tuple[Application, SowClient],
) -> None:
    app, client = sow
    assert app.replica is not None
    received: list[ChangeEvent] = []
    handle = app.replica.listen(received.extend)
    client.publish("EVENTS", json.dumps({"id": 1, "v": "first"}).encode())
    client.publish("EVENTS", json.dumps({"id": 1, "v": "second"}).encode())
    client.publish("EVENTS", json.dumps({"id": 2, "v": "other"}).encode())
    client.delete("EVENTS", filter="/id = 1", timeout=30)
    eventually(lambda: len(received) == 4)
    handle.close()

    first, update, other, delete = received
    assert [e.reason for e in received] == [
        ChangeReason.PUBLISH,
        ChangeReason.PUBLISH,
        ChangeReason.PUBLISH,
        ChangeReason.DELETE,
    ]
    assert first.old is None
    assert message(first.new) == {"id": 1, "v": "first"}
    assert message(update.old) == {"id": 1, "v": "first"}
    assert message(update.new) == {"id": 1, "v": "second"}
    assert other.old is None
    assert message(other.new) == {"id": 2, "v": "other"}
    assert message(delete.old) == {"id": 1, "v": "second"}
    assert delete.new is None
    assert first.sow_key == update.sow_key == delete.sow_key != other.sow_key
    assert all(e.topic == "EVENTS" for e in received)
    offsets = [e.position[2] for e in received]
    assert offsets == sorted(offsets)
    assert len(set(offsets)) == 4
    # After close, nothing more arrives.
    client.publish("EVENTS", json.dumps({"id": 3}).encode())
    _, begin, _ = client.query("EVENTS", filter="/id = 3", wait_for_catch_up=True)
    assert begin.staleness_ms >= 0
    assert len(received) == 4


def message(envelope: bytes | None) -> object:
    return None if envelope is None else orjson.loads(changelog.data_of(envelope))


def test_a_filter_delete_is_never_seen_half_applied(
    sow: tuple[Application, SowClient],
) -> None:
    app, client = sow
    replica = app.replica
    assert replica is not None
    count = 30_000  # the delete (15,000 tombstones) spans several reads of the changelog
    topic = app.topology.topic("BULK")
    gateway = Gateway(app.topology, KafkaLogWriter(app.broker.bootstrap_servers), None)
    commands: list[tuple[str, bytes | None, bytes | None, int, Headers | None]] = []
    even: set[bytes] = set()
    for i in range(count):
        data = json.dumps({"id": i, "half": i % 2}).encode()
        key = gateway.sow_key_for(topic, data).encode()
        commands.append((topic.kafka_topic, key, data, 0, None))
        if i % 2 == 0:
            even.add(key)
    assert gateway.writer.submit(commands).wait(60)
    gateway.writer.close()

    def evens(tables: list[SowTable]) -> int:
        envelopes = tables[0].envelopes
        return sum(1 for key in even if key in envelopes)

    eventually(lambda: len(replica.read([topic], lambda t: list(t[0].envelopes))[0]) == count, 60)
    assert replica.read([topic], evens)[0] == count // 2
    seen: list[int] = []
    units: list[Sequence[ChangeEvent]] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            seen.append(replica.read([topic], evens)[0])

    handle = replica.listen(
        lambda events: units.append(events) if events[0].topic == "BULK" else None
    )
    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        deleted = client.delete("BULK", filter="/half = 0", timeout=60)
    finally:
        stop.set()
        thread.join()
        handle.close()
    assert deleted.records_deleted == count // 2
    assert seen
    assert set(seen) <= {count // 2, 0}, sorted(set(seen))[:10]
    assert seen[-1] == 0
    # The whole delete arrived as one unit: one call, every tombstone, in order.
    assert [len(u) for u in units] == [count // 2]
    assert all(e.reason is ChangeReason.DELETE and e.new is None for e in units[0])
