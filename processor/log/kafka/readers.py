"""Group-less readers of changelog partitions: one partition from an offset
(:class:`KafkaPartitionReader`) and the live tail of many (:class:`KafkaChangelogTail`)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from processor.errors import (
    BrokerError,
)
from processor.log import (
    Record,
    TailState,
    TopicPartitionKey,
    lost_log_level,
)
from processor.log.kafka.settings import Refusals, consumer_settings, refusal, seek

log = logging.getLogger(__name__)


class KafkaPartitionReader:
    """Reads partitions to their end with a group-less consumer (restores, replays)."""

    #: Records per batch ``read_to_end`` yields at most.
    BATCH = 20000

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        # Restores read whole partitions: fewer, bigger fetches.
        fetch = {"max.partition.fetch.bytes": 16 * 1024 * 1024, "fetch.min.bytes": 1}
        self._refusals = Refusals("a partition reader", extra)
        self._consumer = _groupless(
            bootstrap, "sow-reader-unused", {**fetch, **extra}, self._refusals
        )
        self.last_end_offset = -1

    def read_to_end(self, topic: str, partition: int, start: int) -> Iterator[Sequence[Record]]:
        tp = TopicPartition(topic, partition, start)
        self._consumer.assign([tp])
        position = start
        try:
            while True:
                batch: list[Any] = self._consumer.consume(self.BATCH, 0.05)
                self._refusals.check()
                if not batch and position > 0:
                    # Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE (then
                    # auto.offset.reset); some brokers (Tansu) answer with nothing, forever.
                    # The high watermark of their fetch responses is right: trust it.
                    _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                    if 0 <= high < position:
                        self.last_end_offset = int(high)
                        return
                records: list[Record] = batch
                done = False
                if batch and any(map(type(batch[0]).error, batch)):
                    records = [m for m in batch if m.error() is None]
                    for message in batch:
                        error = message.error()
                        if error is None or _unused_group(error):
                            continue
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise refusal(error, self._refusals.who, "Read", topic) or (
                                BrokerError(f"cannot read {topic}[{partition}]: {error}")
                            )
                        self.last_end_offset = int(message.offset() or 0)
                        done = True
                if records:
                    position = records[-1].offset() + 1
                    yield records
                if done:
                    return
        finally:
            self._consumer.unassign()

    def end_offset_estimate(self, topic: str, partition: int) -> int | None:
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), 5)
        except KafkaException:
            return None
        return int(high)

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The partition's low watermark: the earliest offset it still retains."""
        try:
            low, _ = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
        except KafkaException as exc:
            raise BrokerError(
                f"cannot read the earliest retained offset of {topic}[{partition}]: {exc}"
            ) from exc
        return max(int(low), 0)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose record is at or after ``timestamp_ms`` (else the end).

        The broker's answer is only a hint, checked both ways: some brokers (Tansu)
        answer offset 0 for a time past the last record, or an offset past records that
        are at or after the time. Records before the hint are read back (in growing
        steps) while they are not older than asked, then the partition is scanned
        forward to the first record that is not older.
        """
        found = self._consumer.offsets_for_times(
            [TopicPartition(topic, partition, timestamp_ms)], 10
        )
        hint = int(found[0].offset)
        if hint < 0:  # "no record at or after the time": checked from the end
            end = max(self.end_offset_estimate(topic, partition) or 0, 0)
            start = self._back_to(topic, partition, end, timestamp_ms)
            if start == end:
                return OFFSET_END
        else:
            start = self._back_to(topic, partition, hint, timestamp_ms)
        for batch in self.read_to_end(topic, partition, start):
            for record in batch:
                if record.timestamp()[1] >= timestamp_ms:
                    return record.offset()
        return max(self.last_end_offset, start)

    def _back_to(self, topic: str, partition: int, hint: int, timestamp_ms: int) -> int:
        """An offset at or before the first record at or after ``timestamp_ms``, going
        back from ``hint`` while the records before it are not older."""
        earliest = self.earliest_offset(topic, partition)
        start, step = hint, 64
        while start > earliest:
            before = max(start - step, earliest)
            newer = False
            for batch in self.read_to_end(topic, partition, before):
                newer = any(r.offset() < start and r.timestamp()[1] >= timestamp_ms for r in batch)
                if newer or batch[-1].offset() >= start - 1:
                    break
            if not newer:
                return start
            start, step = before, step * 2
        return start

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._consumer.close()


class KafkaChangelogTail:
    """A group-less, read_committed consumer following changelog partitions
    (:class:`processor.log.ChangelogTail`).

    Ends come from fetches only: partition EOF events (emitted in order after a
    partition's records, once per end reached) and the statistics librdkafka emits every
    ``STATS_INTERVAL_MS`` (each partition's last stable offset and high watermark from
    fetch responses, and how long ago its leader last answered). A partition whose high
    watermark stays below the fetch position (a broker that lost its log and answers a
    fetch past the end with nothing) is read again from offset 0.

    Not thread-safe: one thread calls every method.
    """

    STATS_INTERVAL_MS = 100
    FETCH_WAIT_MS = 10

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        # Some brokers (Tansu) answer a fetch only when its wait is over: the wait bounds
        # how long a committed change waits to be fetched (measured: ~14 ms median at
        # 50, ~3-4 ms at 10, for little CPU).
        settings = {
            "fetch.wait.max.ms": self.FETCH_WAIT_MS,
            "statistics.interval.ms": self.STATS_INTERVAL_MS,
            "stats_cb": self._on_stats,
        }
        self._refusals = Refusals("a changelog reader", extra)
        self._consumer = _groupless(
            bootstrap, "sow-replica-unused", {**settings, **extra}, self._refusals
        )
        self._position: dict[TopicPartitionKey, int] = {}
        self._end: dict[TopicPartitionKey, int] = {}
        self._at_end: dict[TopicPartitionKey, bool] = {}
        self._confirmed: dict[TopicPartitionKey, float | None] = {}
        #: When ``consume`` last returned a record of the partition (time.monotonic()).
        self._returned_at: dict[TopicPartitionKey, float] = {}
        #: Partitions seen past their end in the last statistics (read again from 0 when
        #: seen twice in a row).
        self._past_end: set[TopicPartitionKey] = set()
        self._rewind: set[TopicPartitionKey] = set()

    def assign(self, partitions: Sequence[tuple[str, int, int]]) -> None:
        for topic, partition, offset in partitions:
            key = (topic, partition)
            self._position[key] = offset
            self._end[key] = -1
            self._at_end[key] = False
            self._confirmed[key] = None
        self._consumer.assign([TopicPartition(t, p, o) for t, p, o in partitions])

    def consume(self, max_records: int, timeout_s: float) -> Sequence[Record]:
        if self._rewind:
            self._read_again()
        try:
            batch: list[Any] = self._consumer.consume(max_records, timeout_s)
        except KafkaException as exc:
            raise BrokerError(f"cannot read changelogs: {exc}") from exc
        self._refusals.check()
        records: list[Record] = []
        now = time.monotonic()
        for message in batch:
            error = message.error()
            key = (message.topic(), message.partition())
            if error is None:
                records.append(message)
                self._position[key] = int(message.offset()) + 1
                self._at_end[key] = False
                self._returned_at[key] = now
            elif error.code() == KafkaError._PARTITION_EOF:
                offset = int(message.offset())
                self._position[key] = offset
                self._end[key] = offset
                self._at_end[key] = True
                self._confirmed[key] = now
            elif _unused_group(error):
                continue
            elif (refused := refusal(error, self._refusals.who, "Read", key[0])) is not None:
                raise refused
            elif error.fatal():
                raise BrokerError(f"cannot read changelog {key[0]}[{key[1]}]: {error}")
            else:
                log.warning("reading changelog %s[%d]: %s (retrying)", key[0], key[1], error)
        return records

    def seek(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self._position[key] = offset
        self._end[key] = -1
        self._at_end[key] = False
        self._past_end.discard(key)
        self._rewind.discard(key)
        seek(self._consumer, topic, partition, offset, "from offset")

    def _read_again(self) -> None:
        for topic, partition in list(self._rewind):
            log.log(
                lost_log_level(),
                "changelog %s[%d] ends before offset %d, where this replica reads from: the "
                "broker lost or truncated the log; reading it again from offset 0",
                topic,
                partition,
                self._position[(topic, partition)],
            )
            self.seek(topic, partition, 0)
        self._rewind.clear()

    def _on_stats(self, raw: str) -> None:
        """Confirm partitions from the fetch state in librdkafka's statistics.

        ``ts`` is librdkafka's monotonic clock in microseconds (the clock
        ``time.monotonic()`` reads); a leader's ``rxidle`` is how long before ``ts`` its
        connection last received a response. A confirmation counts only when that
        response came after the partition's last returned record.
        """
        try:
            stats = json.loads(raw)
            taken = stats["ts"] / 1e6
            answered = {
                b["nodeid"]: taken - b["rxidle"] / 1e6
                for b in stats["brokers"].values()
                if b.get("rxidle", -1) >= 0
            }
            topics = stats["topics"]
        except (ValueError, KeyError, TypeError):
            log.debug("unreadable consumer statistics ignored")
            return
        past_end: set[TopicPartitionKey] = set()
        for key, position in self._position.items():
            part = topics.get(key[0], {}).get("partitions", {}).get(str(key[1]))
            if part is None or part.get("fetch_state") != "active":
                continue
            fetched_at = answered.get(part.get("leader"))
            stable = part.get("ls_offset", -1)
            high = part.get("hi_offset", -1)
            if stable < 0 or fetched_at is None:
                continue
            self._end[key] = stable
            if 0 <= high < part.get("next_offset", -1):
                past_end.add(key)
            if position >= stable and fetched_at > self._returned_at.get(key, 0.0):
                previous = self._confirmed[key]
                if previous is None or fetched_at > previous:
                    self._confirmed[key] = fetched_at
        self._rewind |= past_end & self._past_end
        self._past_end = past_end

    def states(self) -> Mapping[TopicPartitionKey, TailState]:
        return {
            key: TailState(position, self._end[key], self._at_end[key], self._confirmed[key])
            for key, position in self._position.items()
        }

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._consumer.close()


#: librdkafka counts a record's framing against ``message.max.bytes`` too.


def _groupless(
    bootstrap: str, group: str, settings: dict[str, Any], refusals: Refusals
) -> Consumer:
    """A read_committed consumer that joins no group (``group`` only names it) and
    reports partition ends, with ``settings`` on top; ``refusals`` hears its errors."""
    return Consumer(
        consumer_settings(
            bootstrap,
            **{"group.id": group, "enable.partition.eof": True, "error_cb": refusals, **settings},
        )
    )


def _unused_group(error: KafkaError) -> bool:
    """A group-less consumer still looks its group's coordinator up once (librdkafka
    wants a group.id): a principal without Describe on that group, which it never
    uses, is refused that look-up, harmlessly."""
    return bool(error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED)
