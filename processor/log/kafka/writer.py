"""Writing commands to the input topics: an idempotent producer whose deliveries are matched
to the records submitted (:class:`KafkaLogWriter`, :class:`KafkaDelivery`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
)

from processor.errors import (
    BrokerError,
    MessageTooLargeError,
    SowError,
)
from processor.log import (
    LogRecord,
)
from processor.log.kafka.settings import Refusals, _close_producer, producer_settings, refusal

log = logging.getLogger(__name__)

RECORD_FRAMING_BYTES = 512
_TOO_LARGE = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD}
)


#: Refusals already logged (one line each, however many records they refuse).
_said: set[str] = set()


def _delivery_error(
    error: KafkaError, topic: str, limit: int, who: str = "the publisher"
) -> SowError:
    refused = refusal(error, who, "Write", topic)
    if refused is not None:
        if str(refused) not in _said and len(_said) < 1000:
            _said.add(str(refused))
            log.error("%s", refused)
        return refused
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
        "_who",
    )

    def __init__(self, limit: int, who: str = "the publisher") -> None:
        """``who``: the writer, as a refusal names it (:func:`settings.client_name`)."""
        self._who = who
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
                out.append(_delivery_error(result, topic, self._limit, self._who))
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
        self._refusals = Refusals("the publisher", extra)
        settings = producer_settings(
            bootstrap,
            **{"client.id": "sow-publish", "linger.ms": 0.5, "error_cb": self._refusals, **extra},
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
        delivery = KafkaDelivery(self.max_record_bytes, self._refusals.who)
        failure = self._refusals.error()
        if failure is not None:  # the broker refused this client's credentials: say so now
            for topic, key, _, partition, _ in records:
                delivery.unexpect(delivery.expect(topic, key, partition), topic, partition, failure)
            delivery.seal()
            return delivery
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
                error = _delivery_error(
                    exc.args[0], topic, self.max_record_bytes, self._refusals.who
                )
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
                error = _delivery_error(
                    exc.args[0], topic, self.max_record_bytes, self._refusals.who
                )
            delivery.unexpect(index, topic, partition, error)
            return

    def close(self) -> None:
        self._closing.set()
        self._poller.join(timeout=5)
        _close_producer(self._producer)
