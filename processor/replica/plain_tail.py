"""The plain-topic tail: the live messages of topics without a SOW, as change events.

A plain topic (:class:`~processor.topology.model.PlainTopic`) has no processor and no
changelog: its input Kafka topic is all there is. One thread (:meth:`PlainTail.run`)
follows the input partitions of every plain topic, starting at their end when it starts
(what was published before is not delivered), and turns each message into a
:class:`~processor.changelog.events.ChangeEvent` its listeners (the subscription hub) handle
like a SOW topic's change: the message wrapped in a changelog envelope, no old state,
reason PUBLISH, SowKey = the record's key (empty when it has none), and position
``(input topic, partition, offset)``.

Guarantees:

* **In order.** Per partition, events come in offset order; the events of one read of
  the log form one unit, delivered to every listener registered when the unit was taken
  (under the tail's lock), on the tail's thread, after the lock is released.
* **No gap, no duplicate.** :meth:`PlainTail.read` runs a reader under the lock and
  returns the position vector (next offset per partition) it ran at: something
  registered by the reader (a subscription starting after that vector) sees every
  message past it, and the units it may also be offered hold only messages before it.
* **Ready.** Until every partition's start has been fetched (its first record or its
  end), positions are unknown and :meth:`ready` is False; :meth:`wait_ready` waits.
* **Bad input.** A message its topic's codec cannot read, or a record without a value,
  is not delivered; it is logged with its position (it stays in the log).

A broker that loses its log makes the tail read the partition again from offset 0 (see
:class:`~processor.log.ChangelogTail`); subscriptions started past the new offsets then
miss messages until the log reaches their start again.

Thread-safety: ``run`` is the only writer; every other method may be called from any
thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from processor.changelog import EnvelopeWriter
from processor.changelog.commands import CORRELATION_HEADER
from processor.changelog.events import (
    ChangeEvent,
    ChangeReason,
    Listener,
    ListenerHandle,
    Listeners,
)
from processor.errors import MessageError
from processor.log import ChangelogTail, LogPosition, Record, TopicPartitionKey, read_ready
from processor.messages import Codec, codec_for
from processor.topology.model import PlainTopic, Topology

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The logical start offset "the end of the partition" (Kafka's OFFSET_END).
END = -1
#: Most records one read of the log returns.
BATCH = 10_000
#: How long the tail blocks for a record when none is there.
IDLE_WAIT_S = 0.05


class PlainTail:
    """Live messages of every plain topic of a topology (see the module doc)."""

    def __init__(self, topology: Topology, tail: Callable[[], ChangelogTail]) -> None:
        self._tail_factory = tail
        self._by_kafka_topic: dict[str, PlainTopic] = {
            t.kafka_topic: t for t in topology.plain_topics.values()
        }
        self._codecs: dict[str, Codec] = {
            t.name: codec_for(t) for t in topology.plain_topics.values()
        }
        self._writers: dict[TopicPartitionKey, EnvelopeWriter] = {
            (t.kafka_topic, p): EnvelopeWriter(t.name, t.message_type, t.kafka_topic, p)
            for t in topology.plain_topics.values()
            for p in range(t.partitions)
        }
        #: Next offset per partition, as delivered (END: not known yet).
        self._next: dict[TopicPartitionKey, int] = dict.fromkeys(self._writers, END)
        self._listeners = Listeners()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        #: Messages not delivered because they could not be read (see the module doc).

    def stop(self) -> None:
        """Ask ``run`` to return; thread-safe."""
        self._stop.set()

    def run(self) -> None:
        """Follow the plain topics from their end until stopped."""
        tail = self._tail_factory()
        try:
            tail.assign([(t, p, END) for t, p in self._next])
            while not self._stop.is_set():
                self._advance(read_ready(tail, BATCH, IDLE_WAIT_S), tail)
        finally:
            tail.close()

    def _advance(self, records: Sequence[Record], tail: ChangelogTail) -> None:
        """Turn the records read into one unit of events; move the positions on. With no
        listener the records are only counted past (a plain topic feeding a queue is
        read here for nothing until someone subscribes to it)."""
        events = (
            [event for event in map(self._event, records) if event is not None]
            if (records and self._listeners)
            else None
        )
        states = tail.states()
        with self._changed:
            if records and events is None and self._listeners:  # one came meanwhile
                events = [event for event in map(self._event, records) if event is not None]
            moved = False
            for tp, state in states.items():
                if state.position >= 0 and state.position != self._next.get(tp, END):
                    self._next[tp] = state.position
                    moved = True
            listeners = self._listeners.current() if events else []
            if moved:
                self._changed.notify_all()
        if events and listeners:
            self._listeners.deliver(listeners, [events])

    def _event(self, record: Record) -> ChangeEvent | None:
        """The change event of one input record, or None when it cannot be delivered."""
        tp = (record.topic(), record.partition())
        topic = self._by_kafka_topic[tp[0]]
        data = record.value()
        problem = None
        if data is None:
            problem = "it has no value (a plain topic has no records to delete)"
        else:
            try:
                self._codecs[topic.name].decode(data)
            except MessageError as exc:
                problem = str(exc)
        if problem is not None or data is None:
            log.warning(
                "plain topic %s: the record at %s[%d] offset %d is not delivered: %s",
                topic.name,
                tp[0],
                tp[1],
                record.offset(),
                problem,
            )
            return None
        key = record.key() or b""
        correlation_id = None
        for name, raw in record.headers() or ():
            if name == CORRELATION_HEADER and raw is not None:
                correlation_id = raw.decode(errors="replace")
        published_ms = record.timestamp()[1]
        envelope = self._writers[tp].encode(
            record.offset(),
            key,
            data,
            published_ms,
            int(time.time() * 1000),
            correlation_id=correlation_id,
        )
        position = (tp[0], tp[1], record.offset())
        return ChangeEvent(topic.name, key, None, envelope, position, ChangeReason.PUBLISH)

    # -- readers -----------------------------------------------------------------------

    def ready(self) -> bool:
        """True once every partition's start position is known."""
        with self._changed:
            return all(offset >= 0 for offset in self._next.values())

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until ``ready()`` or the timeout; return whether it is."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(offset >= 0 for offset in self._next.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
        return True

    def wait_for(self, positions: Sequence[LogPosition], timeout_s: float) -> bool:
        """Block until the tail has read past every given (input topic, partition,
        offset), or the timeout; return whether it has. A subscription made afterwards
        does not receive those messages."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(self._next.get((t, p), END) > o for t, p, o in positions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
        return True

    def listen(self, listener: Listener) -> ListenerHandle:
        """Call ``listener`` with the events of every unit taken from now on."""
        with self._changed:
            return self._listeners.register(listener)

    def read(
        self, topics: Sequence[PlainTopic], reader: Callable[[], T]
    ) -> tuple[T, list[LogPosition]]:
        """Run ``reader`` under the lock; return its result and the position vector of
        the topics' partitions it ran at (every partition must be ready)."""
        with self._changed:
            result = reader()
            vector = [
                (t.kafka_topic, p, self._next[(t.kafka_topic, p)])
                for t in topics
                for p in range(t.partitions)
            ]
        return result, vector
