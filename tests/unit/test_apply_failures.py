"""The applier on its own (memory store, a recording producer): per-record failures go to
the dead-letter topic and the batch goes on; duplicate detection by (publisher, sequence)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
import pytest

from processor import changelog
from processor.changelog.commands import PUBLISHER_HEADER, SEQUENCE_HEADER
from processor.engine.apply import ERROR_HEADERS, Applier, Route
from processor.engine.headers import publish_options, sequenced
from processor.engine.partition import PartitionState, make_writers
from processor.engine.transaction import Transaction
from processor.errors import InvalidSequenceError
from processor.keys import key_function, partition_for
from processor.messages import codec_for
from processor.state.memory import MemoryStore
from processor.topology.model import KeyGeneratorSpec, SowTopic
from tests.unit.log_records import LogRecord
from tests.unit.produced import Produced

ORDERS = SowTopic("ORDERS", keys=("/id",))


def fussy_generator(topic: SowTopic, options: Mapping[str, Any]) -> Callable[[Any], str]:
    """A custom KeyGenerator that raises on messages marked ``bad``."""

    def generate(message: Any) -> str:
        if message.get("bad"):
            raise RuntimeError("no key today")
        return str(message["id"])

    return generate


def flaky_generator(topic: SowTopic, options: Mapping[str, Any]) -> Callable[[Any], str]:
    """A custom KeyGenerator whose first call fails and the others work."""
    calls = [0]

    def generate(message: Any) -> str:
        calls[0] += 1
        if calls[0] == 1:
            raise TimeoutError("the key service did not answer")
        return str(message["id"])

    return generate


def surrogate_generator(topic: SowTopic, options: Mapping[str, Any]) -> Callable[[Any], str]:
    """A custom KeyGenerator that returns text with no UTF-8 form."""
    return lambda message: "\udc80"


def _state(topic: SowTopic, partition: int = 0) -> PartitionState:
    return PartitionState(
        topic=topic,
        partition=partition,
        store=MemoryStore(),
        codec=codec_for(topic),
        key_function=key_function(topic),
        writers=make_writers(topic, partition),
    )


def _applier(
    topic: SowTopic, partitions: int = 1
) -> tuple[Applier, list[PartitionState], Produced]:
    produced = Produced()
    applier = Applier(produced, "dead-letter")
    states = [_state(topic, p) for p in range(partitions)]
    for state in states:
        p = state.partition
        applier.routes[(topic.kafka_topic, p)] = Route(state, topic.kafka_topic, True)
        applier.routes[(topic.repartition_topic, p)] = Route(state, topic.repartition_topic, False)
    return applier, states, produced


def _publish(
    topic: SowTopic,
    offset: int,
    message: dict[str, Any],
    sequence: tuple[str, str] | None = None,
    key: bytes | None = None,
    partition: int = 0,
) -> LogRecord:
    if key is None:
        key_of = key_function(topic)
        assert key_of is not None
        key = key_of(message).encode()
    headers = None
    if sequence is not None:
        headers = [
            (PUBLISHER_HEADER, sequence[0].encode()),
            (SEQUENCE_HEADER, sequence[1].encode()),
        ]
    return LogRecord(topic.kafka_topic, partition, offset, key, orjson.dumps(message), headers)


def _texts(produced: Produced, topic: SowTopic) -> list[str]:
    return [
        orjson.loads(changelog.decode(value).data)["text"]
        for _, value, _, _, _ in produced.to(topic.changelog_topic)
        if value is not None
    ]


def test_a_repeated_sequence_is_discarded_and_its_offset_still_committed() -> None:
    applier, [state], produced = _applier(ORDERS)
    transaction = Transaction(0, 1000, produce=applier.produce)
    offsets = applier.apply(
        transaction,
        [
            _publish(ORDERS, 0, {"id": 1, "text": "a"}, ("p1", "1")),
            _publish(ORDERS, 1, {"id": 1, "text": "a again"}, ("p1", "1")),
            _publish(ORDERS, 2, {"id": 2, "text": "b"}, ("p1", "5")),
            _publish(ORDERS, 3, {"id": 3, "text": "older"}, ("p1", "4")),
            _publish(ORDERS, 4, {"id": 3, "text": "c"}, ("p2", "1")),
            _publish(ORDERS, 5, {"id": 4, "text": "plain"}),
        ],
    )
    assert _texts(produced, ORDERS) == ["a", "b", "c", "plain"]
    assert applier.duplicates == 2
    assert offsets == {(ORDERS.kafka_topic, 0): 6}
    assert [batch.state for batch in transaction.batches] == [state]
    assert state.publishers.snapshot() == {"p1": 5, "p2": 1}
    assert state.publishers.changed == {"p1": 5, "p2": 1}


def test_malformed_sequence_headers_are_dead_lettered_with_the_reason() -> None:
    applier, [state], produced = _applier(ORDERS)
    bad = [("p1", "seven"), ("", "3")]
    applier.apply(
        Transaction(0, 1000, produce=applier.produce),
        [_publish(ORDERS, i, {"id": i, "text": "x"}, seq) for i, seq in enumerate(bad)]
        + [_publish(ORDERS, 2, {"id": 2, "text": "fine"}, ("p1", "7"))],
    )
    dead = produced.to("dead-letter")
    assert [dict(h)[ERROR_HEADERS[0]] for *_, h in dead] == [b"invalid-sequence"] * 2
    assert b"decimal" in dict(dead[0][4])[ERROR_HEADERS[1]]
    assert _texts(produced, ORDERS) == ["fine"]
    assert state.publishers.snapshot() == {"p1": 7}


def test_a_re_keyed_record_is_checked_on_its_input_partition_only() -> None:
    """The publisher's order holds on the partition it wrote to; the copy that comes back
    from the repartition topic carries the headers but is not checked again."""
    topic = SowTopic("ORDERS", keys=("/id",), partitions=2)
    applier, states, produced = _applier(topic, partitions=2)
    message = {"id": 1, "text": "re-keyed"}
    key_of = key_function(topic)
    assert key_of is not None
    sow_key = key_of(message).encode()
    home = partition_for(sow_key, 2)
    foreign = 1 - home
    applier.apply(
        Transaction(0, 1000, produce=applier.produce),
        [_publish(topic, 0, message, ("p1", "1"), b"foreign", foreign)],
    )
    [(_, value, key, partition, headers)] = produced.to(topic.repartition_topic)
    assert (key, partition) == (sow_key, home)
    assert states[foreign].publishers.snapshot() == {"p1": 1}
    # The home partition already applied p1's sequence 3 from its own input.
    local = next(
        m
        for i in range(2, 50)
        if partition_for(key_of(m := {"id": i, "text": "direct"}).encode(), 2) == home
    )
    applier.apply(
        Transaction(0, 1000, produce=applier.produce),
        [_publish(topic, 0, local, ("p1", "3"), None, home)],
    )
    back = LogRecord(topic.repartition_topic, home, 0, key, value, headers)
    applier.apply(Transaction(0, 1000, produce=applier.produce), [back])
    assert _texts(produced, topic) == ["direct", "re-keyed"]
    assert applier.duplicates == 0


def test_a_key_generator_that_raises_is_dead_lettered_and_the_batch_goes_on() -> None:
    topic = SowTopic("GEN", key_generator=KeyGeneratorSpec(f"{__name__}:fussy_generator"))
    applier, [state], produced = _applier(topic)
    records = [
        LogRecord(topic.kafka_topic, 0, 0, b"1", b'{"id": 1, "bad": true, "text": "x"}'),
        LogRecord(topic.kafka_topic, 0, 1, b"2", b'{"id": 2, "text": "kept"}'),
    ]
    transaction = Transaction(0, 1000, produce=applier.produce)
    applier.apply(transaction, records)
    [(_, value, key, _, headers)] = produced.to("dead-letter")
    reason = dict(headers)
    assert reason[ERROR_HEADERS[0]] == b"key-generation-failed"
    assert b"RuntimeError: no key today" in reason[ERROR_HEADERS[1]]
    assert (reason["sow.source.topic"], reason["sow.source.offset"]) == (b"GEN", b"0")
    assert (key, value) == (b"1", records[0].value())
    assert _texts(produced, topic) == ["kept"]
    assert list(transaction.batch(state).writes) == [b"2"]


def test_an_unexpected_failure_of_one_record_is_dead_lettered_with_the_exception() -> None:
    """A key generator that fails once and then works (a flaky lookup): the failure cannot
    be pinned on a step, so the record is dead-lettered with the exception as it was."""
    topic = SowTopic("GEN", key_generator=KeyGeneratorSpec(f"{__name__}:flaky_generator"))
    applier, [state], produced = _applier(topic)
    transaction = Transaction(0, 1000, produce=applier.produce)
    applier.apply(
        transaction,
        [
            LogRecord(topic.kafka_topic, 0, 0, b"1", b'{"id": 1, "text": "x"}'),
            LogRecord(topic.kafka_topic, 0, 1, b"2", b'{"id": 2, "text": "y"}'),
        ],
    )
    [(*_, headers)] = produced.to("dead-letter")
    assert dict(headers)[ERROR_HEADERS[0]] == b"processing-failed"
    assert dict(headers)[ERROR_HEADERS[1]] == b"TimeoutError: the key service did not answer"
    assert list(transaction.batch(state).writes) == [b"2"]


def test_bad_key_texts_and_expirations_are_dead_lettered_with_their_reason() -> None:
    surrogate = SowTopic("GEN", key_generator=KeyGeneratorSpec(f"{__name__}:surrogate_generator"))
    applier, [state], produced = _applier(surrogate)
    applier.apply(
        Transaction(0, 1000, produce=applier.produce),
        [LogRecord(surrogate.kafka_topic, 0, 0, b"k", b'{"id": 1}')],
    )
    [(*_, headers)] = produced.to("dead-letter")
    assert dict(headers)[ERROR_HEADERS[0]] == b"key-generation-failed"
    assert b"UnicodeEncodeError" in dict(headers)[ERROR_HEADERS[1]]

    blobs = SowTopic("BLOBS", message_type="binary", expiration_s=0)
    applier, [state], produced = _applier(blobs)
    infinite = [("sow.expiration", b"inf")]
    transaction = Transaction(0, 1000, produce=applier.produce)
    applier.apply(transaction, [LogRecord(blobs.kafka_topic, 0, 0, b"QQ==", b"\x01", infinite)])
    [(*_, headers)] = produced.to("dead-letter")
    assert b"not a finite number" in dict(headers)[ERROR_HEADERS[1]]
    assert transaction.batch(state).writes == {}


def test_sequence_headers_parse_only_as_a_pair_of_name_and_decimal() -> None:
    state = _state(ORDERS)
    assert publish_options(None, state, 0) == (None, None, None)
    headers = [(PUBLISHER_HEADER, b"pub"), (SEQUENCE_HEADER, b"0042"), ("sow.correlation_id", b"c")]
    assert publish_options(headers, state, 0) == (None, "c", ("pub", 42))
    assert sequenced(headers) == ("pub", 42)
    assert sequenced([("other", b"x")]) is None
    for broken in (
        [(SEQUENCE_HEADER, b"1")],
        [(PUBLISHER_HEADER, b"pub")],
        [(PUBLISHER_HEADER, b"pub"), (SEQUENCE_HEADER, b"-1")],
        [(PUBLISHER_HEADER, b"\xff"), (SEQUENCE_HEADER, b"1")],
    ):
        with pytest.raises(InvalidSequenceError):
            sequenced(broken)


def test_publisher_records_and_progress_round_trip() -> None:
    key, value = changelog.publisher_record("prices feed", 12345678901234567890)
    assert key == changelog.PUBLISHER_PREFIX + b"prices feed"
    assert key.startswith(changelog.CONTROL_PREFIX)
    assert changelog.parse_publisher_record(key, value) == ("prices feed", 12345678901234567890)
    with pytest.raises(ValueError, match="not a publisher control record"):
        changelog.parse_publisher_record(changelog.PROGRESS_KEY, b"1")
    plain = changelog.encode_progress([("ORDERS", 0, 10)])
    assert plain == b'{"log":[["ORDERS",0,10]]}'
    assert changelog.decode_progress(plain) == [("ORDERS", 0, 10)]
    assert changelog.decode_progress_publishers(plain) == {}
    legacy = b'{"log":[["ORDERS",0,10]],"publishers":{"p1":7}}'
    assert changelog.decode_progress_publishers(legacy) == {"p1": 7}
