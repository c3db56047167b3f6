"""The expiration index (processor.engine.expiry) on real RocksDB files and in memory:
due order, stale entries, the per-transaction bound, restarts and rebuilds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.changelog import REASON_HEADER, EnvelopeWriter
from processor.changelog.commands import EXPIRATION_HEADER
from processor.engine.apply import Applier, Route
from processor.engine.expiry import EXPIRED, DueIndex, Expirer, due_key, split_due_key
from processor.engine.partition import PartitionState, make_writers
from processor.engine.recovery import due_entries
from processor.engine.transaction import Transaction
from processor.keys import key_function
from processor.messages import codec_for
from processor.state import Store
from processor.state.memory import MemoryStore
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic
from tests.unit.log_records import LogRecord
from tests.unit.produced import Produced

TICKS = SowTopic("TICKS", keys=("/id",), expiration_s=10)
NOW = 1_800_000_000_000


@pytest.fixture(params=["rocksdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: Store = RocksDBStore(tmp_path / "s") if request.param == "rocksdb" else MemoryStore()
    yield opened
    opened.close()


def _state(store: Store, topic: SowTopic = TICKS) -> PartitionState:
    return PartitionState(
        topic=topic,
        partition=0,
        store=store,
        codec=codec_for(topic),
        key_function=key_function(topic),
        writers=make_writers(topic, 0),
    )


#: Transactions applied and not yet committed by :func:`_commit`, oldest first.
OPEN: list[Transaction] = []


def _transaction(state: PartitionState, now_ms: int, produce: Produced) -> Transaction:
    """A new transaction at ``now_ms`` (committed by the next :func:`_commit`), with the
    due index listening as the processor sets it up for a topic with expiration."""
    listeners = {state.topic.name: (DueIndex(),)} if state.topic.expiration_s is not None else {}
    OPEN.append(Transaction(len(OPEN), now_ms, listeners, produce))
    return OPEN[-1]


def _apply(applier: Applier, state: PartitionState, record: LogRecord, now_ms: int) -> None:
    assert isinstance(applier.produce, Produced)
    applier.apply(_transaction(state, now_ms, applier.produce), [record])


def _publish(
    applier: Applier,
    state: PartitionState,
    offset: int,
    body: bytes,
    now_ms: int,
    expiration: str | None = None,
) -> None:
    listed = None if expiration is None else [(EXPIRATION_HEADER, expiration.encode())]
    topic = state.topic
    applier.routes[(topic.kafka_topic, 0)] = Route(state, topic.kafka_topic, True)
    key = state.key_function(state.codec.decode(body)).encode() if state.key_function else None
    _apply(applier, state, LogRecord(topic.kafka_topic, 0, offset, key, body, listed), now_ms)


def _expire(
    expirer: Expirer, state: PartitionState, now_ms: int, produced: Produced
) -> dict[bytes, bytes | None]:
    """Expire in a new transaction; return the records it changed."""
    transaction = _transaction(state, now_ms, produced)
    expirer.expire(transaction, [state])
    return {k: v for batch in transaction.batches for k, v in batch.writes.items()}


def _key(i: int, topic: SowTopic = TICKS) -> bytes:
    """The SowKey of ``{"id": i}``."""
    generate = key_function(topic)
    assert generate is not None
    return generate({"id": i}).encode()


def _commit(state: PartitionState) -> None:
    """Step 4 of the commit protocol (the store writes) without a broker, for every open
    transaction in order."""
    for transaction in OPEN:
        transaction.flush()
        for batch in transaction.batches:
            batch.state.store.write(batch.writes, {}, batch.due)
    OPEN.clear()


@pytest.fixture(autouse=True)
def _no_open_transactions() -> Iterator[None]:
    OPEN.clear()
    yield
    OPEN.clear()


def test_due_keys_sort_by_due_time_then_sow_key() -> None:
    keys = [due_key(2000, b"a"), due_key(1000, b"z"), due_key(1000, b"b"), due_key(-5, b"c")]
    assert sorted(keys) == [keys[3], keys[2], keys[1], keys[0]]
    assert split_due_key(keys[1]) == (1000, b"z")
    assert split_due_key(keys[3]) == (0, b"c")


def test_store_due_index_order_bound_limit_and_delete(store: Store) -> None:
    entries = {due_key(t, k): b"" for t, k in [(30, b"c"), (10, b"a"), (20, b"b"), (10, b"d")]}
    store.write({b"a": b"1"}, {}, entries)
    assert store.due_keys(b"", due_key(21, b""), 10) == [
        due_key(10, b"a"),
        due_key(10, b"d"),
        due_key(20, b"b"),
    ]
    assert store.due_keys(b"", due_key(100, b""), 2) == [due_key(10, b"a"), due_key(10, b"d")]
    store.write({}, {}, {due_key(10, b"a"): None, due_key(10, b"d"): None})
    assert store.due_keys(due_key(10, b"d"), due_key(100, b""), 10) == [
        due_key(20, b"b"),
        due_key(30, b"c"),
    ]
    assert store.due_keys(b"", due_key(20, b""), 10) == []
    assert store.get(b"a") == b"1"  # the index and the records are written together
    store.clear({})
    assert store.due_keys(b"", due_key(100, b""), 10) == []


def test_rocksdb_due_index_survives_reopen_and_a_bulk_rebuild(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "s")
    store.begin_rebuild()
    store.write({b"a": b"1"}, {}, {due_key(5, b"a"): b""})
    store.end_rebuild()
    store.close()
    store = RocksDBStore(tmp_path / "s")
    assert store.due_keys(b"", due_key(6, b""), 10) == [due_key(5, b"a")]
    store.write({}, {}, {due_key(7, b"b"): b""})
    store.close()
    store = RocksDBStore(tmp_path / "s")
    assert store.due_keys(b"", due_key(8, b""), 10) == [due_key(5, b"a"), due_key(7, b"b")]
    store.close()


def test_expire_deletes_due_records_with_an_expired_tombstone(store: Store) -> None:
    state, produced = _state(store), Produced()
    applier = Applier(produced, "dead")
    _publish(applier, state, 0, b'{"id": 1}', NOW)  # topic default: 10 s
    _publish(applier, state, 1, b'{"id": 2}', NOW, expiration="2")
    _publish(applier, state, 2, b'{"id": 3}', NOW, expiration="0")  # never
    _commit(state)
    expirer = Expirer()
    assert not expirer.due([state], NOW + 1999)
    assert _expire(expirer, state, NOW + 1999, produced) == {}
    assert OPEN[-1].batches == []  # nothing due: no partition touched
    assert expirer.due([state], NOW + 2000)
    assert _expire(expirer, state, NOW + 2000, produced) == {_key(2): None}
    assert produced.tombstones() == [(_key(2), [(REASON_HEADER, EXPIRED)])]
    _commit(state)
    assert store.get(_key(2)) is None
    assert store.get(_key(1)) is not None
    assert not expirer.due([state], NOW + 9999)
    _expire(expirer, state, NOW + 10_000, produced)
    assert [k for k, _ in produced.tombstones()] == [_key(2), _key(1)]
    _commit(state)
    assert store.get(_key(3)) is not None
    assert store.due_keys(b"", due_key(NOW * 2, b""), 10) == []
    assert expirer.expired == 2


def test_an_update_restarts_the_lifespan_and_a_delete_leaves_a_stale_entry(store: Store) -> None:
    state, produced = _state(store), Produced()
    applier = Applier(produced, "dead")
    _publish(applier, state, 0, b'{"id": 1}', NOW)
    _publish(applier, state, 1, b'{"id": 2}', NOW)
    _commit(state)
    _publish(applier, state, 2, b'{"id": 1, "v": 2}', NOW + 5000)  # due at NOW + 15 s now
    _apply(applier, state, LogRecord("TICKS", 0, 3, _key(2), None), NOW + 5000)  # deleted
    _commit(state)
    expirer = Expirer()
    assert expirer.due([state], NOW + 10_000)  # two stale entries are due
    _expire(expirer, state, NOW + 10_000, produced)
    assert [k for k, h in produced.tombstones() if h == [(REASON_HEADER, EXPIRED)]] == []
    _commit(state)
    assert not expirer.due([state], NOW + 14_999)
    _expire(expirer, state, NOW + 15_000, produced)
    assert [k for k, h in produced.tombstones() if h == [(REASON_HEADER, EXPIRED)]] == [_key(1)]


def test_expire_handles_at_most_its_limit_per_transaction(store: Store) -> None:
    state, produced = _state(store), Produced()
    applier = Applier(produced, "dead")
    for i in range(25):
        _publish(applier, state, i, b'{"id": %d}' % i, NOW + i, expiration="1")
    _commit(state)
    expirer = Expirer(limit=10)
    counts = []
    while expirer.due([state], NOW + 5000):
        expired = _expire(expirer, state, NOW + 5000, produced)
        counts.append(sum(1 for v in expired.values() if v is None))
        _commit(state)
    assert counts == [10, 10, 5]
    assert store.count() == 0
    # due order: the earliest published expire first
    assert [k for k, _ in produced.tombstones()] == [_key(i) for i in range(25)]


def test_disabled_topic_ignores_the_header_and_expires_nothing(store: Store) -> None:
    topic = SowTopic("PLAIN", keys=("/id",))
    state, produced = _state(store, topic), Produced()
    applier = Applier(produced, "dead")
    _publish(applier, state, 0, b'{"id": 1}', NOW, expiration="1")
    OPEN[-1].flush()
    assert [batch.due for batch in OPEN[-1].batches] == [{}]
    _commit(state)
    expirer = Expirer()
    assert not expirer.due([state], NOW + 10_000)
    assert _expire(expirer, state, NOW + 10_000, produced) == {}
    assert store.get(_key(1, topic)) is not None


def test_replayed_changelog_records_get_their_index_entries() -> None:
    writer = EnvelopeWriter("TICKS", "json", "TICKS", 0)
    updates: dict[bytes, bytes | None] = {
        b"a": writer.encode(0, b"a", b"{}", 1, 1, 5000),
        b"b": writer.encode(1, b"b", b"{}", 1, 1, None),
        b"c": None,
        b"d": b"not an envelope",
    }
    assert due_entries(updates) == {due_key(5000, b"a"): b""}
