"""A SOW topic's upsert-table view (docs/upsert-tables.md): what the topology says about it.

The processor writes, beside the changelog, a compacted Kafka topic whose records are
keyed by the record (its SowKey, or its Key field values) and hold the stored message as
it is, with a tombstone for every delete, expiry or other removal: a topic that Kafka
Streams (a KTable), ksqlDB (a TABLE), Flink (upsert-kafka), Kafka Connect sinks and plain
consumers read as a table without kafka-sow's envelope (:mod:`processor.upserts`).

In YAML, a SOW topic's ``upsert`` field: ``true`` (the defaults), or a mapping with
``topic`` (the Kafka topic; default ``<kafka_topic>.sow-upsert``) and ``key``
(``sow_key``, the default, or ``fields``). In AMPS XML, the kafka-sow extension elements
``<UpsertTopic>`` (the Kafka topic, or ``true`` for the default name) and ``<UpsertKey>``
inside a SOW ``<Topic>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from processor.errors import ValueFormatError

#: The YAML fields of an ``upsert`` mapping.
UPSERT_FIELDS = ("topic", "key")


class UpsertKey(Enum):
    """What an upsert record's key is: the SowKey's text, or the Key field values."""

    SOW_KEY = "sow_key"
    FIELDS = "fields"


@dataclass(frozen=True, slots=True)
class UpsertSpec:
    """A SOW topic's upsert topic: its Kafka topic (empty: ``<kafka_topic>.sow-upsert``)
    and what its records' keys are."""

    topic: str = ""
    key: UpsertKey = UpsertKey.SOW_KEY


def parse_upsert_key(text: str) -> UpsertKey:
    """``sow_key`` or ``fields``; anything else is a ValueError saying so."""
    try:
        return UpsertKey(text.strip())
    except ValueError:
        raise ValueFormatError(
            f"an upsert key is sow_key (the SowKey's text) or fields (the Key field values), "
            f"got {text.strip()!r}"
        ) from None


def parse_upsert_topic(text: str) -> str:
    """The Kafka topic of an ``<UpsertTopic>`` (``true``: the default name, returned as
    the empty string; ``false`` is refused: leave the element out)."""
    value = text.strip()
    if value.lower() == "true":
        return ""
    if value.lower() == "false":
        raise ValueFormatError(
            "<UpsertTopic> false: leave the element out for a topic without an upsert topic"
        )
    return value
