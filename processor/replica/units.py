"""Cutting changelog records into units: the pieces the read replica applies atomically.

Per changelog partition, in offset order, a unit is every record up to and including:

* a PROGRESS record: the processor ends each transaction with one per changelog
  partition it touched (:func:`processor.engine.commit.commit`; re-published chunks of a
  lost changelog end with one too);
* a RESET record: a transient partition restarting empty (its own transaction);
* the partition's end, as a fetch confirmed it: read_committed exposes a transaction
  whole, so records still open there belong to no transaction in flight (another
  writer's, or a crashed processor's that the broker exposed).

A partition whose offsets go backwards (the broker lost its log and the tail reads it
again from the start) *restarts*: its pending records are dropped and its next unit
first removes every record the partition held.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from processor.changelog import CONTROL_PREFIX, PROGRESS_KEY, RESET_KEY
from processor.log import Record, TailState, TopicPartitionKey, lost_log_level

log = logging.getLogger(__name__)

UNIT_ENDS = (PROGRESS_KEY, RESET_KEY)


@dataclass(slots=True)
class Unit:
    """Records of one changelog partition to apply in one piece. ``restart_at`` (not
    None): the partition's log restarted at that offset; drop its records first."""

    partition: TopicPartitionKey
    records: list[Record]
    restart_at: int | None = None


class UnitCutter:
    """Buffers each partition's records until its unit is complete. Applier thread only."""

    def __init__(self, partitions: Collection[TopicPartitionKey]) -> None:
        #: Next changelog offset per partition, as read (applied plus pending).
        self.read_next: dict[TopicPartitionKey, int] = dict.fromkeys(partitions, 0)
        #: The records of the unit each partition is in the middle of.
        self.pending: dict[TopicPartitionKey, list[Record]] = {p: [] for p in partitions}
        self._restart_at: dict[TopicPartitionKey, int] = {}

    def start(self, positions: Mapping[TopicPartitionKey, int]) -> None:
        """Reading starts at these offsets (nothing pending)."""
        for tp, offset in positions.items():
            if tp in self.read_next:
                self.read_next[tp] = offset
                self.pending[tp] = []

    def cut(
        self, records: Sequence[Record], states: Mapping[TopicPartitionKey, TailState]
    ) -> tuple[list[Unit], dict[TopicPartitionKey, int], list[TopicPartitionKey]]:
        """The units ``records`` complete, in order; the partitions at their end (with
        the position there); the partitions that restarted. ``states`` is the tail's
        state as of the last of ``records``."""
        units: list[Unit] = []
        restarted: list[TopicPartitionKey] = []
        pending = self.pending
        read_next = self.read_next
        for record in records:
            tp = (record.topic(), record.partition())
            buffer = pending.get(tp)
            if buffer is None:
                continue
            offset = record.offset()
            if offset < read_next[tp]:
                buffer = self._restart(tp, offset, restarted)
            buffer.append(record)
            read_next[tp] = offset + 1
            key = record.key()
            if key is not None and key.startswith(CONTROL_PREFIX) and key in UNIT_ENDS:
                units.append(self._take(tp))
        ends: dict[TopicPartitionKey, int] = {}
        for tp, state in states.items():
            if tp not in pending:
                continue
            if state.position < read_next[tp]:
                self._restart(tp, state.position, restarted)
                read_next[tp] = state.position
            if state.at_end:
                if pending[tp] or tp in self._restart_at:
                    units.append(self._take(tp))
                ends[tp] = state.position
        return units, ends, restarted

    def _take(self, tp: TopicPartitionKey) -> Unit:
        unit = Unit(tp, self.pending[tp], self._restart_at.pop(tp, None))
        self.pending[tp] = []
        return unit

    def _restart(
        self, tp: TopicPartitionKey, offset: int, restarted: list[TopicPartitionKey]
    ) -> list[Record]:
        log.log(
            lost_log_level(),
            "changelog %s[%d] restarted at offset %d (this replica had read to %d): the "
            "broker lost or truncated it; its records are replaced by what it holds now",
            tp[0],
            tp[1],
            offset,
            self.read_next[tp],
        )
        self._restart_at[tp] = offset
        restarted.append(tp)
        buffer: list[Record] = []
        self.pending[tp] = buffer
        return buffer


def units_of(records: Sequence[Record], partitions: Collection[TopicPartitionKey]) -> list[Unit]:
    """One unit per changelog partition of ``partitions`` of the records given."""
    units: dict[TopicPartitionKey, Unit] = {}
    for record in records:
        tp = (record.topic(), record.partition())
        if record.error() is None and tp in partitions:
            units.setdefault(tp, Unit(tp, [])).records.append(record)
    return list(units.values())
