"""Live units (issue 34): the frames between a processor and its replica, and how the
replica applies, holds and drops them beside the changelog's copies of their records."""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.changelog import PROGRESS_KEY, encode_progress
from processor.changelog.events import ChangeEvent
from processor.changelog.live import (
    Frame,
    LiveDone,
    LiveUnit,
    PipeSink,
    decode_body,
    encode_frame,
    read_frames,
)
from processor.replica.replica import Replica
from processor.topology.model import SowTopic, Topology
from tests.unit.log_records import LogRecord

ITEMS = SowTopic("ITEMS", keys=("/id",), partitions=1)
TOPOLOGY = Topology({"ITEMS": ITEMS})
CHANGELOG, INPUT = ITEMS.changelog_topic, ITEMS.kafka_topic


def envelope(key: str, value: int, input_offset: int) -> bytes:
    writer = changelog.EnvelopeWriter("ITEMS", "json", INPUT, 0)
    return writer.encode(input_offset, key.encode(), orjson.dumps({"id": key, "v": value}), 1, 1)


def unit(txn: int, after: int, base: int, changes: list[tuple[str, int, int]]) -> LiveUnit:
    """A live unit of ``changes`` (key, value, input offset), reaching past the last."""
    records = [(k.encode(), envelope(k, v, o), None) for k, v, o in changes]
    reached = [(INPUT, 0, changes[-1][2] + 1)]
    return LiveUnit(CHANGELOG, 0, (7, txn), after, base, 1000, records, reached)


def committed(offset: int, changes: list[tuple[str, int, int]]) -> list[LogRecord]:
    """A committed transaction's changelog records from ``offset``: data, then PROGRESS."""
    records = [
        LogRecord(CHANGELOG, 0, offset + i, k.encode(), envelope(k, v, o))
        for i, (k, v, o) in enumerate(changes)
    ]
    progress = encode_progress([(INPUT, 0, changes[-1][2] + 1)])
    records.append(LogRecord(CHANGELOG, 0, offset + len(changes), PROGRESS_KEY, progress))
    return records


class Seen:
    def __init__(self, replica: Replica) -> None:
        self.events: list[ChangeEvent] = []
        replica.listen(self.events.extend)

    def values(self) -> list[tuple[str, Any]]:
        return [
            (
                e.sow_key.decode(),
                None if e.new is None else orjson.loads(changelog.data_of(e.new))["v"],
            )
            for e in self.events
        ]


@pytest.fixture
def replica() -> Replica:
    return Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]


def test_frames_round_trip_through_a_pipe() -> None:
    units = [unit(1, 3, 5, [("a", 1, 10), ("b", 2, 11)])]
    dones = [LiveDone(CHANGELOG, 0, (7, 1), 8, [(INPUT, 0, 12)])]
    assert decode_body(encode_frame(units, dones)[4:]) == Frame(units, dones)
    read, write = os.pipe()
    sink = PipeSink(write)
    sink.send(units, ())
    sink.send((), dones)
    os.close(write)
    assert list(read_frames(read)) == [Frame(units, []), Frame([], dones)]


def test_a_full_pipe_never_blocks_the_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PipeSink, "LIMIT", 1 << 20)
    read, write = os.pipe()
    sink = PipeSink(write)
    big = [unit(1, 3, 5, [(f"k{i}", i, i) for i in range(2000)])]
    for _ in range(200):  # far more than the pipe holds: nothing reads it
        sink.send(big, ())
    assert sink.dropped > 0
    os.close(write)
    frames = list(read_frames(read))
    assert frames
    assert all(frame.units == big for frame in frames)  # whole frames only


def test_live_units_apply_in_order_and_the_changelog_copies_are_dropped(replica: Replica) -> None:
    seen = Seen(replica)
    replica.apply(committed(0, [("a", 1, 0)]))  # PROGRESS at 1, its marker at 2
    replica.apply_live([unit(1, 1, 3, [("a", 2, 1), ("b", 1, 2)])], ())
    assert seen.values() == [("a", 1), ("a", 2), ("b", 1)]
    assert not replica.reached([(INPUT, 0, 2)])  # processed means committed
    replica.apply_live((), [LiveDone(CHANGELOG, 0, (7, 1), 5, [(INPUT, 0, 3)])])
    assert replica.reached([(INPUT, 0, 2)])
    replica.apply(committed(3, [("a", 2, 1), ("b", 1, 2)]))  # the tail brings them too
    replica.apply_live([unit(2, 5, 7, [("c", 1, 3)])], ())
    assert seen.values() == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
    assert replica.live.applied == 2


def test_the_tails_copies_of_live_records_are_skipped_unread_before_their_done(
    replica: Replica,
) -> None:
    """The tail brings a transaction's records before its done comes: at the offsets the
    live unit gave, they are skipped by offset (not read and compared as repeats)."""
    seen = Seen(replica)
    replica.apply(committed(0, [("a", 1, 0)]))
    replica.apply_live([unit(1, 1, 3, [("a", 2, 1), ("b", 1, 2)])], ())
    replica.apply(committed(3, [("a", 2, 1), ("b", 1, 2)]))
    assert seen.values() == [("a", 1), ("a", 2), ("b", 1)]
    assert replica.live.repeated == 0
    replica.apply_live((), [LiveDone(CHANGELOG, 0, (7, 1), 5, [(INPUT, 0, 3)])])
    replica.apply(committed(7, [("c", 1, 3)]))
    assert seen.values() == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]


def test_a_unit_waits_for_the_tail_to_bring_the_transaction_before_it(replica: Replica) -> None:
    seen = Seen(replica)
    replica.apply_live([unit(2, 1, 3, [("b", 1, 1)])], ())  # after the PROGRESS at 1
    assert seen.values() == []
    replica.apply(committed(0, [("a", 1, 0)]))
    assert seen.values() == [("a", 1), ("b", 1)]


def test_a_unit_the_tail_went_past_is_dropped(replica: Replica) -> None:
    seen = Seen(replica)
    replica.apply(committed(0, [("a", 1, 0)]))
    replica.apply(committed(3, [("b", 1, 1)]))
    replica.apply_live([unit(2, 1, 3, [("b", 1, 1)])], ())
    assert seen.values() == [("a", 1), ("b", 1)]
    assert replica.live.dropped == 1


def test_after_a_crash_the_same_changes_committed_again_are_not_applied_twice(
    replica: Replica,
) -> None:
    """The processor died after handing over its unit, before the commit; the next one
    applies the same input again, commits it after the aborted records and its marker,
    and goes on: the replica applies each change once."""
    seen = Seen(replica)
    replica.apply(committed(0, [("a", 1, 0)]))
    replica.apply_live([unit(1, 1, 3, [("a", 2, 1), ("b", 1, 2)])], ())  # never committed
    replica.apply(committed(7, [("a", 2, 1), ("b", 1, 2), ("c", 1, 3)]))
    replica.apply(committed(12, [("c", 2, 4)]))
    assert seen.values() == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("c", 2)]
    assert replica.reached([(INPUT, 0, 4)])


def test_a_crashed_processors_layout_does_not_hide_new_records(replica: Replica) -> None:
    """The processor handed over its transaction, then the next one's first records
    (pipelined), and died before either reached the log whole: the next processor's
    records land lower than predicted. The replica drops only what was handed over."""
    seen = Seen(replica)
    replica.apply(committed(0, [("a", 1, 0)]))  # PROGRESS at 1
    replica.apply_live([unit(1, 1, 3, [("b", 1, 1)])], ())  # predicted 3, PROGRESS 4
    replica.apply_live([unit(2, 3, 6, [("c", 1, 2), ("d", 1, 3)])], ())  # predicted 6-7
    replica.apply_live((), (), ended=True)
    # The dead run's records never landed; the next run commits from offset 3 (b and c,
    # d again, then e, f, g which are new) and so on: offsets 3..9, PROGRESS at 9.
    replica.apply(
        committed(3, [("b", 1, 1), ("c", 1, 2), ("d", 1, 3), ("e", 1, 4), ("f", 1, 5), ("g", 1, 6)])
    )
    assert seen.values() == [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1), ("f", 1), ("g", 1)]
