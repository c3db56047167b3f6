"""One queue, compiled: its rules, its expressions, and what it reads.

A :class:`QueueDefinition` is made once per queue topic and shared by its partitions and
its feeds (immutable). It answers what every message needs decided when it is enqueued:
whether the queue takes it (``Filter``, ``RecoveryPoint``), its priority, whether it is a
barrier, and when it expires (``Expiration``, ``ExpirationModel``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from processor.changelog.commands import CORRELATION_HEADER, EXPIRATION_HEADER
from processor.engine.headers import expiration_seconds
from processor.errors import RegexBudgetError
from processor.expr import Expression, MessageContext
from processor.expr import compile as compile_expression
from processor.expr.budget import count_overrun
from processor.log import Headers
from processor.messages import Codec, codec_for
from processor.queues.ledger import QueueRules, priority_of
from processor.topology.model import SowTopic, Topic
from processor.topology.queue_spec import ExpirationModel
from processor.topology.queue_topics import plain_sources, queue_sources


def _compiled(text: str | None) -> Expression | None:
    return compile_expression(text) if text and text.strip() else None


def bookmark_of(topic: str, partition: int, offset: int) -> bytes:
    """A queue message's bookmark: where it was published (underlying Kafka topic,
    partition, offset). It is the message's SowKey in the queue topic."""
    return f"{topic}/{partition}/{offset}".encode()


def partition_of(bookmark: bytes | str, partitions: int) -> int:
    """The queue partition holding the message of ``bookmark`` (ValueError: not one)."""
    text = bookmark.decode() if isinstance(bookmark, bytes) else bookmark
    parts = text.rsplit("/", 2)
    if len(parts) != 3:
        raise ValueError(f"{text!r} is not a bookmark (topic/partition/offset)")
    return int(parts[1]) % partitions


class QueueDefinition:
    """One queue, compiled (immutable)."""

    __slots__ = (
        "barrier",
        "codec",
        "digest",
        "direct",
        "expiration_model",
        "expiration_ms",
        "filter",
        "plain_names",
        "priority",
        "rules",
        "sources",
        "spec",
        "topic",
    )

    def __init__(self, topic: SowTopic, topics: Mapping[str, Topic]) -> None:
        spec = topic.queue
        assert spec is not None, f"{topic.name} is not a queue"
        self.topic, self.spec = topic, spec
        self.codec: Codec = codec_for(topic)
        #: Whether the queue reads its plain topics' Kafka topics itself (else relays or
        #: SOW topics send it their publishes: ``sources``).
        plain = plain_sources(spec, topics)
        self.direct = bool(plain) and topic.kafka_topic != topic.state_topic
        #: The plain topic of each Kafka topic it reads directly.
        self.plain_names: dict[str, str] = {t.kafka_topic: t.name for t in plain}
        self.sources: tuple[str, ...] = (
            ()
            if self.direct
            else tuple(t.name for t in queue_sources(spec, topics) if isinstance(t, SowTopic))
        )
        self.filter = _compiled(spec.filter)
        self.priority = _compiled(spec.priority)
        self.barrier = _compiled(spec.barrier_expression)
        self.expiration_ms = None if spec.expiration_s is None else int(spec.expiration_s * 1000)
        self.expiration_model = spec.expiration_model
        self.rules = QueueRules(
            semantics=spec.semantics,
            fairness=spec.fairness_model,
            leasing=spec.leasing,
            lease_period_ms=None
            if spec.lease_period_s is None
            else int(spec.lease_period_s * 1000),
            max_backlog=spec.max_backlog,
            target_queue_depth=spec.target_queue_depth,
            max_per_subscription_backlog=spec.max_per_subscription_backlog,
            max_deliveries=spec.max_deliveries,
            max_cancels=spec.max_cancels,
            deferred_ack_ms=int(spec.deferred_ack_expiration_s * 1000),
        )
        #: What decides which messages the queue holds: a change starts the queue afresh
        #: (its partitions' state is dropped); every other option applies on restart.
        content = {
            "message_type": spec.message_type,
            "underlying": spec.underlying,
            "underlying_topics": spec.underlying_topics,
            "filter": spec.filter,
            "recovery_point": asdict(spec.recovery_point),
        }
        described = json.dumps(content, default=str, sort_keys=True)
        self.digest = hashlib.sha256(described.encode()).hexdigest()[:16].encode()

    def decode(self, data: bytes) -> Any:
        """A message's fields (DecodeError: not a message of the queue's type)."""
        return self.codec.decode(data)

    def takes(self, message: Any, context: MessageContext) -> bool:
        """Whether the queue's ``Filter`` takes the message."""
        return self.filter is None or self.filter.matches(message, context, overrun="queue")

    def priority_of(self, message: Any, context: MessageContext) -> int | None:
        if self.priority is None:
            return None
        try:
            return priority_of(self.priority(message, context))
        except RegexBudgetError:  # a pattern over its budget: the default priority, counted
            count_overrun("queue")
            return None

    def is_barrier(self, message: Any, context: MessageContext) -> bool:
        return self.barrier is not None and self.barrier.matches(message, context, overrun="queue")

    def expires_ms(self, published_ms: int, own_ms: int | None) -> int | None:
        """When a message published at ``published_ms`` expires, given its own expiration
        (``own_ms``, None: none), by the ``ExpirationModel``."""
        queue_ms = None if self.expiration_ms is None else published_ms + self.expiration_ms
        model = self.expiration_model
        if model is ExpirationModel.QUEUE or own_ms is None:
            return queue_ms
        if queue_ms is None or model is ExpirationModel.DEFAULT:
            return own_ms
        return max(queue_ms, own_ms) if model is ExpirationModel.LATEST else min(queue_ms, own_ms)


def publish_options(headers: Headers | None, published_ms: int) -> tuple[int | None, str | None]:
    """A plain publish's own expiration (its ``sow.expiration`` header; 0: none) and
    correlation id (MessageError: an expiration that is not a number of seconds)."""
    expires_ms = correlation_id = None
    for name, raw in headers or ():
        if name == EXPIRATION_HEADER and raw:
            seconds = expiration_seconds(raw)
            expires_ms = None if seconds == 0 else published_ms + int(seconds * 1000)
        elif name == CORRELATION_HEADER and raw is not None:
            correlation_id = raw.decode(errors="replace")
    return expires_ms, correlation_id
