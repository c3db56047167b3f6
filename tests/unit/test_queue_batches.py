"""Fewer records per queue message (issue 34): the leases a run gives one subscription
are one deliveries record (processor/queues/commands.py), and the states a run changes
are one state record, a batch deleted once none of its states is a message's latest
(processor/queues/state.py, state_batches.py); the replica reads them back."""

from __future__ import annotations

from typing import Any

import pytest

from processor.queues.commands import (
    ENDED,
    LEASES_RECORD_BYTES,
    decode_deliveries,
    delivery_headers,
    encode_leases,
)
from processor.queues.state import (
    STATES,
    MessageState,
    batch_key,
    batch_number,
    decode_states,
    encode_states,
)
from processor.queues.state_batches import BATCH_BYTES, StateBatches
from processor.replica.queue_states import QueueStates


def test_a_subscription_s_leases_are_one_record() -> None:
    leases = [(False, b"t/0/1", 1234, 1, b"one"), (True, b"t/0/2", None, 3, b"")]
    records = encode_leases(leases)
    assert len(records) == 1
    value, headers = records[0]
    found = decode_deliveries(b"svc/1", value, headers)
    assert [(d.subscription, d.kind, d.bookmark) for d in found] == [
        ("svc/1", "lease", "t/0/1"),
        ("svc/1", "barrier", "t/0/2"),
    ]
    assert [(d.deadline_ms, d.deliveries, d.envelope) for d in found] == [
        (1234, 1, b"one"),
        (None, 3, b""),
    ]


def test_leases_are_split_only_past_the_record_size() -> None:
    big = b"x" * (LEASES_RECORD_BYTES // 3)
    leases = [(False, b"t/0/%d" % n, None, 1, big) for n in range(5)]
    records = encode_leases(leases)
    assert len(records) == 3  # two thirds with their heads fit a record, three do not
    decoded = [d for value, headers in records for d in decode_deliveries(b"s", value, headers)]
    assert [d.bookmark for d in decoded] == [f"t/0/{n}" for n in range(5)]
    alone = encode_leases([(False, b"t/0/9", None, 1, b"y" * (2 * LEASES_RECORD_BYTES))])
    assert len(alone) == 1  # a lease larger than the limit is a record by itself


def test_other_deliveries_records_are_read_as_one_delivery() -> None:
    (ended,) = decode_deliveries(b"svc/1", b"", delivery_headers(ENDED, b"", None, 0))
    assert (ended.subscription, ended.kind) == ("svc/1", ENDED)
    value, headers = encode_leases([(False, b"t/0/1", None, 1, b"abc")])[0]
    with pytest.raises(ValueError, match="cut short"):
        decode_deliveries(b"s", value[:-1], headers)


def test_states_round_trip_and_batches_sort_by_number() -> None:
    states = {b"t/0/1": MessageState(1, 0, "s/1", 99), b"t/0/2": MessageState(2, 1)}
    decoded = decode_states(encode_states(states))
    assert [(b, MessageState.decode(raw)) for b, raw in decoded] == list(states.items())
    assert batch_key(7).startswith(STATES)
    assert batch_number(batch_key(7)) == 7
    assert batch_key(255) < batch_key(256)
    with pytest.raises(ValueError, match="cut short"):
        decode_states(encode_states(states)[:-3])


class _Batch:
    """The part of a PartitionBatch that StateBatches uses: put_state."""

    def __init__(self) -> None:
        self.written: list[tuple[bytes, bytes | None]] = []

    def put_state(self, key: bytes, value: bytes | None) -> None:
        self.written.append((key, value))


def _batches() -> tuple[StateBatches, _Batch, Any]:
    batch = _Batch()
    return StateBatches(), batch, batch


def test_one_record_per_flush_and_a_batch_goes_with_its_last_state() -> None:
    kept, batch, as_batch = _batches()
    kept.change(b"a", MessageState(1, holder="s"))
    kept.change(b"b", MessageState(1, holder="s"))
    kept.change(b"a", MessageState(1, holder="s", deadline_ms=5))  # the latest counts
    kept.flush(as_batch)
    assert batch.written == [(batch_key(0), batch.written[0][1])]
    assert (
        dict(decode_states(batch.written[0][1] or b""))[b"a"]
        == MessageState(1, holder="s", deadline_ms=5).encode()
    )
    kept.flush(as_batch)  # nothing changed: nothing written
    assert len(batch.written) == 1
    kept.change(b"a", MessageState(2))  # returned: batch 0 still holds b's latest
    kept.flush(as_batch)
    assert [key for key, _ in batch.written] == [batch_key(0), batch_key(1)]
    kept.drop(b"b", as_batch)  # b left: batch 0 holds nobody's latest state
    assert batch.written[-1] == (batch_key(0), None)
    kept.change(b"c", MessageState(1))
    kept.drop(b"c", as_batch)  # leased and acknowledged in one run: never written
    kept.drop(b"a", as_batch)
    assert batch.written[-1] == (batch_key(1), None)
    kept.flush(as_batch)
    assert len(batch.written) == 4
    assert len(kept) == 0


def test_restore_takes_each_message_s_latest_state_and_names_unused_batches() -> None:
    old, new = MessageState(1, holder="s"), MessageState(2, 1)
    items = [
        (b"\x00" + batch_key(3), encode_states({b"a": new})),
        (b"\x00" + batch_key(1), encode_states({b"a": old, b"b": old, b"gone": old})),
        (b"\x00" + batch_key(2), encode_states({b"gone": new})),
    ]
    kept, batch, as_batch = _batches()
    states, unused = kept.restore(items, lambda bookmark: bookmark != b"gone")
    assert states == {b"a": new, b"b": old}
    assert unused == [2]
    kept.delete(unused, as_batch)
    assert batch.written == [(batch_key(2), None)]
    kept.drop(b"b", as_batch)  # batch 1's last latest state
    assert batch.written[-1] == (batch_key(1), None)
    kept.change(b"c", MessageState(1))
    kept.flush(as_batch)
    assert batch.written[-1][0] == batch_key(4)  # after every batch restored


def test_the_replica_reads_a_batch_and_a_removal() -> None:
    states = QueueStates()
    leased, returned = MessageState(1, 0, "s/1", 50), MessageState(1)
    states.note_batch("Q", 0, encode_states({b"t/0/1": leased, b"t/0/2": leased}))
    states.note_batch("Q", 0, encode_states({b"t/0/2": returned}))
    assert states.get("Q", b"t/0/1") == leased
    assert states.get("Q", b"t/0/2") == returned
    states.note("Q", 0, b"t/0/1", None)  # the message's tombstone
    assert states.get("Q", b"t/0/1") is None
    states.note_batch("Q", 0, b"\x00")  # unreadable: left out
    assert states.get("Q", b"t/0/2") == returned


def test_states_are_split_only_past_the_record_size() -> None:
    kept, batch, as_batch = _batches()
    holder = "h" * 1000
    count = 3 * BATCH_BYTES // 1050
    for n in range(count):
        kept.change(b"t/0/%d" % n, MessageState(1, holder=holder))
    kept.flush(as_batch)
    sizes = [len(value or b"") for _, value in batch.written]
    assert len(sizes) in (3, 4)
    assert all(size <= BATCH_BYTES for size in sizes)
    assert [key for key, _ in batch.written] == [batch_key(n) for n in range(len(sizes))]
    written = [(key, value or b"") for key, value in batch.written]
    states, unused = StateBatches().restore(written, lambda _bookmark: True)
    assert len(states) == count
    assert unused == []
