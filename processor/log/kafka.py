"""confluent-kafka adapters: the only module that talks to Kafka.

Client settings tolerate the Tansu broker's quirks (ARCHITECTURE.md), which are also legal
behaviours of real clusters: short session timeouts so group joins take seconds, and
"caught up" decided from fetched positions (partition EOF) rather than ListOffsets, which
may under-report the end of a partition. The processor's group members speak the classic
consumer protocol or KIP-848's (``group_protocol``, see :func:`consumer_settings`); every
other consumer is group-less.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, cast

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
    OffsetSpec,
)

from processor.errors import (
    BrokerError,
    ConfigurationError,
    FencedError,
    MessageTooLargeError,
    RecordTooLargeError,
    SowError,
    StaleGroupError,
    TransactionTimedOutError,
)
from processor.log import (
    Headers,
    LogRecord,
    OnAssign,
    OnRevoke,
    Record,
    TailState,
    TopicPartitionKey,
    TopicSpec,
)

log = logging.getLogger(__name__)

#: Settings every client gets; quiet librdkafka's connection chatter to errors only.
BASE = {"log_level": 3, "socket.keepalive.enable": True}
#: Properties the deployment adds to every client (security, TLS): set once at start by
#: :func:`use_client_properties`, applied after the product's own settings.
_client_properties: dict[str, str] = {}


def use_client_properties(properties: Mapping[str, str]) -> None:
    """Add ``properties`` (librdkafka names) to every client built from now on, replacing
    any given before (``Settings.kafka_properties``; the processor child gets them too)."""
    _client_properties.clear()
    _client_properties.update(properties)


def client_settings(bootstrap: str) -> dict[str, Any]:
    """What every client gets: the base settings, the broker, the deployment's properties."""
    return {**BASE, "bootstrap.servers": bootstrap, **_client_properties}


#: ``group_protocol`` values: the classic protocol, KIP-848's (Kafka 4.0+).
CLASSIC = "classic"
CONSUMER = "consumer"


def group_settings(group_protocol: str = CLASSIC) -> dict[str, Any]:
    """How a consumer takes part in its group.

    ``classic``: the client-side eager ``range`` assignor, with a short session (a dead
    member is noticed within 6 s) and frequent heartbeats. ``consumer`` (KIP-848): the
    broker owns the session timeout, the heartbeat interval and the assignor, so librdkafka
    refuses those three settings; the broker's ``range`` assignor is asked for instead.
    Both ``range`` assignors co-partition topics of equal partition counts (the input
    topic and its repartition topic: partition p of both goes to the same member).
    """
    if group_protocol == CONSUMER:
        return {"group.protocol": CONSUMER, "group.remote.assignor": "range"}
    if group_protocol != CLASSIC:
        raise ConfigurationError(
            f"group_protocol must be {CLASSIC} or {CONSUMER}, got {group_protocol!r}"
        )
    return {
        "group.protocol": CLASSIC,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range",
    }


def consumer_settings(
    bootstrap: str, group_protocol: str = CLASSIC, **extra: Any
) -> dict[str, Any]:
    """Consumer settings that join groups quickly and read only committed data.
    ``group_protocol`` matters only to a consumer that subscribes (:func:`group_settings`)."""
    settings: dict[str, Any] = {
        **BASE,
        "bootstrap.servers": bootstrap,
        **group_settings(group_protocol),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        # Some brokers (Tansu) answer a fetch only when its wait is over, so the wait bounds
        # how long a new record waits to be fetched: it is the live path's latency budget.
        "fetch.wait.max.ms": 10,
        "queued.min.messages": 200000,
    }
    settings.update(_client_properties)
    settings.update(extra)
    return settings


def producer_settings(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Producer settings for batched, idempotent writes."""
    settings: dict[str, Any] = {
        **BASE,
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 1000000,
        "queue.buffering.max.kbytes": 1048576,
    }
    settings.update(_client_properties)
    settings.update(extra)
    return settings


def ensure_topics(bootstrap: str, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> None:
    """Create missing topics; check existing ones have the partition count asked for."""
    try:
        admin = AdminClient(client_settings(bootstrap))
    except KafkaException as exc:  # the first client a start makes: refuse bad properties
        raise ConfigurationError(
            f"the Kafka client refused its configuration: {exc.args[0].str()}; check the "
            f"properties given in SOW_KAFKA_PROPERTIES ({sorted(_client_properties)})"
        ) from exc
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise BrokerError(f"cannot list topics at {bootstrap}: {exc}") from exc
    missing = []
    for spec in specs:
        found = existing.get(spec.name)
        if found is None or found.error is not None:
            missing.append(spec)
        elif len(found.partitions) != spec.partitions:
            raise BrokerError(
                f"topic {spec.name} has {len(found.partitions)} partitions but the topology "
                f"asks for {spec.partitions}; change the topology or recreate the topic"
            )
    if not missing:
        return
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, 1, config=dict(s.config)) for s in missing],
        operation_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result(timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerError(f"cannot create topic {name}: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    names = {s.name for s in missing}
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=timeout_s).topics
        if all(n in topics and topics[n].error is None for n in names):
            return
        time.sleep(0.1)
    raise BrokerError(f"topics {sorted(names)} did not appear within {timeout_s:.0f}s")


def _close_producer(producer: Producer, timeout_s: float = 5.0) -> None:
    """Deliver what is queued (up to ``timeout_s``), then release the producer's
    connections at once, rather than whenever the object is collected. A producer that
    could not deliver everything is left to the collector (its close would wait on).
    Not for transactional producers (see KafkaTransactionalLog.close)."""
    if producer.flush(timeout_s) == 0:
        with contextlib.suppress(RuntimeError, KafkaException):
            producer.close()


#: Marks "where committed" among start offsets (never a Kafka offset or logical offset).
COMMITTED = -10_000
#: What the group coordinator answers offsets sent with group metadata it has moved past:
#: an older generation (classic) or member epoch (KIP-848; older brokers answer
#: ILLEGAL_GENERATION for it), a member it no longer knows, a rebalance under way.
_STALE_GROUP = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


def _raise_for(exc: KafkaException, what: str) -> NoReturn:
    error = exc.args[0]
    if error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED) or error.fatal():
        raise FencedError(f"{what}: {error}; another processor took over") from exc
    raise BrokerError(f"{what}: {error}") from exc


class KafkaInputLog:
    """The processor's consumer (:class:`processor.log.InputLog`).

    ``static=False``: a consumer-group member. ``static=True``: one processor instance
    takes every partition of its topics with ``assign`` and joins no group, which skips
    the group join (seconds on some brokers) at start. Exactly-once is unchanged: offsets
    still go through the transactions with this consumer's group metadata (generation -1,
    which brokers accept from group-less consumers) and are read back with ``committed``,
    and the transactional id still fences an older instance. Running two static
    instances, or a static one beside group members, on the same group is not supported.

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
        **extra: Any,
    ) -> None:
        self._lag: dict[TopicPartitionKey, int] = {}
        self._group_state = ""
        settings = {
            "group.id": group_id,
            "statistics.interval.ms": self.STATISTICS_INTERVAL_MS,
            "stats_cb": self._note_statistics,
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
                raise BrokerError(f"cannot read committed offsets: {exc}") from exc
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
        return cast(list[Record], self._consumer.consume(max_records, timeout_s))

    def rewind(self, starts: Mapping[TopicPartitionKey, int]) -> None:
        for (topic, partition), offset in sorted(starts.items()):
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                raise BrokerError(
                    f"cannot read {topic}[{partition}] again from offset {offset}: {exc}"
                ) from exc

    def group_metadata(self) -> object:
        return self._consumer.consumer_group_metadata()

    def lag(self) -> Mapping[TopicPartitionKey, int]:
        return self._lag

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


class _CallThread:
    """Runs calls one at a time on a daemon thread of its own, so that a caller can stop
    waiting for one that never returns (the thread is then left to it, and does not keep
    the process from exiting)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[
            tuple[Callable[..., Any], tuple[Any, ...], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            function, args, result = item
            try:
                result.set_result(function(*args))
            except BaseException as exc:  # the caller's to judge
                result.set_exception(exc)

    def call(self, timeout_s: float, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on the thread: its result or exception, or
        concurrent.futures.TimeoutError when it has not returned within ``timeout_s``."""
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((function, args, result))
        return result.result(timeout_s)

    def stop(self) -> None:
        """End the thread after the call it is in, if any (idempotent)."""
        self._calls.put(None)


#: Where the transactional producer's librdkafka log lines go.
_LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")


class _Uninitialised:
    """Transactional producers whose ``init_transactions`` timed out, by transactional id.

    Such a producer goes on asking for its producer id (librdkafka: "retry call to
    resume"). A replacement with the same transactional id would race it: the broker
    answers both once it answers again, and the one answered last fences the other, which
    may be the replacement (seen after a 60 s broker freeze: the new pipeline's producer
    fenced by the one the freeze had timed out, and the processor stopped as if another
    had taken over). So the next producer for that id is this one, resumed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._producers: dict[str, Producer] = {}

    def keep(self, transactional_id: str, producer: Producer) -> None:
        with self._lock:
            self._producers[transactional_id] = producer

    def take(self, transactional_id: str) -> Producer | None:
        with self._lock:
            return self._producers.pop(transactional_id, None)


_UNINITIALISED = _Uninitialised()


class KafkaTransactionalLog:
    """Transactional producer (:class:`processor.log.TransactionalLog`)."""

    #: How long Kafka lets a transaction stay open before aborting it. A processor that
    #: dies mid-transaction holds back every read_committed reader of the partitions the
    #: transaction touched (the query services, restores) until then, unless an instance
    #: with its transactional id starts again first; 10 s, as Kafka Streams uses. (The
    #: embedded Tansu broker never aborts: docs/scaling.md.)
    TRANSACTION_TIMEOUT_MS = 10_000
    #: How much longer than its own timeout a call may take before it counts as hung.
    HANG_MARGIN_S = 2.0

    #: Back-to-back transactions: until the coordinator has written the previous
    #: transaction's markers, the next one's AddPartitionsToTxn / AddOffsetsToTxn /
    #: TxnOffsetCommit are answered CONCURRENT_TRANSACTIONS and retried after
    #: ``retry.backoff.ms``. librdkafka's 100 ms default made every transaction of a
    #: steady stream take ~100 ms (measured on Kafka 4.2: p50 102 ms; with these, 4.6 ms).
    #: The Java producer retries those after 20 ms for the same reason (KAFKA-5477).
    #: SOW_KAFKA_PROPERTIES overrides them.
    RETRY_BACKOFF = {"retry.backoff.ms": 2, "retry.backoff.max.ms": 10}

    def __init__(self, bootstrap: str, transactional_id: str, **extra: Any) -> None:
        backoff = {k: v for k, v in self.RETRY_BACKOFF.items() if k not in _client_properties}
        resumed = _UNINITIALISED.take(transactional_id)
        self._producer = resumed or Producer(
            producer_settings(
                bootstrap,
                **{
                    **backoff,
                    # Its log lines go through Python logging, served by its polls: a
                    # producer abandoned in a hung call (see send_offsets) is never
                    # polled again, so it cannot print "Connection refused" to stderr
                    # after its broker is gone, for as long as the process lives.
                    "logger": _LIBRDKAFKA_LOG,
                    "client.id": "sow-processor",
                    "transactional.id": transactional_id,
                    "transaction.timeout.ms": self.TRANSACTION_TIMEOUT_MS,
                },
                **extra,
            )
        )
        self._tracked: dict[TopicPartitionKey, int] = {}
        self._errors: list[KafkaError] = []
        #: ``time.monotonic()`` of the last ``begin``: the current transaction's age.
        self._began = time.monotonic()
        #: Runs the calls that may hang (``send_offsets``); None once one did.
        self._helper: _CallThread | None = _CallThread("sow-txn-call")
        try:
            self._producer.init_transactions(30)
        except KafkaException as exc:
            self._helper.stop()
            if exc.args[0].retriable() and not exc.args[0].fatal():
                _UNINITIALISED.keep(transactional_id, self._producer)
            _raise_for(exc, f"cannot initialise transactions for {transactional_id}")
        self.raw_produce = self._producer.produce

    def drain(self) -> None:
        self._producer.poll(0.05)

    def produce_error(self, exc: Exception) -> SowError | None:
        """What an exception raised by ``raw_produce`` means: RecordTooLargeError for a
        record over the producer's ``message.max.bytes`` (nothing was queued; the
        transaction is intact), FencedError or BrokerError for other Kafka errors, None
        for an exception that did not come from Kafka."""
        if not isinstance(exc, KafkaException):
            return None
        error = exc.args[0]
        if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            return RecordTooLargeError(f"{error.str()} (over message.max.bytes)")
        try:
            self._raise_for(exc, "cannot produce")
        except SowError as translated:
            return translated
        return None  # pragma: no cover - _raise_for always raises

    def _raise_for(self, exc: KafkaException, what: str) -> NoReturn:
        """Raise what a Kafka error of a transaction means (:func:`_raise_for`), except
        that a fatal error (a fenced epoch among them) on a transaction older than
        ``TRANSACTION_TIMEOUT_MS`` is TransactionTimedOutError: the coordinator aborted
        the transaction and bumped the epoch itself (a broker outage or a stall longer
        than the timeout), which a new producer survives. Another processor fencing this
        one stays FencedError: its InitProducerId ends a *young* transaction. (The local
        age is at least the coordinator's: ``begin`` precedes the transaction's first
        record, where the coordinator's clock starts.)"""
        error = exc.args[0]
        age_s = time.monotonic() - self._began
        fenced = error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
        if (fenced or error.fatal()) and age_s * 1000 >= self.TRANSACTION_TIMEOUT_MS:
            raise TransactionTimedOutError(
                f"{what}: {error}; the transaction was open for {age_s:.1f}s, longer than "
                f"transaction.timeout.ms ({self.TRANSACTION_TIMEOUT_MS / 1000:g}s): the "
                "coordinator aborted it and fenced this producer; a new producer carries on"
            ) from exc
        _raise_for(exc, what)

    def begin(self) -> None:
        self._tracked.clear()
        self._errors.clear()
        self._began = time.monotonic()
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._raise_for(exc, "cannot begin a transaction")

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: Headers | None = None,
    ) -> None:
        self._produce(topic, value, key, partition, headers, None)

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self._errors.append(error)
        else:
            self._tracked[(message.topic(), message.partition())] = message.offset()

    def produce_tracked(self, topic: str, value: bytes | None, key: bytes, partition: int) -> None:
        self._produce(topic, value, key, partition, None, self._on_delivery)

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: Headers | None,
        callback: Any,
    ) -> None:
        while True:
            try:
                if callback is None:
                    self._producer.produce(topic, value, key, partition, headers=cast(Any, headers))
                else:
                    self._producer.produce(
                        topic,
                        value,
                        key,
                        partition,
                        on_delivery=callback,
                        headers=cast(Any, headers),
                    )
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                self._raise_for(exc, f"cannot produce to {topic}")

    def send_offsets(self, offsets: Mapping[TopicPartitionKey, int], group: object) -> None:
        """Add the consumer offsets to the transaction, within the transaction timeout;
        StaleGroupError when the group refused them as sent for an earlier generation or
        member epoch (the transaction must be aborted).

        librdkafka's call can outlive its own timeout for good when the group
        coordinator was down during it (confluentinc/librdkafka#5456: it hung past a
        broker restart), and the poll loop cannot interrupt it. So it runs on this
        producer's helper thread, waited for a little longer than its timeout; one that
        does not return by then leaves the producer unusable: BrokerError, and the
        pipeline restarts with a new producer (whose InitProducerId aborts this one's
        transaction). A transaction cannot outlive its timeout anyway.
        """
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        timeout_s = self.TRANSACTION_TIMEOUT_MS / 1000
        if self._helper is None:
            raise BrokerError("this producer was abandoned after a call that did not return")
        send = self._producer.send_offsets_to_transaction
        try:
            self._helper.call(timeout_s + self.HANG_MARGIN_S, send, tps, group, timeout_s)
        except concurrent.futures.TimeoutError:
            self._helper.stop()
            self._helper = None
            raise BrokerError(
                f"adding the consumer offsets to the transaction did not return within "
                f"{timeout_s + self.HANG_MARGIN_S:g}s (librdkafka can hang there once its "
                "group coordinator was down); abandoning this producer"
            ) from None
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _STALE_GROUP and not error.fatal():
                raise StaleGroupError(
                    f"the group refused the transaction's offsets: {error.str()}"
                ) from exc
            self._raise_for(exc, "cannot add consumer offsets to the transaction")

    def commit(self) -> dict[TopicPartitionKey, int]:
        try:
            self._producer.commit_transaction(60)
        except KafkaException as exc:
            self._raise_for(exc, "cannot commit the transaction")
        self._producer.poll(0)
        if self._errors:
            raise BrokerError(f"a record of the transaction was not delivered: {self._errors[0]}")
        return dict(self._tracked)

    def abort(self) -> None:
        try:
            self._producer.abort_transaction(30)
        except KafkaException as exc:
            self._raise_for(exc, "cannot abort the transaction")

    def close(self) -> None:
        """Deliver what is queued; the connections go when the object is collected.

        Not ``Producer.close()``: it aborts an open transaction first, which after a
        failure may bump the producer's epoch (KIP-360) once the broker answers again and
        so fence the producer that replaced this one; on a fenced producer it may never
        return. Left alive, the producer prints nothing: its librdkafka log lines go
        through Python logging, served only by its polls. A fenced or failed producer's
        flush can raise from a delivery report; the error that ended the pipeline is the
        one to report, so closing never raises."""
        if self._helper is not None:
            self._helper.stop()
        try:
            self._producer.flush(5)
        except Exception as exc:  # closing after a failure must not raise
            log.warning("closing the transactional producer: %r", exc)


class KafkaPartitionReader:
    """Reads partitions to their end with a group-less consumer (restores, replays)."""

    #: Records per batch ``read_to_end`` yields at most.
    BATCH = 20000

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        self._consumer = Consumer(
            consumer_settings(
                bootstrap,
                **{
                    "group.id": "sow-reader-unused",
                    "enable.partition.eof": True,
                    # Restores read whole partitions: fewer, bigger fetches.
                    "max.partition.fetch.bytes": 16 * 1024 * 1024,
                    "fetch.min.bytes": 1,
                    **extra,
                },
            )
        )
        self.last_end_offset = -1

    def read_to_end(self, topic: str, partition: int, start: int) -> Iterator[Sequence[Record]]:
        tp = TopicPartition(topic, partition, start)
        self._consumer.assign([tp])
        position = start
        try:
            while True:
                batch: list[Any] = self._consumer.consume(self.BATCH, 0.05)
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
                        if error is None:
                            continue
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise BrokerError(f"cannot read {topic}[{partition}]: {error}")
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
        self._consumer = Consumer(
            consumer_settings(
                bootstrap,
                **{
                    "group.id": "sow-replica-unused",
                    "enable.partition.eof": True,
                    # Some brokers (Tansu) answer a fetch only when its wait is over: the
                    # wait bounds how long a committed change waits to be fetched
                    # (measured: ~14 ms median at 50, ~3-4 ms at 10, for little CPU).
                    "fetch.wait.max.ms": self.FETCH_WAIT_MS,
                    "statistics.interval.ms": self.STATS_INTERVAL_MS,
                    "stats_cb": self._on_stats,
                    **extra,
                },
            )
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
        try:
            self._consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as exc:
            raise BrokerError(
                f"cannot read changelog {topic}[{partition}] from {offset}: {exc}"
            ) from exc

    def _read_again(self) -> None:
        for topic, partition in list(self._rewind):
            log.warning(
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
RECORD_FRAMING_BYTES = 512
_TOO_LARGE = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD}
)


def _delivery_error(error: KafkaError, topic: str, limit: int) -> SowError:
    if error.code() in _TOO_LARGE:
        return MessageTooLargeError(
            f"the broker refused a record for {topic} as too large ({error.str()}); the "
            f"limit here is {limit:,} bytes: split the message or raise the topic's "
            "max.message.bytes"
        )
    return BrokerError(f"the broker did not accept a record for {topic}: {error.str()}")


class KafkaDelivery:
    """Results of one ``KafkaLogWriter.submit`` (:class:`processor.log.Delivery`).

    One delivery-report callback serves every record of a submit (a callback object per
    record would cost more than the produce itself). The idempotent producer reports a
    partition's records in the order they were produced, so a report is matched to the
    oldest unreported record of its partition; the record's key is checked against the
    report's, and on a mismatch the report goes to the first unreported record with that
    key. Reports arrive on the writer's poller thread, refusals on the submitting thread.
    """

    __slots__ = (
        "_count",
        "_done",
        "_keys",
        "_limit",
        "_lock",
        "_partitions",
        "_reported",
        "_results",
        "_topics",
        "_unreported",
    )

    def __init__(self, limit: int) -> None:
        #: Per record: its offset once delivered, a SowError, a KafkaError, or None.
        self._results: list[Any] = []
        self._keys: list[bytes | None] = []
        self._topics: list[str] = []
        self._partitions: list[int] = []
        #: Per (topic, partition): the records not yet reported, oldest first.
        self._unreported: dict[tuple[str, int], deque[int]] = {}
        self._limit = limit
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._reported = 0
        self._count = -1

    def expect(self, topic: str, key: bytes | None, partition: int) -> int:
        """Note a record about to be produced; its index."""
        index = len(self._results)
        self._results.append(None)
        self._keys.append(key)
        self._topics.append(topic)
        self._partitions.append(partition)
        waiting = self._unreported.get((topic, partition))
        if waiting is None:
            waiting = self._unreported[(topic, partition)] = deque()
        waiting.append(index)
        return index

    def unexpect(self, index: int, topic: str, partition: int, error: SowError) -> None:
        """A noted record the producer refused: never produced, its result is ``error``."""
        self._unreported[(topic, partition)].remove(index)
        self._results[index] = error
        self._finish_one()

    def reported(self, error: KafkaError | None, message: Any) -> None:
        """The delivery report of one record (the producer's callback)."""
        topic, key = message.topic(), message.key()
        waiting = self._unreported.get((topic, message.partition()))
        index = _take_record(waiting, self._keys, key)
        if index is None:  # not where it was produced: find it by topic and key
            for (name, _), other in list(self._unreported.items()):
                if name == topic and (index := _take_record(other, self._keys, key)) is not None:
                    break
            else:
                return  # not a record of this submit (cannot happen: one callback each)
        self._results[index] = message.offset() if error is None else error
        self._finish_one()

    def seal(self) -> None:
        """Every record is noted: ``wait`` can end once they are all reported."""
        with self._lock:
            self._count = len(self._results)
            if self._reported == self._count:
                self._done.set()

    def _finish_one(self) -> None:
        with self._lock:
            self._reported += 1
            if self._reported == self._count:
                self._done.set()

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(max(timeout_s, 0.0))

    def results(self) -> list[tuple[str, int, int] | Exception]:
        assert self._done.is_set(), "results() before wait() said True"
        out: list[tuple[str, int, int] | Exception] = []
        for result, topic, partition in zip(
            self._results, self._topics, self._partitions, strict=True
        ):
            if isinstance(result, SowError):
                out.append(result)
            elif isinstance(result, KafkaError):
                out.append(_delivery_error(result, topic, self._limit))
            else:
                out.append((topic, partition, result))
        return out


def _take_record(
    waiting: deque[int] | None, keys: list[bytes | None], key: bytes | None
) -> int | None:
    """The oldest record in ``waiting`` with ``key``, removed from it; None if none has."""
    if not waiting:
        return None
    index = waiting[0]
    if keys[index] == key:
        return waiting.popleft()
    for index in list(waiting):  # a copy: the submitting thread may be appending
        if keys[index] == key:
            waiting.remove(index)
            return index
    return None


class KafkaLogWriter:
    """Idempotent producer for commands (:class:`processor.log.LogWriter`).

    Never flushes per call: records go out in the producer's batches after at most
    ``linger.ms`` (0.5 ms), so concurrent publishes share produce requests, and a poller
    thread serves delivery reports as they arrive. Idempotence keeps each partition's
    records in submission order, across the producer's internal retries too.
    """

    #: How long ``submit`` waits for room in a full producer queue before refusing.
    QUEUE_FULL_WAIT_S = 5.0

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        settings = producer_settings(
            bootstrap, **{"client.id": "sow-publish", "linger.ms": 0.5, **extra}
        )
        self._producer = Producer(settings)
        self.max_record_bytes = (
            int(settings.get("message.max.bytes", 1_000_000)) - RECORD_FRAMING_BYTES
        )
        self._closing = threading.Event()
        self._poller = threading.Thread(
            target=self._poll, name="sow-log-writer-poller", daemon=True
        )
        self._poller.start()

    def _poll(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.05)

    def submit(self, records: Iterable[LogRecord]) -> KafkaDelivery:
        delivery = KafkaDelivery(self.max_record_bytes)
        # Any: the stubs want list[tuple[str, str | bytes | None]], and lists are invariant.
        produce: Any = self._producer.produce
        expect, report = delivery.expect, delivery.reported
        for topic, key, value, partition, headers in records:
            index = expect(topic, key, partition)
            try:
                produce(topic, value, key, partition, on_delivery=report, headers=headers)
            except BufferError:
                self._produce_when_room(delivery, index, (topic, key, value, partition, headers))
            except KafkaException as exc:
                error = _delivery_error(exc.args[0], topic, self.max_record_bytes)
                delivery.unexpect(index, topic, partition, error)
        delivery.seal()
        return delivery

    def _produce_when_room(self, delivery: KafkaDelivery, index: int, record: LogRecord) -> None:
        """Produce a record the producer's full queue refused, waiting up to
        ``QUEUE_FULL_WAIT_S`` for room; after that its result is a BrokerError."""
        topic, key, value, partition, headers = record
        deadline = time.monotonic() + self.QUEUE_FULL_WAIT_S
        while True:
            time.sleep(0.005)
            try:
                self._producer.produce(
                    topic,
                    value,
                    key,
                    partition,
                    on_delivery=delivery.reported,
                    headers=cast(Any, headers),
                )
                return
            except BufferError:
                if time.monotonic() < deadline:
                    continue
                error: SowError = BrokerError(
                    f"the producer's queue stayed full for {self.QUEUE_FULL_WAIT_S:g}s: the "
                    "broker is not taking records; retry later"
                )
            except KafkaException as exc:
                error = _delivery_error(exc.args[0], topic, self.max_record_bytes)
            delivery.unexpect(index, topic, partition, error)
            return

    def close(self) -> None:
        self._closing.set()
        self._poller.join(timeout=5)
        _close_producer(self._producer)
