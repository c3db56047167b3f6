"""Duplicate detection state on a real store: bounded memory, one meta entry per
publisher, store look-ups after eviction, and the migration of the old JSON map."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.engine.publishers import (
    LEGACY_PUBLISHERS_META,
    PublisherSequences,
    control_records,
    meta_key,
    publisher_meta,
)
from processor.state.rocksdb import RocksDBStore


def _commit(sequences: PublisherSequences, store: RocksDBStore) -> None:
    taken = sequences.take()
    store.write({}, publisher_meta(taken))
    sequences.stored(taken)


def test_memory_stays_bounded_and_an_evicted_publisher_is_read_back_from_the_store(
    tmp_path: Path,
) -> None:
    store = RocksDBStore(tmp_path / "db")
    sequences = PublisherSequences(store, limit=3)
    for n in range(10):
        assert sequences.accept(f"p{n}", 5)
    assert len(sequences) == 3
    assert sequences.snapshot() == {"p7": 5, "p8": 5, "p9": 5}
    # Evicted but not yet committed: the transaction's own changes still count.
    assert not sequences.accept("p0", 5)
    _commit(sequences, store)
    assert sorted(store.meta_items(b"publisher:"))[:2] == [
        (b"publisher:p0", b"5"),
        (b"publisher:p1", b"5"),
    ]
    reads = sequences.store_reads
    assert not sequences.accept("p1", 4)  # evicted, found in the store
    assert sequences.store_reads == reads + 1
    assert sequences.accept("p1", 6)
    assert not sequences.accept("p1", 6)
    assert sequences.store_reads == reads + 1  # now in memory again
    assert sequences.changed == {"p1": 6}

    reopened = PublisherSequences(store, limit=3)
    assert reopened.load() == 3
    assert all(not reopened.accept(f"p{n}", 5) for n in range(10))
    assert reopened.changed == {}
    store.close()


def test_an_old_json_map_is_converted_to_one_entry_per_publisher(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "db")
    store.write({}, {LEGACY_PUBLISHERS_META: b'{"p1":7,"p2":3}'})
    sequences = PublisherSequences(store)
    assert sequences.load() == 2
    assert store.get_meta(LEGACY_PUBLISHERS_META) is None
    assert store.get_meta(meta_key("p1")) == b"7"
    # The next commit writes them to the changelog too.
    assert sequences.changed == {"p1": 7, "p2": 3}
    assert sorted(control_records(store)) == [
        (b"\x00sow:publisher:p1", b"7"),
        (b"\x00sow:publisher:p2", b"3"),
    ]
    store.close()


def test_the_limit_must_be_positive(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "db")
    with pytest.raises(ValueError, match="at least 1"):
        PublisherSequences(store, limit=0)
    store.close()


def test_a_transaction_in_flight_still_counts_until_it_is_stored(tmp_path: Path) -> None:
    """Pipelined commits: the next transaction applies while the previous one's
    sequences are neither in its changes nor in the store yet."""
    store = RocksDBStore(tmp_path / "db")
    sequences = PublisherSequences(store, limit=1)
    assert sequences.accept("a", 1)
    assert sequences.accept("b", 1)  # a leaves memory (limit 1)
    taken = sequences.take()
    assert taken == {"a": 1, "b": 1}
    assert sequences.changed == {}
    assert not sequences.accept("a", 1)  # seen in the transaction in flight
    store.write({}, publisher_meta(taken))
    sequences.stored(taken)
    assert not sequences.accept("a", 1)  # and in the store since
    store.close()
