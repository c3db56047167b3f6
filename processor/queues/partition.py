"""One partition of a queue in the processor.

A queue is a derived topic (:mod:`processor.engine.derived`): its partitions read their
input and apply it in the processor's exactly-once transactions.

* **Input** (the queue topic's ``kafka_topic``): the publishes to the underlying topics.
  Over plain topics, the topics themselves (bookmark: the record's own position); over
  SOW topics, what :class:`~processor.queues.feed.QueueFeed` sends: each publish's
  changelog envelope, keyed by its bookmark, in the transaction that applies it.
* **Commands** (its repartition topic, :mod:`processor.queues.commands`): subscribe,
  disconnect, heartbeat, acknowledge, cancel, expire.

Each message the queue takes (``RecoveryPoint``, ``Filter``) is written to the store and
changelog under its bookmark, so ``sow`` browses the queue; the partition's
:class:`~processor.queues.ledger.Ledger` decides everything else, and
:class:`QueuePartition` persists each :class:`~processor.queues.ledger.Outcome` in the same
transaction:

* a lease: the message's counts and lease in the partition's state (with at-most-once
  semantics the message is removed instead), and a delivery for the query service
  holding the subscription;
* a return: the counts; an acknowledgement: the message removed (a tombstone);
* an expiry: the message removed and sent to the dead-letter topic with the reason
  (:class:`~processor.errors.QueueExpiredError`);
* a barrier message: a delivery to every subscription it goes to, then removed.

Records per run of input (or tick), not per message: the states a run changed are one
state record (:mod:`processor.queues.state_batches`), the leases it gives a subscription
one record on the deliveries topic (:func:`~processor.queues.commands.encode_leases`).
At-least-once leases are also handed to the query service beside the processor before
the commit (``PartitionBatch.hand_over``; a lease whose transaction aborts was only
delivered once more); barrier messages and at-most-once leases are not: each removes
its message, so it is delivered only once that is committed.

Subscriptions are kept in the state too, so a restarted partition rebuilds its ledger
(messages, counts, leases, subscriptions) exactly. A query service keeps its
subscriptions alive with heartbeats; when the partition takes it for dead
(:mod:`processor.queues.services`: silent too long, or restarted), its subscriptions are
disconnected, their leases return, and an ``ended`` delivery says
so (a service that was alive after all, a broker outage for instance, subscribes them
again). The clock's work (lease deadlines, expirations, those timeouts) runs in
:meth:`QueuePartition.tick` (:class:`~processor.engine.derived.Ticking`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from processor import changelog
from processor.changelog import STATE_PREFIX, EnvelopeWriter
from processor.changelog.events import ChangeReason
from processor.engine.derived import Rejects
from processor.engine.families import MAX_TOPICS
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.errors import MessageError, QueueExpiredError
from processor.expr import MessageContext
from processor.log import Headers, Record
from processor.log.records import LogRecord
from processor.queues.answers import answered
from processor.queues.commands import (
    ENDED,
    Command,
    CommandKind,
    decode_command,
    delivery_headers,
    encode_leases,
)
from processor.queues.definition import QueueDefinition, bookmark_of, publish_options
from processor.queues.figures import COUNTED, QueueFigures
from processor.queues.filters import Filters
from processor.queues.ledger import Change, Ledger, Outcome, QueueMessage
from processor.queues.services import SERVICE_TIMEOUT_MS, Services
from processor.queues.state import STATES, MessageState
from processor.queues.state_batches import StateBatches
from processor.topology.queue_spec import QueueSemantics

log = logging.getLogger(__name__)

_SUBSCRIPTION = b"qs"  # state: a subscription
_ORIGIN = b"qo"  # state: where the queue began (RecoveryPoint), decided once


def _state_of(message: QueueMessage) -> MessageState:
    return MessageState(message.deliveries, message.cancels, message.holder, message.deadline_ms)


class QueuePartition:
    """One partition of a queue (see the module doc); not thread-safe, except
    :meth:`figures`."""

    pipelines = True  # reads the store only to rebuild the ledger (DerivedPartition)

    def __init__(self, definition: QueueDefinition, state: PartitionState) -> None:
        self.definition = definition
        self.state = state
        self.version = (b"queue-definition", definition.digest)
        self._ledger: Ledger | None = None
        #: The query services holding its subscriptions, and their liveness.
        self._services = Services()
        #: What survives an aborted transaction: deferred acknowledgements (memory only)
        #: and the origin decided for a partition with none committed yet.
        self._deferred: dict[bytes, int] = {}
        self._decided: tuple[int, int] | None = None
        #: Where the queue began: (published at or after ms, after offset) (None: epoch).
        self._origin: tuple[int, int] | None = None
        self._filter = Filters(definition.decode)
        #: Which states batch holds each message's state (rebuilt with the ledger).
        self._states = StateBatches()
        #: The leases of this run (or tick) not written yet, by subscription: (barrier,
        #: bookmark, deadline, deliveries, envelope).
        self._leases: dict[str, list[tuple[bool, bytes, int | None, int, bytes]]] = {}
        self._writers: dict[str, EnvelopeWriter] = {}
        #: Counts since start (committed or not: a redone transaction counts again).
        self._counts = QueueFigures()
        #: Whether the processor closed it (revoked): it holds nothing here any more.
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def figures(self) -> QueueFigures:
        counts, ledger = self._counts, self._ledger
        figures = QueueFigures(**{name: getattr(counts, name) for name in COUNTED})
        if ledger is not None:
            subscriptions = ledger.subscriptions()
            figures.messages, figures.leased = len(ledger), ledger.leased
            figures.subscriptions = len(subscriptions)
            figures.backlogs = {s.id: len(s.held) for s in subscriptions}
        return figures

    # -- the ledger, rebuilt from the store and the state ---------------------------------

    def discard(self) -> None:
        ledger = self._ledger
        if ledger is not None:
            self._deferred = ledger.deferred_acks()
        self._ledger = None  # rebuilt from what was committed
        self._leases = {}

    def _loaded(self, batch: PartitionBatch) -> Ledger:
        ledger = self._ledger
        if ledger is not None:
            return ledger
        definition, store, now_ms = self.definition, self.state.store, batch.now_ms
        ledger = Ledger(definition.rules)
        self._services.reset(now_ms)
        subscriptions = []
        prefix = STATE_PREFIX + _SUBSCRIPTION
        for key, raw in store.meta_items(prefix):
            subscription_id = key[len(prefix) :].decode()
            kept = json.loads(raw)
            self._services.restored(subscription_id, kept["service"], now_ms)
            subscriptions.append(
                (subscription_id, kept.get("backlog"), self._filter(kept.get("filter", "")))
            )
        self._states = StateBatches()
        states, unused = self._states.restore(
            store.meta_items(STATE_PREFIX + STATES),
            lambda bookmark: store.get(bookmark) is not None,
        )
        self._states.delete(unused, batch)
        messages = []
        for bookmark, envelope in store.items():
            message = self._message(bookmark, envelope)
            kept = states.get(bookmark)
            if kept is not None:
                message.deliveries, message.cancels = kept.deliveries, kept.cancels
                message.holder, message.deadline_ms = kept.holder, kept.deadline_ms
            messages.append(message)
        ledger.restore(subscriptions, messages)
        ledger.keep_deferred_acks(self._deferred)
        self._deferred = {}
        origin = store.get_meta(STATE_PREFIX + _ORIGIN)
        self._origin = None if origin is None else _origin_of(origin)
        if origin is None:
            self._origin = self._decide_origin(batch)
            self._decided = self._origin
        self._ledger = ledger
        if messages or subscriptions:
            log.info(
                "queue %s[%d]: %d messages (%d leased), %d subscriptions restored",
                definition.topic.name,
                self.state.partition,
                len(ledger),
                ledger.leased,
                len(subscriptions),
            )
        return ledger

    def _message(self, bookmark: bytes, envelope: bytes) -> QueueMessage:
        """A stored message as the ledger holds it (priority and barrier evaluated)."""
        decoded = changelog.decode(envelope)
        definition = self.definition
        priority, barrier = None, False
        if definition.priority is not None or definition.barrier is not None:
            fields = definition.decode(decoded.data)
            context = decoded.context()
            priority = definition.priority_of(fields, context)
            barrier = definition.is_barrier(fields, context)
        return QueueMessage(
            bookmark,
            decoded.log_offset,
            envelope,
            priority=priority,
            barrier=barrier,
            expires_ms=decoded.expiration_ms,
        )

    # -- input --------------------------------------------------------------------------

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        ledger = self._loaded(batch)
        commands = self.state.topic.repartition_topic
        for record in records:
            try:
                if record.topic() == commands:
                    command = decode_command(record.value(), record.headers())
                    outcomes = self._command(ledger, command, batch)
                    answered(record, outcomes, batch, self.state)
                else:
                    outcomes = self._enqueue(ledger, record, batch)
            except Exception as exc:  # reject re-raises what is not this record's failure
                reject(record, exc)
                continue
            self._persist(outcomes, batch, reject)
        self._flush(batch)

    def _enqueue(self, ledger: Ledger, record: Record, batch: PartitionBatch) -> list[Outcome]:
        definition, state = self.definition, self.state
        offset, now_ms = record.offset(), batch.now_ms
        data = record.value()
        if data is None:
            return []  # a tombstone in the underlying topic: no message
        if definition.direct:
            bookmark = bookmark_of(record.topic(), record.partition(), offset)
            name = definition.plain_names.get(record.topic(), definition.spec.underlying)
            published_ms = record.timestamp()[1]
            own_ms, correlation_id = publish_options(record.headers(), published_ms)
            origin_offset = offset  # where it was published (a bookmark RecoveryPoint's)
        else:
            bookmark = record.key() or b""
            if not bookmark or bookmark.count(b"/") < 2:
                raise MessageError(
                    f"a record of queue {state.topic.name}'s input needs its bookmark as its "
                    "key: only the processor writes this topic"
                )
            original = changelog.decode(data)
            data, name = original.data, original.topic
            published_ms, own_ms = original.publish_time_ms, original.expiration_ms
            correlation_id, origin_offset = original.correlation_id, original.log_offset
        if not self._after_origin(published_ms, origin_offset) or ledger.message(bookmark):
            return []  # before the RecoveryPoint, or held already (one position, twice)
        fields = definition.decode(data)
        context = MessageContext(
            sow_key=bookmark.decode(),
            topic=name,
            correlation_id=correlation_id,
            message_size=len(data),
        )
        if not definition.takes(fields, context):
            return []
        expires_ms = definition.expires_ms(published_ms, own_ms)
        envelope = self._writer(name).encode(
            offset, bookmark, data, published_ms, now_ms, expires_ms, correlation_id
        )
        batch.write(bookmark, envelope, ChangeReason.PUBLISH, state.topic.kafka_topic, offset)
        message = QueueMessage(
            bookmark,
            offset,
            envelope,
            priority=definition.priority_of(fields, context),
            barrier=definition.is_barrier(fields, context),
            expires_ms=expires_ms,
        )
        return ledger.enqueue(message, now_ms)

    def _decide_origin(self, batch: PartitionBatch) -> tuple[int, int] | None:
        """Where a queue partition with no state yet begins (its ``RecoveryPoint``): the
        whole log (None: epoch), publishes from now on (now, creation), from a time, or
        after a bookmark's offset; kept in its state from then on."""
        point = self.definition.spec.recovery_point
        if point.kind == "epoch":
            return None
        origin = self._decided or (batch.now_ms, -1)  # (decided before an abort: kept)
        if point.kind == "timestamp" and point.timestamp is not None:
            origin = (int(point.timestamp.timestamp() * 1000), -1)
        elif point.kind == "bookmark" and point.bookmark:
            origin = (0, int(point.bookmark.strip("|").rsplit("|", 1)[-1]))
        batch.put_state(_ORIGIN, b"%d/%d" % origin)
        return origin

    def _after_origin(self, published_ms: int, offset: int) -> bool:
        """Whether a publish is after the queue's ``RecoveryPoint``."""
        if self._origin is None:
            return True
        since_ms, after_offset = self._origin
        return published_ms >= since_ms and offset > after_offset

    def _command(self, ledger: Ledger, command: Command, batch: PartitionBatch) -> list[Outcome]:
        self._services.commanded(batch.now_ms)
        outcomes = self._heard_from(ledger, command.service, batch) if command.service else []
        return outcomes + self._act(ledger, command, batch)

    def _heard_from(self, ledger: Ledger, service: str, batch: PartitionBatch) -> list[Outcome]:
        """A command of ``service``: its restored subscriptions resume, and those of an
        earlier incarnation of it end (:mod:`processor.queues.services`)."""
        resumed, ended = self._services.heard(service, batch.now_ms)
        outcomes = []
        for subscription_id in ended:
            outcomes.extend(self._end(ledger, subscription_id, batch))
        return outcomes + ledger.resume(resumed, batch.now_ms)

    def _act(self, ledger: Ledger, command: Command, batch: PartitionBatch) -> list[Outcome]:
        now_ms, by, kind = batch.now_ms, command.subscription, command.kind
        bookmarks = [b.encode() for b in command.bookmarks]
        if kind is CommandKind.HEARTBEAT:
            return []
        if kind is CommandKind.SUBSCRIBE:
            if not by or not command.service:
                raise MessageError(
                    "a queue subscribe command needs its subscription id and its service"
                )
            matches = self._filter(command.filter)
            kept = {"service": command.service, "filter": command.filter}
            if command.max_backlog is not None:
                kept["backlog"] = command.max_backlog  # type: ignore[assignment]
            batch.put_state(_SUBSCRIPTION + by.encode(), json.dumps(kept).encode())
            self._services.held(by, command.service)
            return ledger.subscribe(by, now_ms, command.max_backlog, matches)
        if kind is CommandKind.DISCONNECT:
            return self._disconnect(ledger, by or "", batch)
        if kind is CommandKind.ACK:
            return ledger.acknowledge(bookmarks, by, now_ms)
        if kind is CommandKind.ACK_FILTER:
            return ledger.acknowledge_matching(self._filter(command.filter), by, now_ms)
        if kind is CommandKind.CANCEL:
            return ledger.cancel(bookmarks, by, now_ms)
        return ledger.expire(bookmarks, by, now_ms)

    def _disconnect(
        self, ledger: Ledger, subscription_id: str, batch: PartitionBatch
    ) -> list[Outcome]:
        if ledger.subscription(subscription_id) is None:
            return []
        batch.put_state(_SUBSCRIPTION + subscription_id.encode(), None)
        self._services.dropped(subscription_id)
        return ledger.disconnect(subscription_id, batch.now_ms)

    # -- the clock ----------------------------------------------------------------------

    def due(self, now_ms: int) -> bool:
        ledger = self._ledger
        if ledger is None:
            return True  # not loaded yet: load it and look (tick)
        due = ledger.next_due_ms()
        if due is not None and due <= now_ms:
            return True
        return bool(self._services.gone(now_ms))

    def tick(self, batch: PartitionBatch, now_ms: int, reject: Rejects) -> None:
        ledger = self._loaded(batch)
        outcomes: list[Outcome] = []
        for service in self._services.gone(now_ms):
            held = self._services.forget(service)
            if held:
                log.warning(
                    "queue %s[%d]: query service %s not heard from for %d s: its %d "
                    "subscriptions are disconnected and their leases return",
                    self.definition.topic.name,
                    self.state.partition,
                    service,
                    SERVICE_TIMEOUT_MS // 1000,
                    len(held),
                )
            for subscription_id in held:
                outcomes.extend(self._end(ledger, subscription_id, batch))
        outcomes.extend(ledger.tick(now_ms))
        self._persist(outcomes, batch, reject)
        self._flush(batch)

    def _end(self, ledger: Ledger, subscription_id: str, batch: PartitionBatch) -> list[Outcome]:
        """Disconnect a subscription whose service was taken for dead, and say so on the
        deliveries: a service alive after all subscribes it again."""
        outcomes = self._disconnect(ledger, subscription_id, batch)
        self._flush(batch)  # what it was given before it ended comes first
        headers = delivery_headers(ENDED, b"", None, 0)
        deliveries = self.state.topic.deliveries_topic
        batch.produce(deliveries, b"", subscription_id.encode(), self.state.partition, headers)
        return outcomes

    # -- persisting what the ledger decided --------------------------------------------

    def _persist(self, outcomes: list[Outcome], batch: PartitionBatch, reject: Rejects) -> None:
        if not outcomes:
            return
        ledger = self._loaded(batch)
        at_most_once = self.definition.rules.semantics is QueueSemantics.AT_MOST_ONCE
        counts, states, leases = self._counts, self._states, self._leases
        for outcome in outcomes:
            change, bookmark = outcome.change, outcome.bookmark
            message = ledger.message(bookmark)
            if change is Change.RETURNED:
                counts.returned += 1
                if message is not None:
                    states.change(bookmark, _state_of(message))
                continue
            taken = outcome.message
            envelope = taken.data if taken is not None else batch.lookup(bookmark)
            if envelope is None:
                continue  # a deferred acknowledgement of a message not stored
            if change is Change.LEASED or change is Change.BARRIER:
                count = message.deliveries if message is not None else 1
                counts.delivered += len(outcome.subscriptions)
                counts.redelivered += count > 1
                lease = (change is Change.BARRIER, bookmark, outcome.deadline_ms, count, envelope)
                for subscription_id in outcome.subscriptions:
                    leases.setdefault(subscription_id, []).append(lease)
                if change is Change.LEASED and not at_most_once and message is not None:
                    states.change(bookmark, _state_of(message))
                    continue
            elif change is Change.EXPIRED:
                counts.expired += 1
                reject(
                    self._expired_record(bookmark, envelope),
                    QueueExpiredError(
                        f"queue {self.definition.topic.name}: message {bookmark.decode()} "
                        f"{outcome.reason}"
                    ),
                )
            counts.acked += change is Change.ACKED
            offset = taken.sequence if taken is not None else changelog.log_offset_of(envelope)
            self._remove(bookmark, offset, batch, expired=change is Change.EXPIRED)

    def _remove(self, bookmark: bytes, offset: int, batch: PartitionBatch, expired: bool) -> None:
        """Remove a message (``offset``: its place in the queue's input)."""
        reason = ChangeReason.EXPIRE if expired else ChangeReason.DELETE
        # The tombstone: sow.reason (expired or deleted) and the message's position.
        batch.write(bookmark, None, reason, self.state.topic.kafka_topic, offset)
        self._states.drop(bookmark, batch)

    def _flush(self, batch: PartitionBatch) -> None:
        """Write what this run (or tick) decided: its states as one record, the leases
        of each subscription as one record (or more, when large). At-least-once leases
        are handed over before the commit too (the module doc)."""
        self._states.flush(batch)
        if not self._leases:
            return
        deliveries, partition = self.state.topic.deliveries_topic, self.state.partition
        at_least_once = self.definition.rules.semantics is QueueSemantics.AT_LEAST_ONCE
        for subscription_id, leases in self._leases.items():
            key = subscription_id.encode()
            handed = at_least_once and not any(lease[0] for lease in leases)
            write = batch.hand_over if handed else batch.produce
            for value, headers in encode_leases(leases, handed):
                write(deliveries, value, key, partition, headers)
        self._leases = {}

    def _expired_record(self, bookmark: bytes, envelope: bytes) -> Record:
        """The expired message as a record for the dead-letter topic: its data, where it
        was published (its bookmark) and the queue it left."""
        decoded = changelog.decode(envelope)
        headers: Headers = [("sow.queue", self.definition.topic.name.encode())]
        topic, partition, offset = bookmark.decode().rsplit("/", 2)
        return LogRecord(topic, int(partition), int(offset), bookmark, decoded.data, headers)

    def _writer(self, name: str) -> EnvelopeWriter:
        """The envelope writer of messages published to topic ``name``."""
        writer = self._writers.get(name)
        if writer is None:
            if len(self._writers) >= MAX_TOPICS:
                self._writers.clear()
            state = self.state
            writer = EnvelopeWriter(
                name, state.topic.message_type, state.topic.kafka_topic, state.partition
            )
            self._writers[name] = writer
        return writer


def _origin_of(raw: bytes) -> tuple[int, int]:
    since, after = raw.split(b"/")
    return int(since), int(after)
