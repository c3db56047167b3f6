"""Applying log commands to partition state: the processor's hot path.

Commands on the log (ARCHITECTURE.md: nothing else writes state):

* publish: a record with a value. The message replaces the whole record of its SowKey
  (insert or full replacement). Optional headers: ``sow.expiration`` (seconds; 0 never
  expires) and ``sow.correlation_id``.
* delta_publish: a publish with header ``sow.delta``, merged into the stored record
  (:mod:`processor.engine.delta_merge`); the merged message is what is recorded.
* sow_delete by SowKey: a record with a null value whose Kafka key is the SowKey.
* sow_delete by filter: a null-value record keyed ``FILTER_DELETE_KEY`` with the filter in
  a header; it deletes the partition's matching records, as of its place in the log.

(:mod:`processor.changelog.commands` defines the record formats.)

A record whose Kafka key is not its SowKey (or that sits on another partition than its
SowKey's) is re-keyed through the topic's repartition topic and applied when it comes back.
A record that cannot be applied (undecodable, missing a Key field, bad SowKey, a key
function that fails, a changelog record over the size limit, any unexpected exception)
goes to the dead-letter topic with the reason in its headers, in the batch's transaction;
the batch goes on (:mod:`processor.engine.dead_letter`). Failures of the broker or the
store are raised: they are not the record's.

Duplicate detection: a command from the input topic with headers ``sow.publisher`` and
``sow.sequence`` is applied only when its sequence is above the highest the partition
applied for that publisher; otherwise it is discarded (counted, its offset committed).
The check runs where the publisher's order holds, on the input partition, before a
record is re-keyed; records back from the repartition topic are not checked again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from processor import changelog
from processor.changelog import format_position
from processor.changelog.commands import FILTER_DELETE_KEY, FILTER_HEADER
from processor.changelog.events import ChangeReason
from processor.engine.dead_letter import (
    ERROR_HEADERS,
    DeadLetters,
    ProduceError,
    explain,
    no_translation,
)
from processor.engine.delta_merge import delta_key, merge_delta
from processor.engine.headers import Sequenced, delta_form, publish_options, sequenced
from processor.engine.partition import PartitionState
from processor.engine.route import Route
from processor.engine.transaction import PartitionBatch, Produce, Transaction
from processor.errors import (
    BrokerError,
    ExpressionError,
    InvalidSowKeyError,
    MessageError,
    ProcessingError,
    RecordTooLargeError,
)
from processor.expr import Expression, MessageContext
from processor.expr import compile as compile_expression
from processor.keys import partition_for, validate_user_key
from processor.log import Record, TopicPartitionKey

log = logging.getLogger(__name__)

__all__ = ["ERROR_HEADERS", "Applier", "Route"]

_PUBLISH = ChangeReason.PUBLISH
_DELETE = ChangeReason.DELETE


def _reached(
    offsets: dict[TopicPartitionKey, int],
    run: TopicPartitionKey | None,
    batch: PartitionBatch,
    last: int,
) -> None:
    """Note a run's end: the next offset to read from its log partition is ``last + 1``."""
    assert run is not None
    offsets[run] = last + 1
    batch.reached(run[0], last + 1)


class Applier:
    """Applies batches of records to the partitions they belong to.

    ``routes`` maps (log topic, partition) to its Route; the processor keeps it current as
    partitions are assigned and revoked. ``produce`` is the produce the processor gives its
    transactions (:func:`processor.engine.transaction.retrying` over the transactional
    producer's raw one, waiting while its queue is full), the dead letters' too; what it
    raises besides, ``produce_error`` translates (a record over the size limit is the
    record's failure; anything else is the log's). Records are written through their
    batch (:meth:`PartitionBatch.write`), which produces the changelog record.
    """

    def __init__(
        self,
        produce: Produce,
        dead_letter_topic: str,
        produce_error: ProduceError = no_translation,
    ) -> None:
        self.produce = produce
        self.dead_letters = DeadLetters(produce, dead_letter_topic, produce_error)
        self.routes: dict[TopicPartitionKey, Route] = {}
        self.repartitioned = 0
        #: Commands discarded by duplicate detection since start.
        self.duplicates = 0
        self._filters: dict[bytes, Expression] = {}

    @property
    def dead_lettered(self) -> int:
        """Records sent to the dead-letter topic since start."""
        return self.dead_letters.count

    def counters(self) -> tuple[int, int, int]:
        """The monitoring counters, to put back with :meth:`restore_counters` when a
        batch is aborted and applied again."""
        return self.repartitioned, self.duplicates, self.dead_letters.count

    def restore_counters(self, counters: tuple[int, int, int]) -> None:
        self.repartitioned, self.duplicates, self.dead_letters.count = counters

    def apply(
        self, transaction: Transaction, records: Sequence[Record]
    ) -> dict[TopicPartitionKey, int]:
        """Apply records in offset order into the transaction's batches (a partition
        with records is touched even when none of them changes it); return the next
        offset to read per log partition.

        Records of one partition arrive in runs; the route and its batch are looked up
        once per run. Raises only for failures that are not one record's (broker,
        store); the caller then abandons the whole transaction.
        """
        routes = self.routes
        now_ms = transaction.now_ms
        offsets: dict[TopicPartitionKey, int] = {}
        run: TopicPartitionKey | None = None
        route: Route | None = None
        batch: PartitionBatch | None = None
        last = -1  # the offset of the run's latest record (noted when the run ends)
        derived: list[Record] = []  # a derived topic's run, applied when the run ends
        for record in records:
            error = record.error()
            if error is not None:
                if getattr(error, "fatal", lambda: False)():
                    # A fenced or otherwise dead consumer: a new one must take over.
                    raise BrokerError(f"the consumer failed for good: {error}")
                log.warning("consumer reported %s; skipping", error)
                continue
            log_topic = record.topic()
            partition = record.partition()
            if run is None or run[0] != log_topic or run[1] != partition:
                if derived:
                    self._apply_derived(route, batch, derived)
                if batch is not None and last >= 0:
                    _reached(offsets, run, batch, last)
                run = (log_topic, partition)
                route = routes.get(run)
                last = -1
                batch = None if route is None else transaction.batch(route.state)
            if route is None or batch is None:  # revoked during this batch's rebalance
                continue
            if route.derived is not None:
                derived.append(record)
                last = record.offset()
                continue
            offset = last = record.offset()
            value = record.value()
            key = record.key()
            key_function = route.key_function
            # Every step below may fail for this record alone (its changelog record too: over
            # the size limit); a try costs nothing until something raises, and then the
            # record takes the slow path to the dead letters.
            try:
                headers = record.headers()
                if value is None or key_function is None or (headers and delta_form(headers)):
                    self._apply_slow(record, route, batch, value, key, now_ms)
                    continue
                sow_key = key_function(route.decode_for_key(value)).encode()
                if headers is None and route.plain:
                    expiration_ms = correlation_id = None
                else:
                    expiration_ms, correlation_id, sequence = publish_options(
                        headers, route.state, now_ms
                    )
                    if sequence is not None and self._duplicate(record, route, sequence):
                        continue
                if (
                    route.from_input
                    and (key != sow_key or sow_key not in route.placed)
                    and route.misplaced(key, sow_key, partition)
                ):
                    self._repartition(record, route.state, batch, sow_key)
                    continue
                stamp = record.timestamp()[1]
                envelope = route.writer.encode(
                    offset, sow_key, value, stamp, now_ms, expiration_ms, correlation_id
                )
                batch.write(sow_key, envelope, _PUBLISH, log_topic, offset, expiration_ms)
            except Exception as exc:  # any failure of one record dead-letters it; the loop goes on
                self._reject(record, route, exc)
        if derived:
            self._apply_derived(route, batch, derived)
        if batch is not None and last >= 0:
            _reached(offsets, run, batch, last)
        return offsets

    def _apply_derived(
        self, route: Route | None, batch: PartitionBatch | None, records: list[Record]
    ) -> None:
        """Hand a derived topic's run to its partition (and empty ``records``)."""
        derived = None if route is None else route.derived
        assert derived is not None
        assert batch is not None
        derived.apply(records, batch, self.reject)
        records.clear()

    def reject(self, record: Record, exc: Exception) -> None:
        """Dead-letter a record of a derived topic that failed for its own reasons;
        re-raise a failure of the broker or the store."""
        error = self.dead_letters.failure(exc)
        if error is None:
            raise exc
        self.dead_letters.send(record, error)

    def _reject(self, record: Record, route: Route, exc: Exception) -> None:
        """A record failed before its change was recorded: dead-letter it when the failure
        is its own, re-raise when it is the broker's or the store's."""
        error = self.dead_letters.failure(exc)
        if error is None:
            raise exc
        if isinstance(error, RecordTooLargeError):
            size = len(record.value() or b"")
            error = RecordTooLargeError(
                f"the {size:,}-byte message does not fit the log once the processor adds its "
                f"SowKey and changelog envelope ({error}); publish smaller messages, or raise "
                "the limit (message.max.bytes) for the processor and the broker together"
            )
        elif isinstance(error, ProcessingError):
            error = explain(
                record.value(), route.decode, route.key_function, route.state.topic.name, error
            )
            log.debug(
                "record %s[%d]@%d failed",
                record.topic(),
                record.partition(),
                record.offset(),
                exc_info=exc,
            )
        self.dead_letters.send(record, error)

    def _duplicate(self, record: Record, route: Route, sequence: Sequenced) -> bool:
        """True (and the command is discarded) when it repeats an applied sequence."""
        if not route.from_input or route.state.accept_sequence(*sequence):
            return False
        self.duplicates += 1
        log.debug(
            "discarded %s[%d]@%d: publisher %r sequence %d was already applied",
            record.topic(),
            record.partition(),
            record.offset(),
            sequence[0],
            sequence[1],
        )
        return True

    def _apply_slow(
        self,
        record: Record,
        route: Route,
        batch: PartitionBatch,
        value: bytes | None,
        key: bytes | None,
        now_ms: int,
    ) -> None:
        """Deletes, delta publishes, publishes to topics whose publishers provide the
        SowKey, and publishes to topics with Preprocessing or Enrichment
        (:mod:`processor.engine.shaping`).

        Raises MessageError (and anything unexpected) for the caller to dead-letter.
        """
        state = route.state
        if value is None and key == FILTER_DELETE_KEY:
            self._delete_by_filter(record, route, batch)
            return
        if value is None:
            sow_key = self._delete_key(state, key)
            expiration_ms = correlation_id = delta = None
            sequence = sequenced(record.headers()) if route.from_input else None
        else:
            delta = delta_form(record.headers())
            expiration_ms, correlation_id, sequence = publish_options(
                record.headers(), state, now_ms
            )
            if route.family is not None:
                concrete = route.family.topic_of(record.headers())
                writer = route.family.writer(concrete, record.topic())
                sow_key = delta_key(state, value, key, delta, route.family.key_function(concrete))
            elif route.shaping is not None:
                context = MessageContext(
                    topic=state.topic.name, correlation_id=correlation_id, message_size=len(value)
                )
                message = route.shaping.preprocessed(value, delta, context)
                sow_key = route.shaping.sow_key(message, key, delta)
            elif delta is None:
                route.decode(value)
                sow_key = validate_user_key(key).encode()
            else:
                sow_key = delta_key(state, value, key, delta)
        if sequence is not None and self._duplicate(record, route, sequence):
            return
        partition = record.partition()
        if route.from_input and route.misplaced(key, sow_key, partition):
            self._repartition(record, state, batch, sow_key)
            return
        if value is None:
            if batch.lookup(sow_key) is None:
                return  # deleting what is not there changes nothing
            batch.write(sow_key, None, _DELETE, record.topic(), record.offset())
            return
        if route.shaping is not None:
            context = MessageContext(
                sow_key=sow_key.decode(),
                topic=state.topic.name,
                correlation_id=correlation_id,
                message_size=len(value),
            )
            value, delta = route.shaping.enriched(batch.lookup, sow_key, message, context, delta)
        if delta is not None:
            value, correlation_id = merge_delta(batch, sow_key, value, delta, correlation_id)
        offset, stamp = record.offset(), record.timestamp()[1]
        envelope = (route.writer if route.family is None else writer).encode(
            offset, sow_key, value, stamp, now_ms, expiration_ms, correlation_id
        )
        batch.write(sow_key, envelope, _PUBLISH, record.topic(), record.offset(), expiration_ms)

    def _delete_by_filter(self, record: Record, route: Route, batch: PartitionBatch) -> None:
        """Delete every record of the partition that matches the command's filter."""
        headers = record.headers()
        text = next((raw for name, raw in headers or () if name == FILTER_HEADER), None)
        try:
            if not text:
                raise MessageError(
                    f"a filter delete (key {FILTER_DELETE_KEY!r}) needs the filter in header "
                    f"{FILTER_HEADER}"
                )
            expression = self._filters.get(text)
            if expression is None:
                expression = compile_expression(text.decode(errors="replace"))
                if len(self._filters) >= 1024:
                    self._filters.clear()
                self._filters[text] = expression
        except ExpressionError as exc:
            raise MessageError(str(exc)) from exc
        sequence = sequenced(headers) if route.from_input else None
        if sequence is not None and self._duplicate(record, route, sequence):
            return
        state = route.state
        try:
            matched = _matching(batch, route.decode, expression)
        except Exception as exc:  # see below: one bad command must not stop the loop
            # Nothing was written yet: the command goes to the dead-letter topic whole
            # and the loop goes on (a filter too deep to compile, a damaged record).
            raise MessageError(f"the filter delete failed: {exc!r}") from exc
        log_topic, partition, offset = record.topic(), record.partition(), record.offset()
        for sow_key in matched:
            batch.write(sow_key, None, _DELETE, log_topic, offset)
        log.info(
            "filter delete at %s deleted %d records of %s[%d]",
            format_position(log_topic, partition, offset).decode(),
            len(matched),
            state.topic.name,
            partition,
        )

    def _delete_key(self, state: PartitionState, key: bytes | None) -> bytes:
        if state.key_function is None:
            return validate_user_key(key).encode()
        if not key:
            raise InvalidSowKeyError(
                "a delete (a record with a null value) needs the SowKey as its Kafka key"
            )
        return key

    def _repartition(
        self, record: Record, state: PartitionState, batch: PartitionBatch, sow_key: bytes
    ) -> None:
        """Send a record keyed by its SowKey through its topic's repartition topic, in the
        batch's transaction."""
        topic = state.topic
        batch.produce(
            topic.repartition_topic,
            record.value(),
            sow_key,
            partition_for(sow_key, topic.partitions),
            record.headers(),
        )
        self.repartitioned += 1


def _matching(
    batch: PartitionBatch, decode: Callable[[bytes], Any], expression: Expression
) -> list[bytes]:
    """The SowKeys of a partition's records (this transaction's writes included) that
    match a filter."""
    matched: list[bytes] = []
    for sow_key, envelope in batch.items():
        decoded = changelog.decode(envelope)
        try:
            message = decode(decoded.data)
        except MessageError:
            message = None
        if expression.matches(message, decoded.context(), overrun="delete"):
            matched.append(sow_key)
    return matched
