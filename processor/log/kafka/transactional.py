"""The processor's output: a transactional producer that commits changelog records and input
offsets together (:class:`KafkaTransactionalLog`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, cast

from confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient  # type: ignore[attr-defined]

from processor.errors import (
    BrokerError,
    FencedError,
    KafkaSecurityError,
    RecordTooLargeError,
    SowError,
    StaleGroupError,
    TransactionTimedOutError,
)
from processor.log import (
    MaybeHeaders,
    Payload,
    TopicPartitionKey,
)
from processor.log.kafka.settings import (
    _STALE_GROUP,
    Refusals,
    _client_properties,
    _raise_for,
    client_settings,
    producer_settings,
    refusal,
)

log = logging.getLogger(__name__)


def unwritable(bootstrap: str, topics: Sequence[str]) -> str:
    """Which of ``topics`` this principal may not write, asked of the broker (a
    transaction's refusal does not say), as one name or a list; "" if it cannot tell."""
    if not topics:
        return ""
    admin = AdminClient({**client_settings(bootstrap), "log_level": 0})
    refused = []
    try:
        futures = admin.describe_topics(
            TopicCollection(list(topics)), include_authorized_operations=True
        )
        for name, future in futures.items():
            try:
                allowed = future.result(10).authorized_operations or []
            except KafkaException:  # not even Describe: certainly not Write
                allowed = []
            if AclOperation.WRITE not in allowed and AclOperation.ALL not in allowed:
                refused.append(name)
    except Exception:  # no answer: the line names no topic, rather than none at all
        log.debug("cannot tell which topic refused the write", exc_info=True)
        return ""
    return "', '".join(sorted(refused))


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
_LIBRDKAFKA_LOG = logging.getLogger("processor.log.kafka.librdkafka")


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
    #: Even so, a transaction begun as the previous one's commit returns usually waits a
    #: retry or two (the markers take about 2 ms on a small node), and back-to-back
    #: transactions are slower at the tail. Leaving 3 ms measured: bare transactions on
    #: the embedded Kafka 4.2 p99 37 -> 13-22 ms (bench/transactions.py), a view's publish
    #: -> visible p50 35-43 -> 13-16 ms at 1k msg/s (bench/views.py, docs/benchmarks.md).
    commit_settle_s = 0.003

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        fenced_means: str = "",
        writes: Sequence[str] = (),
        **extra: Any,
    ) -> None:
        """``writes``: the topics its transactions write, named in a refusal to write."""
        #: Said when this producer is fenced ("": another processor took over).
        self._fenced_means = fenced_means
        self._bootstrap, self._writes = bootstrap, tuple(writes)
        self._transactional_id = transactional_id
        self._refusals = Refusals("the processor's transactional producer", extra)
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
                    "error_cb": self._refusals,
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
            with contextlib.suppress(KafkaException):  # a fatal error is raised again here
                self._producer.poll(0)  # serves error_cb: an authentication failure
            refused = self._refusals.error() or self._refused(exc.args[0])
            if refused is None and exc.args[0].retriable() and not exc.args[0].fatal():
                _UNINITIALISED.keep(transactional_id, self._producer)
            _raise_for(exc, f"cannot initialise transactions for {transactional_id}", refused)
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
        refused = self._refused(error)
        if refused is not None:  # an ACL missing: no new producer helps
            raise refused from exc
        age_s = time.monotonic() - self._began
        fenced = error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
        if (fenced or error.fatal()) and age_s * 1000 >= self.TRANSACTION_TIMEOUT_MS:
            raise TransactionTimedOutError(
                f"{what}: {error}; the transaction was open for {age_s:.1f}s, longer than "
                f"transaction.timeout.ms ({self.TRANSACTION_TIMEOUT_MS / 1000:g}s): the "
                "coordinator aborted it and fenced this producer; a new producer carries on"
            ) from exc
        if fenced and self._fenced_means:
            raise FencedError(f"{what}: {error}; {self._fenced_means}") from exc
        _raise_for(exc, what)

    def _refused(self, error: KafkaError) -> KafkaSecurityError | None:
        """What an authorization refusal of this producer means (None: not one)."""
        who = self._refusals.who
        code = error.code()
        if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return refusal(error, who, "Write", self._transactional_id)
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return refusal(error, who, "Read", "<its consumer group: SOW_GROUP_ID>")
        if code != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return refusal(error, who, "Write")
        return refusal(error, who, "Write", unwritable(self._bootstrap, self._writes))

    def begin(self) -> None:
        self._tracked.clear()
        self._errors.clear()
        self._began = time.monotonic()
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._raise_for(exc, "cannot begin a transaction")

    def produce(
        self, topic: str, value: Payload, key: Payload, partition: int, headers: MaybeHeaders = None
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
        value: Payload,
        key: Payload,
        partition: int,
        headers: MaybeHeaders,
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
