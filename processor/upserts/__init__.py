"""Upsert-table views of SOW topics (docs/upsert-tables.md; issue 37): per SOW topic that
asks for one (its ``upsert`` option), a compacted topic keyed by record that holds the
stored message, with a tombstone for each removal, written in the processor's
transactions (:mod:`processor.upserts.writer`). :func:`upsert_wiring` gives the processor
its change listeners."""

from __future__ import annotations

from processor.engine.transaction import ChangeListener
from processor.topology.model import Topology
from processor.upserts.writer import UpsertWriter, key_of

__all__ = ["UpsertWriter", "key_of", "upsert_wiring"]


def upsert_wiring(topology: Topology) -> dict[str, list[ChangeListener]]:
    """The processor's change listeners (by SOW topic name) of the topology's upsert
    topics (empty when it has none)."""
    return {
        name: [UpsertWriter(topic)]
        for name, topic in topology.topics.items()
        if topic.upsert is not None
    }
