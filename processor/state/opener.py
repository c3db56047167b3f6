"""Where persistent store partitions live, and how the processor opens them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from processor.errors import StoreCorruptedError
from processor.state import Store
from processor.state.memory import MemoryStore
from processor.state.rocksdb import RocksDBStore, quarantine
from processor.topology.model import Durability, SowTopic

log = logging.getLogger(__name__)

__all__ = ["store_opener", "store_path"]


def store_path(state_dir: Path, topic: SowTopic, partition: int) -> Path:
    """Where a persistent store partition lives: ``<state_dir>/<topic>/<partition>``,
    ``/`` and ``%`` in the topic's name percent-encoded (``/ett/order``: ``%2Fett%2Forder``)."""
    name = topic.name.replace("%", "%25").replace("/", "%2F")
    return state_dir / (name if name not in (".", "..") else f"%2E{name[1:]}") / str(partition)


def store_opener(state_dir: Path) -> Callable[[SowTopic, int], Store]:
    """Opens stores: RocksDB for persistent topics (a damaged one is moved aside and
    rebuilt from the changelog), memory for transient ones."""

    def open_store(topic: SowTopic, partition: int) -> Store:
        if topic.durability is Durability.TRANSIENT:
            return MemoryStore()
        path = store_path(state_dir, topic, partition)
        try:
            return RocksDBStore(path)
        except StoreCorruptedError as exc:
            log.warning("%s", exc)
            quarantine(path)
            return RocksDBStore(path)

    return open_store
