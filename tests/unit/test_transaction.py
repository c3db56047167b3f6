"""The transaction object: it owns the batch's cache, checks its status on every call,
and hands every change to the topic's listeners as a ChangeEvent."""

from __future__ import annotations

from typing import Any

import pytest

from processor.changelog import POSITION_HEADER, REASON_HEADER, EnvelopeWriter
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.partition import PartitionState, make_writers
from processor.engine.transaction import (
    PartitionBatch,
    Transaction,
    TransactionStatus,
    retrying,
)
from processor.errors import TransactionStateError
from processor.keys import key_function
from processor.messages import codec_for
from processor.state.memory import MemoryStore
from processor.topology.model import SowTopic
from tests.unit.produced import Produced

TOPIC = SowTopic("ORDERS", keys=("/id",))
WRITER = EnvelopeWriter("ORDERS", "json", "ORDERS", 0)


def _state() -> PartitionState:
    return PartitionState(
        topic=TOPIC,
        partition=0,
        store=MemoryStore(),
        codec=codec_for(TOPIC),
        key_function=key_function(TOPIC),
        writers=make_writers(TOPIC, 0),
    )


class Recorder:
    """A change listener that keeps what it is told, and each batch it listened to."""

    def __init__(self, needs_old: bool) -> None:
        self.needs_old = needs_old
        self.events: list[ChangeEvent] = []
        self.batches: list[PartitionBatch] = []

    def listen(self, batch: PartitionBatch) -> Listener:
        self.batches.append(batch)
        return self.events.extend


def test_reads_see_the_batch_before_the_store_and_the_store_is_untouched() -> None:
    state = _state()
    old = WRITER.encode(0, b"a", b'{"id": 1}', 1, 1)
    state.store.write({b"a": old, b"b": old}, {})
    transaction = Transaction(1, 1000, produce=Produced())
    batch = transaction.batch(state)
    new = WRITER.encode(1, b"a", b'{"id": 1, "v": 2}', 2, 2)
    batch.write(b"a", new, ChangeReason.PUBLISH, "ORDERS", 1)
    batch.write(b"b", None, ChangeReason.DELETE, "ORDERS", 2)
    assert (batch.lookup(b"a"), batch.lookup(b"b")) == (new, None)
    assert dict(batch.items()) == {b"a": new}
    assert state.store.get(b"b") == old
    assert transaction.batch(state) is batch
    assert transaction.batches == [batch]


@pytest.mark.parametrize("end", ["fail", "complete"])
def test_an_ended_transaction_refuses_every_call(end: str) -> None:
    state = _state()
    transaction = Transaction(7, 1000)
    batch = transaction.batch(state)
    if end == "fail":
        transaction.fail()
    else:
        transaction.advance(TransactionStatus.STARTED, TransactionStatus.PREPARED)
        transaction.advance(TransactionStatus.PREPARED, TransactionStatus.COMPLETE)
    calls = [
        lambda: batch.write(b"a", None, ChangeReason.DELETE, "ORDERS", 1),
        lambda: batch.lookup(b"a"),
        lambda: list(batch.items()),
        lambda: batch.reached("ORDERS", 2),
        batch.flush,
        lambda: transaction.batch(state),
    ]
    for call in calls:
        with pytest.raises(TransactionStateError, match="transaction 7 is"):
            call()


def test_listeners_get_each_change_with_old_new_position_and_reason() -> None:
    state = _state()
    first = WRITER.encode(0, b"a", b'{"id": 1}', 1, 1)
    state.store.write({b"a": first}, {})
    wants_old, blind = Recorder(needs_old=True), Recorder(needs_old=False)
    transaction = Transaction(1, 1000, {"ORDERS": (wants_old, blind)}, Produced())
    batch = transaction.batch(state)
    second = WRITER.encode(5, b"a", b'{"id": 1, "v": 2}', 2, 2, 9000)
    batch.write(b"a", second, ChangeReason.PUBLISH, "ORDERS", 5, 9000)
    batch.write(b"a", None, ChangeReason.EXPIRE, "ORDERS.sow-changelog", -1)
    assert wants_old.events == []  # handed over when the commit begins
    transaction.flush()
    assert wants_old.batches == blind.batches == [batch]
    assert wants_old.events == [
        ChangeEvent("ORDERS", b"a", first, second, ("ORDERS", 0, 5), ChangeReason.PUBLISH),
        ChangeEvent(
            "ORDERS", b"a", second, None, ("ORDERS.sow-changelog", 0, -1), ChangeReason.EXPIRE
        ),
    ]
    assert blind.events is not wants_old.events
    assert [e.expiration_ms() for e in blind.events] == [9000, None]


def test_a_topic_without_listeners_makes_no_events() -> None:
    recorder = Recorder(needs_old=True)
    transaction = Transaction(1, 1000, {"OTHER": (recorder,)}, Produced())
    transaction.batch(_state()).write(b"a", None, ChangeReason.DELETE, "ORDERS", 1)
    transaction.flush()
    assert recorder.events == []


def test_an_event_decodes_its_expiration_when_not_told() -> None:
    envelope = WRITER.encode(3, b"k", b"{}", 1, 1, 4242)
    event = ChangeEvent("ORDERS", b"k", None, envelope, ("c", 0, 9), ChangeReason.PUBLISH)
    assert event.expiration_ms() == 4242
    assert hash(event) == hash(
        ChangeEvent("ORDERS", b"k", None, envelope, ("c", 0, 9), ChangeReason.PUBLISH)
    )


def test_a_write_produces_its_changelog_record_and_a_tombstone_says_why() -> None:
    state, produced = _state(), Produced()
    transaction = Transaction(1, 1000, produce=produced)
    batch = transaction.batch(state)
    envelope = WRITER.encode(3, b"a", b'{"id": 1}', 1, 1)
    batch.write(b"a", envelope, ChangeReason.PUBLISH, "ORDERS", 3)
    batch.write(b"a", None, ChangeReason.DELETE, "ORDERS", 4)
    batch.write(b"b", None, ChangeReason.EXPIRE, "ORDERS.sow-changelog", -1)
    batch.write(b"c", None, ChangeReason.EXPIRE, "ORDERS", 7)  # a queue's expired message
    changelog = TOPIC.changelog_topic
    assert produced.records == [
        (changelog, envelope, b"a", 0, None),
        (
            changelog,
            None,
            b"a",
            0,
            [(REASON_HEADER, b"deleted"), (POSITION_HEADER, b"ORDERS/0/4")],
        ),
        (changelog, None, b"b", 0, [(REASON_HEADER, b"expired")]),
        (
            changelog,
            None,
            b"c",
            0,
            [(REASON_HEADER, b"expired"), (POSITION_HEADER, b"ORDERS/0/7")],
        ),
    ]
    assert batch.writes == {b"a": None, b"b": None, b"c": None}


def test_a_write_whose_record_cannot_be_produced_changes_nothing() -> None:
    def too_large(*_: Any) -> None:
        raise ValueError("over the size limit")

    recorder = Recorder(needs_old=True)
    transaction = Transaction(1, 1000, {"ORDERS": (recorder,)}, too_large)
    batch = transaction.batch(_state())
    with pytest.raises(ValueError, match="size limit"):
        batch.write(b"a", b"x", ChangeReason.PUBLISH, "ORDERS", 1)
    assert batch.writes == {}
    assert not batch.pending


def test_the_transactions_produce_drains_and_retries_while_the_queue_is_full() -> None:
    sent: list[tuple[Any, ...]] = []
    drained: list[None] = []
    full = [2]  # the first two calls find the queue full

    def raw_produce(*args: Any, **kwargs: Any) -> None:
        if full[0]:
            full[0] -= 1
            raise BufferError("queue full")
        sent.append((*args, kwargs))

    produce = retrying(raw_produce, lambda: drained.append(None))
    produce("T", b"v", b"k", 3, None)
    assert sent == [("T", b"v", b"k", 3, {})]
    assert len(drained) == 2
    produce("T", None, b"k", 3, [("h", b"1")])
    assert sent[-1] == ("T", None, b"k", 3, {"headers": [("h", b"1")]})
    assert len(drained) == 2
