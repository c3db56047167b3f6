"""Bulk rebuilds and crashes: a real changelog on the broker, a real RocksDB store, and a
real process killed (SIGKILL) while the store holds writes that skipped RocksDB's
write-ahead log. Whatever the moment of the kill, the next restore ends with the same
store as an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from processor.engine.recovery import BULK_REBUILD_MIN_RECORDS, restore_from_changelog
from processor.errors import StoreError
from processor.log.kafka.readers import KafkaPartitionReader
from processor.state import CHANGELOG_OFFSET, offset_from
from processor.state.memory import MemoryStore
from processor.state.rocksdb import REBUILDING, RocksDBStore
from processor.topology.model import SowTopic
from tests.integration.test_restore_steps import RECORDS, _changelog

ROOT = Path(__file__).resolve().parents[2]

#: The child: rebuild ``argv[3]`` from the changelog of topic ``argv[2]``, stop at the
#: moment ``argv[4]`` names, say "ready" and wait to be killed.
CHILD = """
import sys, time
from processor.engine.recovery import restore_steps
from processor.log.kafka.readers import KafkaPartitionReader
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic

bootstrap, kafka_topic, path, moment = sys.argv[1:5]
topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=kafka_topic)
store = RocksDBStore(__import__("pathlib").Path(path))
steps = restore_steps(store, topic, 0, KafkaPartitionReader(bootstrap), lambda line, **_: None)
if moment in ("mid-rebuild", "meta-flushed-first"):
    next(steps)
    next(steps)
    assert store.rebuilding
    if moment == "meta-flushed-first":
        # The end of a rebuild flushes both columns in the background, in either order:
        # here the offsets reach a table file and the records do not.
        store._meta_view.flush(True)
else:
    for _ in steps:
        pass
    if moment == "written-after":
        store.write({}, {b"probe": b"1"})
        assert not store.rebuilding
print("ready", flush=True)
time.sleep(60)
"""


def _kill_at(bootstrap: str, topic: SowTopic, path: Path, moment: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, bootstrap, topic.kafka_topic, str(path), moment],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", "the child stopped before the kill"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)


def _reference(bootstrap: str, topic: SowTopic) -> list[tuple[bytes, bytes]]:
    """The records an uninterrupted restore into a memory store (no bulk mode) holds."""
    store = MemoryStore()
    reader = KafkaPartitionReader(bootstrap)
    try:
        restore_from_changelog(store, topic, 0, reader, lambda line, **figures: None)
    finally:
        reader.close()
    return sorted(store.items())


@pytest.mark.parametrize(
    ("moment", "wiped"),
    [
        ("mid-rebuild", True),
        ("meta-flushed-first", True),
        ("rebuild-ended", True),
        ("written-after", False),
    ],
)
def test_a_rebuild_killed_at_any_moment_restarts_to_the_same_store(
    bootstrap: str, unique: str, tmp_path: Path, moment: str, wiped: bool
) -> None:
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders")
    end = _changelog(bootstrap, topic)
    assert end >= BULK_REBUILD_MIN_RECORDS, "the changelog must be long enough for bulk mode"
    path = tmp_path / "db"
    _kill_at(bootstrap, topic, path, moment)

    store = RocksDBStore(path)
    reader = KafkaPartitionReader(bootstrap)
    try:
        assert store.get_meta(REBUILDING) is None
        if wiped:
            # Killed before the rebuild's writes were known to be on disk: the store
            # opens empty, never with an offset its records do not reach.
            assert store.count() == 0
            assert store.get_meta(CHANGELOG_OFFSET) is None
        else:
            assert store.count() == RECORDS
            assert offset_from(store.get_meta(CHANGELOG_OFFSET)) == end
            assert store.get_meta(b"probe") == b"1"
        restored = restore_from_changelog(store, topic, 0, reader, lambda line, **figures: None)
        assert restored.applied == (end if wiped else 0)
        assert offset_from(store.get_meta(CHANGELOG_OFFSET)) == end
        assert len(list(store.meta_items(b"publisher:"))) == 50
        rebuilt = list(store.items())
    finally:
        reader.close()
        store.close()
    assert rebuilt == _reference(bootstrap, topic)


def test_only_an_empty_store_is_rebuilt_in_bulk(tmp_path: Path) -> None:
    store = RocksDBStore(tmp_path / "db")
    try:
        store.write({b"k": b"v"}, {})
        with pytest.raises(StoreError, match="holds records"):
            store.begin_rebuild()
        assert not store.rebuilding
        assert store.get(b"k") == b"v"
    finally:
        store.close()


def test_a_rebuild_ended_reads_before_its_flush_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = RocksDBStore(path)
    try:
        store.begin_rebuild()
        store.write({b"%d" % i: b"v%d" % i for i in range(1000)}, {CHANGELOG_OFFSET: b"x"})
        store.end_rebuild()
        assert store.rebuilding  # until the next write or close
        assert store.get(b"999") == b"v999"
        assert store.count() == 1000
        store.write({b"late": b"1"}, {})
        assert not store.rebuilding
    finally:
        store.close()
    store = RocksDBStore(path)
    try:
        assert store.count() == 1001
        assert store.get_meta(CHANGELOG_OFFSET) == b"x"
        assert store.get_meta(REBUILDING) is None
    finally:
        store.close()
