"""The query service's side of the queues (docs/queues.md): consumers, their leases, and
the commands they send.

A :class:`QueueHub` follows the deliveries topic of every queue of the topology from its
end (one thread, :meth:`QueueHub.run`) and hands each lease or barrier message to the
:class:`QueueConsumer` its key names. Everything a consumer does is a command record
(:mod:`processor.queues.commands`) written to the queue's command topic, on the
partitions it concerns: a subscribe and a disconnect to every partition, an
acknowledgement, cancel or expiry to each bookmark's partition (a batch of bookmarks
makes one record per partition).

* **Ready.** A consumer is registered only once the hub has read to the start of every
  deliveries partition (:meth:`QueueHub.wait_ready`) and its subscribe command is in the
  log: no lease it is given can be missed.
* **Alive.** The hub sends a heartbeat to every queue partition each
  :data:`~processor.queues.services.HEARTBEAT_S`; a partition that stops hearing it
  disconnects this service's subscriptions, so a service that dies gives its leases back
  by itself. A partition that took a live service for dead (after a broker outage, say)
  says so on the deliveries (``ended``), and the hub subscribes the consumer there again.
  A consumer that ends (its client went away) disconnects at once.
* **Ids.** Each consumer has an id unique to this service and run
  (``<service id>/<n>``); the client's ``sub_id`` is only echoed.

Thread-safety: every method may be called from any thread; ``run`` is the only reader
of the deliveries.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from processor.changelog.live import HandedRecord
from processor.errors import (
    BrokerError,
    DeadlineError,
    InvalidRequestError,
    SowError,
    UnknownTopicError,
)
from processor.expr import compile as compile_expression
from processor.log import ChangelogTail, LogRecord, LogWriter, Record, read_ready
from processor.log.records import LogRecord as StoredRecord
from processor.queues.answers import request_headers
from processor.queues.commands import (
    ENDED,
    Command,
    CommandKind,
    Delivery,
    decode_deliveries,
    handed_over,
    service_id,
)
from processor.queues.definition import partition_of
from processor.queues.services import HEARTBEAT_S
from processor.security import OPEN, RequestContext
from processor.security.reads import entitled, read_restriction
from processor.subscriptions.handed import HandedLeases
from processor.subscriptions.queue_answers import Acknowledged, AwaitedAnswers
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

END = -1
BATCH = 10_000
IDLE_WAIT_S = 0.05
#: The longest a command waits for the broker to take it.
WRITE_TIMEOUT_S = 30.0


class QueueConsumer:
    """One subscription to a queue: its leases arrive in :attr:`inbox` (None: it ended)."""

    def __init__(
        self,
        hub: QueueHub,
        topic: SowTopic,
        subscription_id: str,
        subscribe: Command,
        context: RequestContext = OPEN,
    ) -> None:
        self.hub, self.topic, self.id = hub, topic, subscription_id
        #: Who consumes: acknowledging and expiring take its acknowledge right.
        self.context = context
        #: Its subscribe command (sent again to a partition that ended it).
        self.subscribe = subscribe
        self.inbox: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self.closed = False
        #: Why the service ended it (its rights changed), for its stream to say.
        self.error: SowError | None = None

    def ack(self, bookmarks: Sequence[str]) -> None:
        self.context.rights.check_acknowledge(self.topic.name)
        self.hub.act(self.topic, CommandKind.ACK, bookmarks, by=self.id, wait=False)

    def cancel(self, bookmarks: Sequence[str]) -> None:
        self.hub.act(self.topic, CommandKind.CANCEL, bookmarks, by=self.id, wait=False)

    def expire(self, bookmarks: Sequence[str]) -> None:
        self.context.rights.check_acknowledge(self.topic.name)
        self.hub.act(self.topic, CommandKind.EXPIRE, bookmarks, by=self.id, wait=False)

    def end(self, error: SowError) -> None:
        """Disconnect it for ``error`` (its stream ends with it); its leases return."""
        self.error = error
        self.close()
        self.inbox.put(None)

    def close(self) -> None:
        """Disconnect: the leases it holds return to the queue."""
        if not self.closed:
            self.closed = True
            self.hub.disconnect(self)


class QueueHub:
    """Every queue consumer of one query service (see the module doc)."""

    def __init__(
        self,
        topology: Topology,
        tail: Callable[[], ChangelogTail],
        writer: LogWriter,
        service_id: str | None = None,
    ) -> None:
        self.topology = topology
        self.service_id = service_id or uuid.uuid4().hex[:12]
        self._queues = {t.name: t for t in topology.topics.values() if t.queue is not None}
        self._tail_factory = tail
        self._writer = writer
        self._consumers: dict[str, QueueConsumer] = {}
        self._numbers = itertools.count(1)
        self._prefix = f"{self.service_id}/"
        self._answers = AwaitedAnswers(self.service_id)
        #: Leases handed over before their commit, to take once (:mod:`.handed`).
        self._handed = HandedLeases()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        if not self._queues:
            self._ready.set()

    def __len__(self) -> int:
        return len(self._consumers)

    @property
    def twins_awaited(self) -> int:
        """Leases handed over before their commit whose committed copy has not come yet."""
        with self._lock:
            return len(self._handed)

    def consumers(self) -> list[QueueConsumer]:
        with self._lock:
            return list(self._consumers.values())

    def names(self) -> frozenset[str]:
        """The queues' names."""
        return frozenset(self._queues)

    def queue(self, name: str) -> SowTopic:
        """The queue topic called ``name`` (UnknownTopicError: no such queue)."""
        topic = self._queues.get(name)
        if topic is None:
            known = ", ".join(self._queues) or "none"
            raise UnknownTopicError(f"no queue is called {name!r}; queues here: {known}")
        return topic

    # -- the deliveries thread ----------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Follow the deliveries and send heartbeats until stopped."""
        if not self._queues:
            return
        tail = self._tail_factory()
        partitions = [
            (t.deliveries_topic, p) for t in self._queues.values() for p in range(t.partitions)
        ]
        next_beat = 0.0
        try:
            tail.assign([(t, p, END) for t, p in partitions])
            while not self._stop.is_set():
                records = read_ready(tail, BATCH, IDLE_WAIT_S)
                if not self._ready.is_set():
                    states = tail.states()
                    if all(tp in states and states[tp].position >= 0 for tp in partitions):
                        self._ready.set()
                self._route(records)
                now = time.monotonic()
                if now >= next_beat:
                    next_beat = now + HEARTBEAT_S
                    self._heartbeat()
                    with self._lock:
                        self._handed.forget_old(now)
        finally:
            tail.close()
            with self._lock:
                consumers = list(self._consumers.values())
            for consumer in consumers:
                consumer.inbox.put(None)

    def wait_ready(self, timeout_s: float) -> bool:
        return self._ready.wait(timeout_s)

    def handed(self, records: Sequence[HandedRecord]) -> None:
        """Leases the processor beside this service handed over before their commit:
        delivered now, and their committed copies dropped (:mod:`.handed`)."""
        self._route([StoredRecord(t, p, -1, k, v, h) for t, k, v, p, h in records], live=True)

    def _route(self, records: Sequence[Record], live: bool = False) -> None:
        if not records:
            return
        strays: list[tuple[str, str]] = []
        ended: list[tuple[QueueConsumer, int]] = []
        now = time.monotonic()
        with self._lock:
            consumers, once = self._consumers, self._handed
            for record in records:
                try:
                    if self._answers.take(record):
                        continue
                    twice = handed_over(record.headers())
                    deliveries = decode_deliveries(record.key(), record.value(), record.headers())
                except (KeyError, ValueError) as exc:
                    log.warning(
                        "queue deliveries %s[%d]@%d unreadable (%s): skipped",
                        record.topic(),
                        record.partition(),
                        record.offset(),
                        exc,
                    )
                    continue
                if not deliveries:
                    continue
                delivery = deliveries[0]
                consumer = consumers.get(delivery.subscription)
                if consumer is not None and delivery.kind == ENDED:
                    ended.append((consumer, record.partition()))
                elif consumer is not None:
                    for delivery in deliveries:
                        if live:
                            once.handed(delivery, now)
                        elif twice and not once.new(delivery):
                            continue
                        consumer.inbox.put(delivery)
                elif live:
                    continue  # its committed copy says so, if it ever is
                elif delivery.kind != ENDED and delivery.subscription.startswith(self._prefix):
                    # Ours, but gone (its disconnect was lost): disconnect it again.
                    strays.append((record.topic(), delivery.subscription))
        for deliveries_topic, subscription_id in dict.fromkeys(strays):
            self._disconnect_stray(deliveries_topic, subscription_id)
        for consumer, partition in ended:
            log.warning(
                "queue %s: partition %d took this service for dead and ended %s: "
                "subscribing it there again",
                consumer.topic.name,
                partition,
                consumer.id,
            )
            try:
                self._write(consumer.topic, consumer.subscribe, [partition], wait=False)
            except BrokerError as exc:
                log.warning("queue subscribe of %s not written: %s", consumer.id, exc)

    def _disconnect_stray(self, deliveries_topic: str, subscription_id: str) -> None:
        topic = next(t for t in self._queues.values() if t.deliveries_topic == deliveries_topic)
        log.info("queue %s: disconnecting %s again (it had ended)", topic.name, subscription_id)
        command = Command(
            CommandKind.DISCONNECT, subscription=subscription_id, service=self.service_id
        )
        try:
            self._write(topic, command, range(topic.partitions), wait=False)
        except BrokerError as exc:
            log.warning("queue disconnect of %s not written: %s", subscription_id, exc)

    def _heartbeat(self) -> None:
        beat = Command(CommandKind.HEARTBEAT, service=self.service_id)
        try:
            for topic in self._queues.values():
                self._write(topic, beat, range(topic.partitions), wait=False)
        except BrokerError as exc:
            log.warning("queue heartbeat not written: %s", exc)

    # -- commands -----------------------------------------------------------------------

    def subscribe(
        self,
        name: str,
        filter_text: str = "",
        max_backlog: int | None = None,
        context: RequestContext = OPEN,
    ) -> QueueConsumer:
        """A new consumer of queue ``name``, registered in every partition when this
        returns (InvalidRequestError: a bad filter or backlog; CatchingUpError-like
        BrokerError: the hub or the broker is not ready; NotEntitledError: ``context``'s
        principal may not read the queue). It leases only messages its entitlement
        filter matches."""
        topic = self.queue(name)
        if filter_text.strip():
            compile_expression(filter_text)  # ExpressionError: the client's to fix
        entitlement = read_restriction(context.rights, self.topology, topic.name)
        filter_text = entitled(filter_text, entitlement)
        if max_backlog is not None and max_backlog < 0:
            raise InvalidRequestError(f"max_backlog must be 0 or more, got {max_backlog}")
        if not self.wait_ready(WRITE_TIMEOUT_S):
            raise BrokerError("the queue deliveries are not readable yet; retry shortly")
        command = Command(
            CommandKind.SUBSCRIBE,
            subscription=f"{self._prefix}{next(self._numbers)}",
            service=self.service_id,
            filter=filter_text,
            max_backlog=max_backlog,
        )
        assert command.subscription is not None
        consumer = QueueConsumer(self, topic, command.subscription, command, context)
        with self._lock:
            self._consumers[consumer.id] = consumer
        try:
            self._write(topic, command, range(topic.partitions), wait=True)
        except BaseException:
            with self._lock:
                self._consumers.pop(consumer.id, None)
            raise
        return consumer

    def disconnect(self, consumer: QueueConsumer) -> None:
        with self._lock:
            self._consumers.pop(consumer.id, None)
        command = Command(CommandKind.DISCONNECT, subscription=consumer.id, service=self.service_id)
        try:
            self._write(consumer.topic, command, range(consumer.topic.partitions), wait=False)
        except BrokerError as exc:  # the heartbeats stop covering it: it times out
            log.warning("queue disconnect of %s not written: %s", consumer.id, exc)

    def act(
        self,
        topic: SowTopic,
        kind: CommandKind,
        bookmarks: Sequence[str] = (),
        filter_text: str = "",
        by: str | None = None,
        wait: bool = True,
    ) -> int:
        """Acknowledge, cancel or expire messages (by bookmark, or an acknowledgement by
        filter); returns how many command records were written."""
        if kind is CommandKind.ACK_FILTER:
            compile_expression(filter_text)
            command = Command(kind, subscription=by, service=self.service_id, filter=filter_text)
            return self._write(topic, command, range(topic.partitions), wait)
        by_partition: dict[int, list[str]] = {}
        refused: list[str] = []
        for bookmark in bookmarks:
            try:
                partition = partition_of(bookmark, topic.partitions)
            except ValueError:
                refused.append(bookmark)
                continue
            by_partition.setdefault(partition, []).append(bookmark)
        written = 0
        records: list[LogRecord] = []
        for partition, chosen in by_partition.items():
            command = Command(
                kind, subscription=by, service=self.service_id, bookmarks=tuple(chosen)
            )
            value, headers = command.encode()
            records.append((topic.repartition_topic, None, value, partition, headers))
            written += 1
        self._submit(records, wait)
        if refused:  # the others are written
            raise InvalidRequestError(
                f"{', '.join(repr(b) for b in refused[:3])} is not a bookmark of queue "
                f"{topic.name} (topic/partition/offset, as each lease carries it)"
            )
        return written

    def acknowledge(
        self,
        topic: SowTopic,
        bookmarks: Sequence[str] = (),
        filter_text: str = "",
        timeout_s: float = WRITE_TIMEOUT_S,
        context: RequestContext = OPEN,
    ) -> Acknowledged:
        """Acknowledge messages as a client without a subscription (a ``sow_delete`` on
        the queue), by bookmark or by filter, and wait for the partitions' answers: how
        many messages the acknowledgement removed (:mod:`processor.queues.answers`) and
        how many command records it took.
        InvalidRequestError: a bad bookmark or filter (nothing is written);
        DeadlineError: not every partition answered within ``timeout_s`` (the
        acknowledgement may still take effect)."""
        deadline = time.monotonic() + timeout_s
        context.rights.check_acknowledge(topic.name)
        if filter_text:  # only messages the caller may see
            compile_expression(filter_text)
            entitlement = read_restriction(context.rights, self.topology, topic.name)
            filter_text = entitled(filter_text, entitlement)
            partitions: Iterable[int] = range(topic.partitions)
            command = Command(CommandKind.ACK_FILTER, service=self.service_id, filter=filter_text)
            commands = dict.fromkeys(partitions, command)
        else:
            by_partition: dict[int, list[str]] = {}
            for bookmark in bookmarks:
                try:
                    partition = partition_of(bookmark, topic.partitions)
                except ValueError:
                    raise InvalidRequestError(
                        f"{bookmark!r} is not a bookmark of queue {topic.name} "
                        "(topic/partition/offset, as each lease carries it): nothing acknowledged"
                    ) from None
                by_partition.setdefault(partition, []).append(bookmark)
            commands = {
                p: Command(CommandKind.ACK, service=self.service_id, bookmarks=tuple(chosen))
                for p, chosen in by_partition.items()
            }
        if not commands:
            return Acknowledged(0, 0)
        if not self.wait_ready(max(deadline - time.monotonic(), 0.0)):
            raise BrokerError("the queue deliveries are not readable yet; retry shortly")
        request = self._answers.expect(commands)
        records: list[LogRecord] = []
        for partition, command in commands.items():
            value, headers = command.encode()
            headers += request_headers(request)
            records.append((topic.repartition_topic, None, value, partition, headers))
        try:
            self._submit(records, wait=True)
        except BaseException:
            self._answers.forget(request)
            raise
        removed, missing = self._answers.wait(request, deadline)
        if missing:
            raise DeadlineError(
                f"queue {topic.name}: the acknowledgement was sent but partitions "
                f"{sorted(missing)} did not say within {timeout_s:g} s what it removed "
                f"({removed} removed by the others); it takes effect when they apply it: "
                "is the processor running?"
            )
        return Acknowledged(removed, len(records))

    def _write(
        self, topic: SowTopic, command: Command, partitions: Iterable[int], wait: bool
    ) -> int:
        value, headers = command.encode()
        records: list[LogRecord] = [
            (topic.repartition_topic, None, value, p, headers) for p in partitions
        ]
        self._submit(records, wait)
        return len(records)

    def _submit(self, records: list[LogRecord], wait: bool) -> None:
        delivery = self._writer.submit(records)
        if not wait:
            return
        if not delivery.wait(WRITE_TIMEOUT_S):
            raise BrokerError("the broker did not take the queue command in time")
        for result in delivery.results():
            if isinstance(result, Exception):
                raise result


def queue_service_id(state_dir: Path) -> str:
    """The id of a query service running on ``state_dir`` on this host: the same instance
    for every run there (two runs cannot share a state directory), a new incarnation each
    run, so a restarted service's consumers get back at once what the killed run held
    (:mod:`processor.queues.services`)."""
    place = f"{socket.gethostname()}:{state_dir.resolve()}"
    instance = hashlib.sha256(place.encode()).hexdigest()[:10]
    return service_id(instance, int(time.time() * 1000))
