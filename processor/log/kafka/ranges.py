"""Reading fixed offset ranges of Kafka partitions: the Spark reader's and the bookmark
replays' access to the log (:class:`KafkaRangeReader` is a
:class:`~processor.log.ChangelogReader`).

A Spark job plans on the driver (how many partitions, where each ends) and reads on the
executors (one offset range per task). Both halves are here so that only this package
imports confluent-kafka. Ends are decided from fetched positions (partition EOF and the
high watermark of fetch responses), never from ListOffsets alone, which some brokers
(Tansu) under-report (ARCHITECTURE.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping, Sequence
from typing import Any, cast

from confluent_kafka.admin import AdminClient

from processor.errors import BrokerError, KafkaSecurityError, UnknownTopicError
from processor.log import Record
from processor.log.kafka.readers import KafkaPartitionReader
from processor.log.kafka.settings import Refusals, client_settings, list_topics, refusal


def partition_count(
    bootstrap: str,
    topic: str,
    settings: Mapping[str, Any] | None = None,
    timeout_s: float = 20.0,
) -> int:
    """How many partitions ``topic`` has; UnknownTopicError when it does not exist,
    KafkaSecurityError when the broker refuses this client or its reading ``topic``.
    ``settings``: extra client settings (security and the like)."""
    refusals = Refusals("the reader", settings)
    config: dict[str, Any] = {**client_settings(bootstrap), **(settings or {})}
    config["error_cb"] = refusals
    admin = AdminClient(config)
    try:
        found = list_topics(admin, refusals, timeout_s, topic).topics.get(topic)
    except KafkaSecurityError:
        raise
    except BrokerError as exc:
        raise BrokerError(f"cannot read the metadata of {topic} at {bootstrap}: {exc}") from exc
    refused = (
        None
        if found is None or found.error is None
        else refusal(found.error, refusals.who, "Read", topic)
    )
    if refused is not None:
        raise refused
    if found is None or found.error is not None or not found.partitions:
        raise UnknownTopicError(
            f"topic {topic} does not exist at {bootstrap}; check the topic name (a SOW "
            f"topic's changelog is '<kafka topic>.sow-changelog') and the bootstrap servers"
        )
    return len(found.partitions)


class KafkaRangeReader:
    """Reads offset ranges ``[start, end)`` of partitions, read_committed, group-less.

    Not thread-safe: one per task. Offsets of transaction markers are never returned, so
    a range may yield fewer records than ``end - start``.
    """

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        self._reader = KafkaPartitionReader(bootstrap, **extra)

    def end_offset(self, topic: str, partition: int) -> int:
        """The partition's end (next offset to be written, past committed transactions),
        confirmed by a fetch: ListOffsets gives a start close to it, and the records
        from there are read to the end a fetch reports."""
        estimate = self._reader.end_offset_estimate(topic, partition)
        start = max(estimate or 0, 0)
        if start > 0:
            # Some brokers report the base offset of the last batch: read from just
            # before it so a fetch confirms the true end.
            start -= 1
        for _ in self._reader.read_to_end(topic, partition, start):
            pass
        return max(self._reader.last_end_offset, start)

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The earliest offset the partition still retains (its low watermark)."""
        return self._reader.earliest_offset(topic, partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose record time is at or after ``timestamp_ms`` (the end
        offset when there is none)."""
        found = self._reader.offset_for_time(topic, partition, timestamp_ms)
        return found if found >= 0 else self.end_offset(topic, partition)

    def read_range(
        self, topic: str, partition: int, start: int, end: int
    ) -> Generator[Sequence[Record], None, None]:
        """Batches of the records at offsets ``start <= offset < end``, in order.

        Stops at ``end`` or at the partition's end, whichever comes first.
        """
        if start >= end:
            return
        batches = cast(
            Generator[Sequence[Record], None, None],
            self._reader.read_to_end(topic, partition, start),
        )
        with contextlib.closing(batches):
            for batch in batches:
                if batch[-1].offset() < end:
                    yield batch
                    continue
                inside = [r for r in batch if r.offset() < end]
                if inside:
                    yield inside
                return

    def close(self) -> None:
        self._reader.close()
