"""A queue command's answer (processor/queues/answers.py) and the service waiting for it
(processor/subscriptions/queue_answers.py): the request id rides on the command record,
the answer decodes to its count, and an acknowledgement's count is the sum of the
answers of the partitions it went to."""

from __future__ import annotations

import threading
import time

import pytest

from processor.log.records import LogRecord
from processor.queues.answers import answer, decode_answer, request_headers, request_of
from processor.queues.commands import Command, CommandKind, decode_delivery, delivery_headers
from processor.subscriptions.queue_answers import AwaitedAnswers

DELIVERIES = "orders.queue-deliveries"


def _answer_record(request: str, count: int, partition: int = 0) -> LogRecord:
    key, value, headers = answer(request, count)
    return LogRecord(DELIVERIES, partition, 7, key, value, headers)


def test_a_command_carries_its_request_id_and_a_plain_one_none() -> None:
    _value, headers = Command(CommandKind.ACK, None, "s", bookmarks=("t/0/1",)).encode()
    assert request_of(headers) is None
    assert request_of(headers + request_headers("s#4")) == "s#4"


def test_an_answer_decodes_to_its_count_and_a_delivery_is_no_answer() -> None:
    record = _answer_record("s#4", 3)
    assert record.key() == b"s#4"
    assert decode_answer(record.value(), record.headers()) == 3
    assert decode_answer(b"0", answer("s#5", 0)[2]) == 0
    lease = delivery_headers("lease", b"t/0/1", 100, 1)
    assert decode_answer(b"{}", lease) is None
    with pytest.raises(ValueError, match="invalid literal"):
        decode_answer(b"", answer("s#4", 1)[2])


def test_an_answer_read_as_a_delivery_names_no_subscription_of_its_service() -> None:
    """A hub that does not know answers sees a delivery of kind "result" whose key is not
    one of its subscriptions (``<service>/<n>``): it leaves it alone."""
    waiting = AwaitedAnswers("svc")
    request = waiting.expect([0])
    record = _answer_record(request, 1)
    delivery = decode_delivery(record.key(), record.value(), record.headers())
    assert delivery.kind == "result"
    assert not delivery.subscription.startswith("svc/")


def test_the_count_is_the_sum_of_every_partition_written() -> None:
    waiting = AwaitedAnswers("svc")
    request = waiting.expect([0, 2])
    other = waiting.expect([1])

    def answers() -> None:
        time.sleep(0.05)
        assert waiting.take(_answer_record(request, 2, partition=0))
        assert waiting.take(_answer_record("svc#99", 5, partition=2))  # no one waits: dropped
        assert waiting.take(_answer_record(other, 4, partition=1))
        assert waiting.take(_answer_record(request, 1, partition=2))

    thread = threading.Thread(target=answers)
    thread.start()
    assert waiting.wait(request, time.monotonic() + 10) == (3, frozenset())
    thread.join()
    assert waiting.wait(other, time.monotonic()) == (4, frozenset())
    assert len(waiting) == 0


def test_a_partition_that_does_not_answer_is_named() -> None:
    waiting = AwaitedAnswers("svc")
    request = waiting.expect([0, 1])
    assert waiting.take(_answer_record(request, 2, partition=1))
    assert not waiting.take(
        LogRecord(DELIVERIES, 0, 8, b"svc/1", b"", delivery_headers("lease", b"t/0/1", None, 1))
    )
    assert waiting.wait(request, time.monotonic() + 0.05) == (2, frozenset({0}))
    assert len(waiting) == 0
