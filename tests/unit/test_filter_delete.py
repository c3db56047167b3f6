"""sow_delete by filter as the processor applies it: the partition's matching records
(this transaction's writes included) become tombstones carrying the command's position;
a command that cannot be evaluated goes to the dead-letter topic and the batch goes on."""

from __future__ import annotations

from typing import Any

import orjson

from processor.changelog import POSITION_HEADER
from processor.changelog.commands import FILTER_DELETE_KEY, FILTER_HEADER
from processor.engine.apply import ERROR_HEADERS, Applier, Route
from processor.engine.partition import PartitionState, make_writers
from processor.engine.transaction import Transaction
from processor.keys import key_function
from processor.messages import codec_for
from processor.state.memory import MemoryStore
from processor.topology.model import SowTopic
from tests.unit.log_records import LogRecord
from tests.unit.produced import Produced

TOPIC = SowTopic("ORDERS", keys=("/id",))


def log_record(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
) -> LogRecord:
    """A record of the input topic's partition 0."""
    return LogRecord(TOPIC.kafka_topic, 0, offset, key, value, headers)


def applier_with(messages: list[dict[str, Any]]) -> tuple[Applier, PartitionState, Produced]:
    produced = Produced()
    applier = Applier(produced, "dead-letter")
    state = PartitionState(
        topic=TOPIC,
        partition=0,
        store=MemoryStore(),
        codec=codec_for(TOPIC),
        key_function=key_function(TOPIC),
        writers=make_writers(TOPIC, 0),
    )
    applier.routes[(TOPIC.kafka_topic, 0)] = Route(state, TOPIC.kafka_topic, True)
    key_of = key_function(TOPIC)
    assert key_of is not None
    publishes = [log_record(i, key_of(m).encode(), orjson.dumps(m)) for i, m in enumerate(messages)]
    committed = Transaction(0, 1000, produce=applier.produce)
    applier.apply(committed, publishes)
    state.store.write(committed.batch(state).writes, {})  # committed
    produced.records.clear()
    return applier, state, produced


def delete_command(offset: int, text: str) -> LogRecord:
    return log_record(offset, FILTER_DELETE_KEY, None, [(FILTER_HEADER, text.encode())])


def test_filter_delete_tombstones_matching_records_with_the_command_position() -> None:
    applier, state, produced = applier_with([{"id": i, "qty": i} for i in range(10)])
    key_of = key_function(TOPIC)
    assert key_of is not None
    uncommitted = {"id": 42, "qty": 42}
    transaction = Transaction(1, 2000, produce=applier.produce)
    applier.apply(
        transaction,
        [
            log_record(10, key_of(uncommitted).encode(), orjson.dumps(uncommitted)),
            delete_command(11, "/qty >= 7"),
        ],
    )
    batch = transaction.batch(state)
    tombstones = produced.tombstones()
    assert all(key is not None and batch.lookup(key) is None for key, _ in tombstones)
    assert len(tombstones) == 4  # 7, 8, 9 and the uncommitted 42
    assert all((POSITION_HEADER, b"ORDERS/0/11") in headers for _, headers in tombstones)
    assert sum(1 for k, v in batch.items()) == 7


def test_a_filter_that_cannot_be_evaluated_is_dead_lettered_and_changes_nothing() -> None:
    applier, state, produced = applier_with([{"id": i} for i in range(3)])
    transaction = Transaction(1, 2000, produce=applier.produce)
    applier.apply(transaction, [delete_command(3, "SUM(/id) > 1"), delete_command(4, "/id = 0")])
    dead = [r for r in produced.records if r[0] == "dead-letter"]
    assert len(dead) == 1
    reason = dict(dead[0][4])[ERROR_HEADERS[1]]
    assert b"SUM" in reason
    assert applier.dead_lettered == 1
    assert sum(1 for _ in transaction.batch(state).items()) == 2  # the second command still ran


def test_a_damaged_stored_record_dead_letters_the_command_not_the_processor() -> None:
    applier, state, produced = applier_with([{"id": 1}])
    state.store.write({b"123": b"not an envelope"}, {})
    transaction = Transaction(1, 2000, produce=applier.produce)
    applier.apply(transaction, [delete_command(1, "1=1")])
    dead = [r for r in produced.records if r[0] == "dead-letter"]
    assert len(dead) == 1
    assert b"filter delete failed" in dict(dead[0][4])[ERROR_HEADERS[1]]
    assert transaction.batch(state).writes == {}  # nothing half-applied
