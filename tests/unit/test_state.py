"""Store contract: one suite, run against every Store implementation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.app import store_opener
from processor.errors import StoreCorruptedError
from processor.state import CHANGELOG_OFFSET, Store, offset_bytes, offset_from
from processor.state.memory import MemoryStore
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic

Factory = Callable[[Path], Store]
FACTORIES: dict[str, Factory] = {
    "memory": lambda path: MemoryStore(),
    "rocksdb": lambda path: RocksDBStore(path / "db"),
}


@pytest.fixture(params=sorted(FACTORIES))
def make_store(request: pytest.FixtureRequest) -> Factory:
    return FACTORIES[request.param]


def test_write_reads_back_with_meta(make_store: Factory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.write({b"a": b"1", b"b": b"2"}, {CHANGELOG_OFFSET: offset_bytes(7)})
    store.write({b"a": None, b"c": b"3"}, {CHANGELOG_OFFSET: offset_bytes(9)})
    assert store.get(b"a") is None
    assert store.get(b"c") == b"3"
    assert sorted(store.items()) == [(b"b", b"2"), (b"c", b"3")]
    assert store.count() == 2
    assert offset_from(store.get_meta(CHANGELOG_OFFSET)) == 9
    store.clear({CHANGELOG_OFFSET: offset_bytes(0)})
    assert store.count() == 0
    store.close()
    store.close()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.binary(min_size=1, max_size=3), st.none() | st.binary(max_size=5), max_size=8
        ),
        max_size=6,
    )
)
def test_stores_match_a_dict_model(batches: list[dict[bytes, bytes | None]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        stores = [factory(Path(directory)) for factory in FACTORIES.values()]
        model: dict[bytes, bytes] = {}
        for batch in batches:
            for key, value in batch.items():
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            for store in stores:
                store.write(batch, {})
        for store in stores:
            assert dict(store.items()) == model
            store.close()


def test_rocksdb_survives_reopen(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "db")
    store.write({b"k": b"v"}, {CHANGELOG_OFFSET: offset_bytes(3)})
    store.close()
    again = RocksDBStore(tmp_path / "db")
    assert again.get(b"k") == b"v"
    assert offset_from(again.get_meta(CHANGELOG_OFFSET)) == 3
    again.close()


def test_damaged_store_is_moved_aside_and_reopened_empty(tmp_path: Path) -> None:
    topic = SowTopic("T", keys=("/id",))
    path = tmp_path / "T" / "0"
    store = RocksDBStore(path)
    store.write({b"k": b"v"}, {})
    store.close()
    for file in path.glob("*"):
        if file.name.startswith(("CURRENT", "MANIFEST")):
            file.write_bytes(b"garbage")
    with pytest.raises(StoreCorruptedError, match="cannot open"):
        RocksDBStore(path)
    reopened = store_opener(tmp_path)(topic, 0)
    assert reopened.count() == 0
    reopened.close()
    assert list(tmp_path.glob("T/0.damaged-*"))


def test_meta_items_lists_one_prefix_and_none_deletes_meta(
    make_store: Factory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    store.write(
        {b"k": b"v"},
        {b"publisher:b": b"2", b"publisher:a": b"1", b"publishers": b"{}", b"pub": b"x"},
    )
    assert sorted(store.meta_items(b"publisher:")) == [
        (b"publisher:a", b"1"),
        (b"publisher:b", b"2"),
    ]
    store.write({}, {b"publisher:a": None, b"absent": None})
    assert list(store.meta_items(b"publisher:")) == [(b"publisher:b", b"2")]
    assert store.get_meta(b"publisher:a") is None
    store.clear({b"publisher:b": None})
    assert list(store.meta_items(b"publisher:")) == []
    assert store.get_meta(b"pub") == b"x"
    store.close()


def test_compaction_keeps_the_data_and_reclaims_what_was_deleted(
    make_store: Factory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    store.write({b"k%04d" % i: b"x" * 2000 for i in range(500)}, {b"m": b"1"})
    store.write({b"k%04d" % i: None for i in range(1, 500)}, {})
    before, after = store.compact()
    assert list(store.items()) == [(b"k0000", b"x" * 2000)]
    assert store.get_meta(b"m") == b"1"
    if isinstance(store, RocksDBStore):
        assert before > 500 * 2000 / 10  # the deleted records still took room
        assert after < before / 10
    store.close()
