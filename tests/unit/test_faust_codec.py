"""processor.faust without a broker: the envelope codec, a SOW table applying changelog
records (upserts, tombstones, control records, resets) and refusing writes, and the line
its preflight logs when Kafka refuses it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import faust
import orjson
import pytest
from faust.serializers.codecs import get_codec

from processor import changelog
from processor.errors import (
    ConfigurationError,
    EnvelopeError,
    KafkaSecurityError,
    UnsupportedError,
)
from processor.faust import CODEC_NAME, EnvelopeCodec, SowTable, sow_table
from processor.faust.preflight import refusal
from processor.topology.model import SowTopic

ORDERS = SowTopic("ORDERS", keys=("/id",), partitions=2)


def envelope(data: bytes, message_type: str = "json", sow_key: str = "1") -> bytes:
    return changelog.encode(
        changelog.Envelope("ORDERS", message_type, "ORDERS", 0, 7, sow_key, data, 1, 2)
    )


def test_the_registered_codec_decodes_an_envelope_by_its_message_type() -> None:
    codec = get_codec(CODEC_NAME)
    assert codec.loads(envelope(b'{"id": 1, "qty": [2]}')) == {"id": 1, "qty": [2]}
    assert codec.loads(envelope(b"raw\x00bytes", "binary")) == b"raw\x00bytes"
    with pytest.raises(EnvelopeError):
        codec.loads(b'{"log": []}')  # a PROGRESS control value is no envelope
    with pytest.raises(ConfigurationError, match="EnvelopeCodec"):
        codec.loads(envelope(b"\x02", "avro"))
    with pytest.raises(UnsupportedError, match="read-only"):
        codec.dumps({"id": 1})


def test_a_codec_bound_to_a_topic_uses_the_topic_codec() -> None:
    codec = EnvelopeCodec(topic=SowTopic("T", message_type="nvfix", keys=("/id",)))
    assert codec.loads(envelope(b"id=1\x01sym=IBM\x01", "nvfix")) == {"id": 1, "sym": "IBM"}


def record(partition: int, offset: int, key: bytes, value: bytes | None) -> Any:
    message = SimpleNamespace(
        topic=ORDERS.changelog_topic, partition=partition, offset=offset, key=key, value=value
    )
    return SimpleNamespace(message=message, key=key, value=value)


@pytest.fixture
def table() -> SowTable:
    app = faust.App("unit-faust", processing_guarantee="exactly_once", web_enabled=False)
    return sow_table(app, ORDERS)


def test_the_table_applies_upserts_tombstones_and_resets_and_skips_control(
    table: SowTable,
) -> None:
    assert table.changelog_topic.get_topic_name() == ORDERS.changelog_topic
    assert not table.changelog_topic.internal  # Faust never creates the SOW's topic
    progress = changelog.encode_progress([("ORDERS", 0, 3)])
    table.apply_changelog_batch(
        [
            record(0, 0, b"1", envelope(orjson.dumps({"id": 1}), sow_key="1")),
            record(1, 0, b"2", envelope(orjson.dumps({"id": 2}), sow_key="2")),
            record(1, 1, b"3", envelope(orjson.dumps({"id": 3}), sow_key="3")),
            record(0, 1, changelog.PROGRESS_KEY, progress),
            record(0, 2, *changelog.publisher_record("p", 4)),
            record(1, 2, b"2", None),
            record(0, 3, b"1", envelope(orjson.dumps({"id": 1, "v": 2}), sow_key="1")),
            record(0, 4, b"9", b"not an envelope"),
        ]
    )
    assert dict(table.items()) == {"1": {"id": 1, "v": 2}, "3": {"id": 3}}
    assert table.undecodable == 1
    table.apply_changelog_batch([record(1, 3, changelog.RESET_KEY, b"reset")])
    assert dict(table.items()) == {"1": {"id": 1, "v": 2}}


def test_the_table_is_read_only(table: SowTable) -> None:
    table.apply_changelog_batch([record(0, 0, b"1", envelope(b'{"id": 1}'))])
    with pytest.raises(UnsupportedError):
        table["2"] = {"id": 2}
    with pytest.raises(UnsupportedError):
        del table["1"]
    with pytest.raises(UnsupportedError):
        table.clear()
    assert dict(table.items()) == {"1": {"id": 1}}


def test_a_table_needs_an_app_that_reads_committed_records() -> None:
    app = faust.App("unit-faust-alo", web_enabled=False)
    with pytest.raises(ConfigurationError, match="exactly_once"):
        sow_table(app, ORDERS)


def test_a_refusal_names_the_permission_the_table_lacks() -> None:
    refused = refusal(30, "the faust table (sasl user 'u')", "my-app")
    assert isinstance(refused, KafkaSecurityError)
    assert str(refused).startswith(
        "Kafka refused the faust table (sasl user 'u'): GROUP_AUTHORIZATION_FAILED on Group "
        "'my-app' -- grant Read on Group 'my-app' (docs/security.md"
    )
    topic = str(refusal(29, "the faust table", ORDERS.changelog_topic))
    assert f"TOPIC_AUTHORIZATION_FAILED on Topic '{ORDERS.changelog_topic}'" in topic
    assert refusal(0, "the faust table", "my-app") is None
    assert refusal(3, "the faust table", "my-app") is None  # unknown topic: Faust's to say
