"""The processor's input: a consumer group member over the input topics (:class:`KafkaInputLog`),
and the end offsets of partitions from the broker (:class:`KafkaEndOffsets`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    OffsetSpec,
)

from processor.errors import (
    BrokerError,
    ConfigurationError,
    KafkaSecurityError,
)
from processor.log import (
    OnAssign,
    OnRevoke,
    Record,
    TopicPartitionKey,
)
from processor.log.kafka.ownership import fence_static_processor, refuse_beside_members
from processor.log.kafka.settings import (
    CLASSIC,
    COMMITTED,
    CONSUMER,
    Refusals,
    client_settings,
    consumer_settings,
    refusal,
    seek,
)

log = logging.getLogger(__name__)


class KafkaInputLog:
    """The processor's consumer (:class:`processor.log.InputLog`).

    ``static=False``: a consumer-group member. ``static=True``: one processor instance
    takes every partition of its topics with ``assign`` and joins no group, which skips
    the group join (seconds on some brokers) at start. Exactly-once is unchanged: offsets
    still go through the transactions with this consumer's group metadata (generation -1,
    which brokers accept from group-less consumers) and are read back with ``committed``,
    and the transactional id still fences an older instance. ``static_id`` is the group's
    static transactional id: a static instance refuses to start beside group members, and
    a member fences any static instance each time it is given partitions
    (:mod:`processor.log.kafka.ownership`).

    A group member's rebalances follow its ``group_protocol``. ``classic`` is eager: every
    rebalance revokes the whole assignment (``unassign``), then hands over a whole new one
    (``assign``). ``consumer`` (KIP-848) is incremental: a callback carries only the
    partitions added or removed, and the member keeps fetching the others throughout;
    librdkafka then takes only ``incremental_assign`` and ``incremental_unassign``.
    (confluent-kafka has no ``rebalance_protocol()``: the protocol configured decides.)
    Partitions held for recovery are never in librdkafka's assignment until resumed, so
    a revocation unassigns only the fetching ones.
    """

    #: How often librdkafka reports statistics (the source of :meth:`lag`).
    STATISTICS_INTERVAL_MS = 1000

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        static: bool = False,
        group_protocol: str = CLASSIC,
        static_id: str = "",
        **extra: Any,
    ) -> None:
        self._bootstrap, self._group, self._static_id = bootstrap, group_id, static_id
        self._lag: dict[TopicPartitionKey, int] = {}
        self._group_state = ""
        self._refusals = Refusals("the processor's consumer", extra)
        settings = {
            "group.id": group_id,
            "statistics.interval.ms": self.STATISTICS_INTERVAL_MS,
            "stats_cb": self._note_statistics,
            "error_cb": self._refusals,
            **extra,
        }
        # A static instance joins no group: its protocol is irrelevant, and classic keeps
        # its group-less offset commits (generation -1) as they always were.
        protocol = CLASSIC if static else group_protocol
        try:
            self._consumer = Consumer(consumer_settings(bootstrap, protocol, **settings))
        except KafkaException as exc:
            raise ConfigurationError(
                f"the Kafka client refused the processor's consumer configuration "
                f"(group_protocol={protocol}): {exc.args[0].str()}; under the consumer "
                "protocol the broker sets session.timeout.ms, heartbeat.interval.ms and "
                "the assignor, so SOW_KAFKA_PROPERTIES must not set them"
            ) from exc
        self._static = static
        #: KIP-848's incremental rebalances (False: eager, or no group at all).
        self._incremental = not static and protocol == CONSUMER
        #: Partitions assigned and fetching, and those held until ``resume``.
        self._active: dict[TopicPartitionKey, TopicPartition] = {}
        self._held: dict[TopicPartitionKey, TopicPartition] = {}
        #: Set by ``close``: rebalance callbacks while leaving only keep librdkafka's books.
        self._closing = False

    @property
    def incremental(self) -> bool:
        """True when rebalances add and remove partitions one change at a time (KIP-848)."""
        return self._incremental

    def subscribe(self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke) -> None:
        def assigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if self._closing:  # leaving the group: take nothing new on
                if self._incremental:
                    consumer.incremental_assign([])
                else:
                    consumer.assign([])
                    self._active.clear()
                    self._held.clear()
                return
            if partitions and self._static_id:
                # Before their committed offsets are read: a static processor's last
                # transaction is over (committed or aborted) once this returns.
                fence_static_processor(self._bootstrap, self._static_id)
            self._assign(partitions, on_assign)

        def revoked(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if not self._closing:  # the caller dropped every partition before closing
                on_revoke([(tp.topic, tp.partition) for tp in partitions])
            if not self._incremental:
                consumer.unassign()
                self._active.clear()
                self._held.clear()
                return
            fetching = []
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._held.pop(key, None)
                if self._active.pop(key, None) is not None:
                    fetching.append(TopicPartition(tp.topic, tp.partition))
            # Called even with nothing to unassign: the callback must change the
            # assignment itself, or confluent-kafka unassigns all it was given, held
            # partitions included (which librdkafka refuses: never assigned).
            consumer.incremental_unassign(fetching)

        if self._static:
            # The producer holds the static transactional id by now: a member that joins
            # from here on fences it (processor.log.kafka.ownership).
            refuse_beside_members(self._bootstrap, self._group)
            self._assign(self._all_partitions(topics), on_assign)
        else:
            # Lost partitions (a member fenced out of its group) come to ``revoked`` too.
            self._consumer.subscribe(list(topics), on_assign=assigned, on_revoke=revoked)

    def _all_partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        try:
            found = self._consumer.list_topics(timeout=30).topics
        except KafkaException as exc:
            raise BrokerError(f"cannot list the topics to assign: {exc}") from exc
        partitions: list[TopicPartition] = []
        for topic in topics:
            metadata = found.get(topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise BrokerError(
                    f"topic {topic} does not exist on the broker (static assignment reads "
                    "its partitions at start); create the topics first (sow serve does)"
                )
            partitions.extend(TopicPartition(topic, p) for p in sorted(metadata.partitions))
        return partitions

    def _assign(self, partitions: list[TopicPartition], on_assign: OnAssign) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        committed: dict[TopicPartitionKey, int] = {}
        if partitions:
            try:
                found = self._consumer.committed(partitions, 30)
            except KafkaException as exc:
                raise self._refused(exc.args[0]) or BrokerError(
                    f"cannot read committed offsets: {exc}"
                ) from exc
            committed = {(tp.topic, tp.partition): tp.offset for tp in found}
        starts = on_assign(keys, committed)
        held = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            start = starts.get(key, COMMITTED)
            if start is None:
                held.append(tp)
                start = COMMITTED
            if start == COMMITTED:
                # Start at the offset just read, so no second look-up delays the start.
                start = committed.get(key, -1)
                if start < 0:
                    continue  # none committed: auto.offset.reset
            tp.offset = start
        # Held partitions join the assignment when resumed, rather than being assigned
        # paused: a paused partition's fetch resumes up to a second late.
        fetching = {(tp.topic, tp.partition): tp for tp in partitions if tp not in held}
        if self._incremental:
            self._held.update(((tp.topic, tp.partition), tp) for tp in held)
            self._active.update(fetching)
            # Called even when empty: the callback must change the assignment itself
            # (else confluent-kafka assigns everything given, held partitions included).
            self._consumer.incremental_assign(list(fetching.values()))
            return
        self._held = {(tp.topic, tp.partition): tp for tp in held}
        self._active = fetching
        self._consumer.assign(list(self._active.values()))

    def resume(self, starts: Mapping[TopicPartitionKey, int | None]) -> None:
        resumed = []
        for key, start in starts.items():
            tp = self._held.pop(key, None)
            if tp is None:
                continue  # revoked while held: no longer this consumer's to fetch
            if start is not None:
                tp.offset = start
            resumed.append(tp)
        if not resumed:
            return
        try:
            if self._static or self._incremental:
                self._consumer.incremental_assign(resumed)
            else:
                # The eager group protocol allows no incremental change: assign everything
                # again, the active partitions at their positions (after the last record
                # consume returned; the caller has committed everything it consumed).
                active = list(self._active.values())
                for tp, now in zip(active, self._consumer.position(active), strict=True):
                    if now.offset >= 0:
                        tp.offset = now.offset
                self._consumer.assign(active + resumed)
        except KafkaException as exc:
            raise BrokerError(f"cannot resume {sorted(starts)}: {exc}") from exc
        self._active.update(((tp.topic, tp.partition), tp) for tp in resumed)

    def consume(self, max_records: int, timeout_s: float) -> Sequence[Record]:
        records = self._consumer.consume(max_records, timeout_s)
        self._refusals.check()
        if records and any(map(type(records[0]).error, records)):  # in C: cheap per record
            for record in records:
                error = record.error()
                refused = None if error is None else self._refused(error, record.topic())
                if refused is not None:
                    raise refused
        return cast(list[Record], records)

    def _refused(self, error: Any, topic: str | None = None) -> KafkaSecurityError | None:
        """What an authorization refusal of this consumer means (None: not one)."""
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return refusal(error, self._refusals.who, "Read", self._group)
        return refusal(error, self._refusals.who, "Read", topic or "")

    def rewind(self, starts: Mapping[TopicPartitionKey, int]) -> None:
        for (topic, partition), offset in sorted(starts.items()):
            seek(self._consumer, topic, partition, offset, "again from offset")

    def group_metadata(self) -> object:
        return self._consumer.consumer_group_metadata()

    def lag(self) -> Mapping[TopicPartitionKey, int]:
        return self._lag

    def quiet(self, topic: str, partition: int) -> bool:
        """From the high watermark the last fetch of the partition brought (cached, no
        request) and the position after the records returned, or the start offset it
        was assigned when none was returned yet."""
        key, tp = (topic, partition), TopicPartition(topic, partition)
        try:
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
            (position,) = self._consumer.position([tp])
        except KafkaException:
            return False
        offset = position.offset
        if offset < 0:
            assigned = self._active.get(key)
            offset = -1 if assigned is None else assigned.offset
        return high == 0 or 0 <= high <= offset

    def group_state(self) -> str:
        return "" if self._static else self._group_state

    def _note_statistics(self, text: str) -> None:
        """librdkafka's statistics (called inside ``consume``): per fetching partition,
        the last stable offset (read_committed's end) less the next offset to return
        (for one with nothing returned yet, the next offset to fetch less the records
        queued; one not fetched yet is left out)."""
        lag: dict[TopicPartitionKey, int] = {}
        statistics = json.loads(text)
        group = statistics.get("cgrp") or {}
        state, joined = group.get("state", "up"), group.get("join_state", "steady")
        self._group_state = "" if (state, joined) == ("up", "steady") else f"{state}/{joined}"
        for topic, figures in statistics.get("topics", {}).items():
            for partition, p in figures.get("partitions", {}).items():
                end, position = p.get("ls_offset", -1), p.get("app_offset", -1)
                if position < 0:  # nothing returned yet: where fetching is, less the queue
                    fetched = p.get("next_offset", -1)
                    position = fetched - p.get("fetchq_cnt", 0) if fetched >= 0 else -1
                if partition != "-1" and end >= 0 and position >= 0:
                    lag[(topic, int(partition))] = max(end - position, 0)
        self._lag = lag  # replaced whole: readers on other threads see one or the other

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(RuntimeError):  # already closed
            self._consumer.close()


class KafkaEndOffsets:
    """Where partitions end, from an admin client of its own (:class:`processor.log.EndOffsets`)."""

    def __init__(self, bootstrap: str) -> None:
        # Silent: its callers judge an unanswered call themselves (the watchdog names the
        # broker), and an admin client cannot be closed, so one outliving its broker
        # would print "Connection refused" until it is collected.
        self._admin = AdminClient(
            {**client_settings(bootstrap), "client.id": "sow-end-offsets", "log_level": 0}
        )

    def ends(
        self, partitions: Sequence[TopicPartitionKey], timeout_s: float
    ) -> Mapping[TopicPartitionKey, int] | None:
        if not partitions:  # nothing to ask about: ask whether the broker answers at all
            try:
                self._admin.list_topics(timeout=timeout_s)
            except Exception:  # librdkafka's KafkaException or a timeout: no answer
                return None
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(t, p): latest for t, p in partitions}
        try:
            futures = self._admin.list_offsets(
                asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
            )
            return {
                (tp.topic, tp.partition): int(future.result(timeout_s).offset)
                for tp, future in futures.items()
            }
        except Exception:  # no answer in time, or an error: the broker did not answer
            # The admin client does not refresh its metadata when ListOffsets fails: after
            # a broker restart it would send the partitions' old leader epochs for good
            # (FENCED_LEADER_EPOCH at every call, librdkafka 2.16). A metadata request
            # takes the new ones.
            with contextlib.suppress(Exception):
                self._admin.list_topics(timeout=timeout_s)
            return None

    def close(self) -> None:
        """Nothing to release: the admin client goes with the object."""
