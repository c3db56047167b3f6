"""KafkaDelivery: one delivery callback for a whole submit, reports matched to records."""

from __future__ import annotations

from confluent_kafka import KafkaError

from processor.errors import BrokerError, MessageTooLargeError
from processor.log.kafka.writer import KafkaDelivery
from tests.unit.log_records import LogRecord


def report(topic: str, partition: int, key: bytes | None, offset: int) -> LogRecord:
    """What the producer hands the delivery callback (the parts KafkaDelivery reads)."""
    return LogRecord(topic, partition, offset, key, b"value")


def test_reports_in_partition_order_give_each_record_its_offset() -> None:
    delivery = KafkaDelivery(1000)
    for key, partition in ((b"a", 0), (b"b", 1), (b"c", 0), (b"d", 1)):
        delivery.expect("T", key, partition)
    delivery.seal()
    assert not delivery.wait(0)
    for reported in (report("T", 1, b"b", 7), report("T", 0, b"a", 3), report("T", 1, b"d", 8)):
        delivery.reported(None, reported)
    assert not delivery.wait(0)
    delivery.reported(None, report("T", 0, b"c", 4))
    assert delivery.wait(0)
    assert delivery.results() == [("T", 0, 3), ("T", 1, 7), ("T", 0, 4), ("T", 1, 8)]


def test_a_report_out_of_order_is_matched_by_its_key() -> None:
    delivery = KafkaDelivery(1000)
    for key in (b"a", b"b", b"c"):
        delivery.expect("T", key, 0)
    delivery.seal()
    for key, offset in ((b"b", 11), (b"c", 12), (b"a", 10)):
        delivery.reported(None, report("T", 0, key, offset))
    assert delivery.wait(0)
    assert delivery.results() == [("T", 0, 10), ("T", 0, 11), ("T", 0, 12)]


def test_failures_and_refusals_keep_their_places() -> None:
    delivery = KafkaDelivery(1000)
    delivery.expect("T", b"a", 0)
    refused = delivery.expect("T", b"b", 0)
    delivery.expect("T", b"c", 0)
    delivery.unexpect(refused, "T", 0, BrokerError("queue full"))
    delivery.seal()
    delivery.reported(None, report("T", 0, b"a", 5))
    delivery.reported(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), report("T", 0, b"c", -1))
    assert delivery.wait(0)
    first, second, third = delivery.results()
    assert first == ("T", 0, 5)
    assert isinstance(second, BrokerError)
    assert isinstance(third, MessageTooLargeError)


def test_an_empty_submit_is_done_at_once() -> None:
    delivery = KafkaDelivery(1000)
    delivery.seal()
    assert delivery.wait(0)
    assert delivery.results() == []
