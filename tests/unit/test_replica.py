"""The read replica without a broker: change events, listeners, snapshots, catching up."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor import changelog, errors
from processor.changelog import RESET_KEY
from processor.changelog.events import ChangeEvent, ChangeReason, ListenerHandle
from processor.errors import CatchingUpError, InvalidRequestError
from processor.keys import partition_for
from processor.messages import codec_for
from processor.query.sow import QueryEngine, SowQuery
from processor.queues.state import MessageState
from processor.replica import snapshot
from processor.replica.queue_states import QueueStates
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.topology.model import HashIndexSpec, SowTopic, Topology
from tests.unit.log_records import LogRecord

ITEMS = SowTopic("ITEMS", keys=("/id",), partitions=2, hash_indexes=(HashIndexSpec(("/c",)),))
TOPOLOGY = Topology({"ITEMS": ITEMS})


class Feed:
    """Changelog records for ITEMS, numbered per partition."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.offsets = [0, 0]

    def record(self, key: str, message: dict[str, Any] | None, reason: bytes = b"") -> LogRecord:
        raw = key.encode()
        partition = partition_for(raw, ITEMS.partitions)
        offset = self.offsets[partition]
        self.offsets[partition] += 1
        if message is None:
            headers = [("sow.reason", reason)] if reason else None
            return LogRecord(ITEMS.changelog_topic, partition, offset, raw, None, headers)
        envelope = changelog.EnvelopeWriter("ITEMS", "json", ITEMS.kafka_topic, partition)
        value = envelope.encode(offset, raw, orjson.dumps(message), 1, 1)
        return LogRecord(ITEMS.changelog_topic, partition, offset, raw, value)

    def apply(self, *records: LogRecord) -> None:
        self.replica.apply(records)


def message(envelope: bytes | None) -> Any:
    return None if envelope is None else orjson.loads(changelog.data_of(envelope))


@pytest.fixture
def feed() -> Feed:
    return Feed(Replica(TOPOLOGY, tail=lambda: None))  # type: ignore[arg-type, return-value]


def test_events_carry_old_and_new_values_and_the_reason(feed: Feed) -> None:
    received: list[ChangeEvent] = []
    feed.replica.listen(received.extend)
    feed.apply(feed.record("a", {"id": 1, "v": 1}))
    feed.apply(feed.record("a", {"id": 1, "v": 2}), feed.record("b", {"id": 2}))
    feed.apply(feed.record("a", None, b"deleted"), feed.record("b", None, b"expired"))
    feed.apply(feed.record("missing", None, b"deleted"))  # deletes nothing: no event
    got = [(e.sow_key, message(e.old), message(e.new), e.reason) for e in received]
    assert got == [
        (b"a", None, {"id": 1, "v": 1}, ChangeReason.PUBLISH),
        (b"a", {"id": 1, "v": 1}, {"id": 1, "v": 2}, ChangeReason.PUBLISH),
        (b"b", None, {"id": 2}, ChangeReason.PUBLISH),
        (b"a", {"id": 1, "v": 2}, None, ChangeReason.DELETE),
        (b"b", {"id": 2}, None, ChangeReason.EXPIRE),
    ]
    first = received[0]
    assert first.topic == "ITEMS"
    assert first.position == (ITEMS.changelog_topic, partition_for(b"a", 2), 0)
    new = first.new_envelope()
    assert new is not None
    assert new.sow_key == "a"


def test_a_listener_registered_under_a_read_meets_it_with_no_gap_and_no_duplicate(
    feed: Feed,
) -> None:
    """What the subscription hub does: register under the lock the read holds."""
    feed.apply(feed.record("a", {"id": 1}))
    received: list[Sequence[ChangeEvent]] = []

    def keys_and_listen(tables: list[SowTable]) -> tuple[list[bytes], ListenerHandle]:
        return list(tables[0].envelopes), feed.replica.listen(received.append)

    (seen, handle), vector = feed.replica.read([ITEMS], keys_and_listen)
    assert seen == [b"a"]
    assert sum(offset for _, _, offset in vector) == 1
    feed.apply(feed.record("b", {"id": 2}))
    handle.close()
    feed.apply(feed.record("c", {"id": 3}))
    assert [[e.sow_key for e in unit] for unit in received] == [[b"b"]]


def test_a_failing_listener_is_unregistered_and_others_go_on(feed: Feed) -> None:
    calls: list[int] = []

    def failing(events: Sequence[ChangeEvent]) -> None:
        calls.append(1)
        raise RuntimeError("listener bug")

    received: list[ChangeEvent] = []
    feed.replica.listen(failing)
    feed.replica.listen(received.extend)
    feed.apply(feed.record("a", {"id": 1}))
    feed.apply(feed.record("b", {"id": 2}))
    assert calls == [1]
    assert [e.sow_key for e in received] == [b"a", b"b"]


def test_a_reset_deletes_the_partitions_records_with_events(feed: Feed) -> None:
    keys = [f"k{i}" for i in range(20)]
    feed.apply(*(feed.record(k, {"id": i}) for i, k in enumerate(keys)))
    received: list[ChangeEvent] = []
    feed.replica.listen(received.extend)
    reset = LogRecord(ITEMS.changelog_topic, 0, feed.offsets[0], RESET_KEY, b"reset")
    feed.apply(reset)
    in_zero = {k.encode() for k in keys if partition_for(k.encode(), 2) == 0}
    assert {e.sow_key for e in received} == in_zero
    assert all(e.reason is ChangeReason.DELETE and e.new is None for e in received)
    left = feed.replica.read([ITEMS], lambda tables: set(tables[0].envelopes))[0]
    assert left == {k.encode() for k in keys} - in_zero


def test_queries_fail_or_wait_while_catching_up(feed: Feed) -> None:
    engine = QueryEngine(TOPOLOGY, feed.replica)
    feed.apply(feed.record("a", {"id": 1}))
    assert engine.run(SowQuery("ITEMS")).stats is not None  # not following: answers
    feed.replica.start_catching_up()  # following, but run never reaches an end here
    with pytest.raises(CatchingUpError, match=r"catching up .* 0 of 2 changelog partitions"):
        engine.run(SowQuery("ITEMS"))
    with pytest.raises(CatchingUpError, match=r"not caught up within 0\.2s"):
        engine.run(SowQuery("ITEMS", wait_for_catch_up=True, timeout_s=0.2))
    # Validation still comes first.
    with pytest.raises(InvalidRequestError, match="skip_n"):
        engine.run(SowQuery("ITEMS", skip_n=1))


def test_snapshot_round_trip_keeps_records_and_indexes(feed: Feed, tmp_path: Path) -> None:
    feed.apply(*(feed.record(f"k{i}", {"id": i, "c": i % 3}) for i in range(30)))
    feed.apply(feed.record("k1", None, b"deleted"), feed.record("k2", {"id": 2, "c": 1}))
    table = feed.replica.read([ITEMS], lambda tables: tables[0])[0]
    table.memo_index(("id",), "/id")  # a memo index a query created
    positions = {(ITEMS.changelog_topic, 0): 7, (ITEMS.changelog_topic, 1): 9}
    marks = {(ITEMS.changelog_topic, 1): (8, 1000, b"k2")}
    snapshot.write(tmp_path, TOPOLOGY, {"ITEMS": table.export()}, positions, {("in", 0): 30}, marks)
    loaded = snapshot.load(tmp_path, TOPOLOGY)
    assert loaded is not None
    assert loaded.positions == positions
    assert loaded.log_next == {("in", 0): 30}
    assert loaded.count == 29
    assert loaded.last_records == marks
    assert snapshot.peek(tmp_path, TOPOLOGY) == (positions, marks)
    fresh = SowTable(ITEMS, codec_for(ITEMS))
    fresh.restore(loaded.tables["ITEMS"])
    assert list(fresh.envelopes.items()) == list(table.envelopes.items())
    assert list(fresh.memo[("id",)].values.items()) == list(table.memo[("id",)].values.items())
    index, original = fresh.hash_indexes[0], table.hash_indexes[0]
    assert (index.entries, index.buckets) == (original.entries, original.buckets)
    assert sorted(index.lookup([("1",)])) == sorted(
        k for k in table.envelopes if message(table.envelopes[k])["c"] == 1
    )
    # The restored table goes on changing like the original.
    for each in (fresh, table):
        each.put(b"k2", table.envelopes[b"k3"])
        each.delete(b"k4")
    assert (index.entries, index.buckets) == (original.entries, original.buckets)
    assert fresh.memo[("id",)].values == table.memo[("id",)].values


def test_unusable_snapshots_are_refused_with_the_reason(tmp_path: Path) -> None:
    assert snapshot.load(tmp_path, TOPOLOGY) is None
    snapshot.write(tmp_path, TOPOLOGY, {"ITEMS": {"keys": [b"a"]}}, {}, {}, {})
    other = Topology({"ITEMS": SowTopic("ITEMS", keys=("/id",), partitions=3)})
    with pytest.raises(errors.SnapshotUnusableError, match="another topology"):
        snapshot.load(tmp_path, other)
    assert snapshot.peek(tmp_path, other) is None
    path = tmp_path / snapshot.FILE_NAME
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(errors.SnapshotUnusableError, match="damaged"):
        snapshot.load(tmp_path, TOPOLOGY)
    path.write_bytes(bytes(raw[:40]))
    with pytest.raises(errors.SnapshotUnusableError, match="damaged"):
        snapshot.load(tmp_path, TOPOLOGY)
    path.write_bytes(b"something else")
    with pytest.raises(errors.SnapshotUnusableError, match="not a replica snapshot"):
        snapshot.load(tmp_path, TOPOLOGY)
    assert snapshot.peek(tmp_path, TOPOLOGY) is None


def test_queue_states_are_kept_per_partition_and_through_a_snapshot(
    feed: Feed, tmp_path: Path
) -> None:
    states = QueueStates()
    leased, returned = MessageState(1, 0, "svc/sub", 5000), MessageState(2, 1)
    states.note("ITEMS", 0, b"log/0/1", leased.encode())
    states.note("ITEMS", 1, b"log/1/1", returned.encode())
    states.note("ITEMS", 1, b"log/1/2", leased.encode())
    states.note("ITEMS", 1, b"log/1/2", None)  # acknowledged: gone
    assert states.get("ITEMS", b"log/0/1") == leased
    assert states.get("ITEMS", b"log/1/1") == returned
    assert states.get("ITEMS", b"log/1/2") is None
    assert states.get("OTHER", b"log/0/1") is None
    table = feed.replica.read([ITEMS], lambda tables: tables[0])[0]
    exported = {"ITEMS": table.export()}
    states.export(exported)
    snapshot.write(tmp_path, TOPOLOGY, exported, {}, {}, {})
    loaded = snapshot.load(tmp_path, TOPOLOGY)
    assert loaded is not None
    restored = QueueStates()
    restored.restore(loaded.tables)
    assert restored.get("ITEMS", b"log/0/1") == leased
    assert restored.get("ITEMS", b"log/1/1") == returned
    # A partition that starts afresh loses its states only.
    restored.forget("ITEMS", 1)
    assert restored.get("ITEMS", b"log/1/1") is None
    assert restored.get("ITEMS", b"log/0/1") == leased
    # A snapshot written before queues kept their states restores none.
    restored.restore({"ITEMS": table.export()})
    assert restored.get("ITEMS", b"log/0/1") is None


def test_unreadable_queue_states_in_a_snapshot_are_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    states = QueueStates()
    states.note("Q", 0, b"log/0/1", MessageState(1).encode())
    states.restore({"Q": {"keys": [], "queue_states": {0: {b"log/0/1": 7}}}})
    assert states.get("Q", b"log/0/1") is None
    assert "queue states are unreadable" in caplog.text
    states.restore({"Q": {"queue_states": [1, 2]}})
    assert states.get("Q", b"log/0/1") is None
