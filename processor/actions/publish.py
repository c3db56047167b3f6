"""What an action reads and what it publishes: a watched topic's records matched against
the action's Filter (:class:`Watched`), and the record ``amps-action-do-publish-message``
produces (:class:`ActionPublisher`), in the transaction of the event that caused it.

The published record: the message's body as the value (or the step's ``Data``, its
variables replaced: the event's ``{{AMPS_DATA}}``, ``{{AMPS_DATA_LENGTH}}``,
``{{AMPS_TOPIC}}``, ``{{AMPS_REASON}}``, ``{{AMPS_CORRELATION_ID}}`` (empty if the record
has none) and ``{{AMPS_SOW_KEY}}``; AMPS's defaults ``{{AMPS_DATETIME}}`` (ISO-8601, UTC)
and ``{{AMPS_UNIX_TIMESTAMP}}`` (seconds), both the transaction's time, and
``{{AMPS_BYTE_XX}}``, the byte of hex value XX), and headers ``sow.action`` (the action's
name), ``sow.action.event`` (the On module without ``amps-action-on-``),
``sow.action.reason`` (:data:`REASONS`),
``sow.action.topic`` (the watched topic) and ``sow.action.sow_key``. To a SOW topic it
goes like a publisher's record: keyed by the SowKey its Key fields give (or, for a topic
whose publishers give SowKeys, the watched record's SowKey) on that key's partition, and
the processor applies it as it applies any publish (a message it cannot key goes to the
dead-letter topic with the reason); to a plain topic, keyed by the watched record's SowKey.
"""

from __future__ import annotations

import re
from typing import Any

from processor import changelog
from processor.changelog.commands import DELTA_HEADER, DELTA_NATIVE
from processor.engine.transaction import PartitionBatch
from processor.errors import MessageError
from processor.expr import compile as compile_expression
from processor.keys import partition_for
from processor.messages import codec_for
from processor.publish.routes import PublishRoute, delta_key, publish_key
from processor.topology.actions import ActionDo, ActionSpec, time_variables
from processor.topology.model import SowTopic, Topic

ACTION_HEADER = "sow.action"
EVENT_HEADER = "sow.action.event"
REASON_HEADER = "sow.action.reason"
TOPIC_HEADER = "sow.action.topic"
SOW_KEY_HEADER = "sow.action.sow_key"
#: Why an action ran: the record expired (``time_limit``), was deleted, went out of focus
#: (no longer matches the Filter, deleted, expired), or kept matching it for the Duration.
REASONS = (b"time_limit", b"deleted", b"match", b"expired", b"timeout")
#: The size limit of a record is the log's; the processor dead-letters what it cannot apply.
_NO_LIMIT = 1 << 62
_VARIABLE = re.compile(rb"\{\{\s*([^}]*?)\s*\}\}")


class Watched:
    """A SOW topic's records as an action reads them: decoded, matched against a Filter
    (none: every record matches). Not thread-safe (the processor's loop owns it)."""

    def __init__(self, topic: SowTopic, filter_text: str) -> None:
        self.topic = topic
        self.codec = codec_for(topic)
        self.expression = compile_expression(filter_text) if filter_text else None

    def matches(self, envelope: bytes | None) -> bool:
        """Whether a record (its changelog envelope; None: none) matches the Filter."""
        if envelope is None:
            return False
        if self.expression is None:
            return True
        decoded = changelog.decode(envelope)
        message: Any
        try:
            message = self.codec.decode(decoded.data)
        except MessageError:
            message = None  # a message the filter cannot read matches only field-free filters
        return self.expression.matches(message, decoded.context())


class ActionPublisher:
    """Produces the record of one publish step (module doc) into a batch's transaction."""

    def __init__(self, action: ActionSpec, step: ActionDo, target: Topic) -> None:
        self.route = PublishRoute(target, _NO_LIMIT)
        self.sow = isinstance(target, SowTopic)
        self.delta = step.delta and self.sow  # to a plain topic, a delta is a publish
        self.data = step.data.encode()
        self.headers = [
            (ACTION_HEADER, action.name.encode()),
            (EVENT_HEADER, action.on.module.value.removeprefix("amps-action-on-").encode()),
        ]
        if self.delta:
            self.headers.append((DELTA_HEADER, DELTA_NATIVE))
        #: Records published since start (monitoring, tests).
        self.published = 0

    def publish(
        self, batch: PartitionBatch, source: str, sow_key: bytes, envelope: bytes, reason: bytes
    ) -> None:
        """Publish the record of a watched record (``envelope``) for ``reason``."""
        decoded = changelog.decode(envelope)
        body = decoded.data
        if self.data:
            correlation_id = (decoded.correlation_id or "").encode()
            data = self._render(body, source, sow_key, reason, correlation_id, batch.now_ms)
        else:
            data = body
        key = self._key(data, sow_key)
        headers = [
            *self.headers,
            (REASON_HEADER, reason),
            (TOPIC_HEADER, source.encode()),
            (SOW_KEY_HEADER, sow_key),
        ]
        route = self.route
        partition = partition_for(key or sow_key, route.partitions)
        batch.produce(route.kafka_topic, data, key, partition, headers)
        self.published += 1

    def _key(self, data: bytes, sow_key: bytes) -> bytes | None:
        """The record's key: its SowKey in the target (None when its Key fields cannot
        give one: the processor dead-letters it with the reason)."""
        route = self.route
        if not self.sow or route.key_function is None:
            return sow_key
        try:
            if self.delta:
                return delta_key(route, data, False, "").encode()
            return publish_key(route, data, "").encode()
        except Exception:  # a custom KeyGenerator may raise anything: the processor says why
            return None

    def _render(
        self,
        body: bytes,
        source: str,
        sow_key: bytes,
        reason: bytes,
        correlation_id: bytes,
        now_ms: int,
    ) -> bytes:
        values = {
            "AMPS_DATA": body,
            "AMPS_DATA_LENGTH": str(len(body)).encode(),
            "AMPS_TOPIC": source.encode(),
            "AMPS_SOW_KEY": sow_key,
            "AMPS_REASON": reason,
            "AMPS_CORRELATION_ID": correlation_id,
            **{name: text.encode() for name, text in time_variables(now_ms).items()},
        }

        def value(match: re.Match[bytes]) -> bytes:
            name = match[1].decode()
            if name.startswith("AMPS_BYTE_"):
                return bytes([int(name[10:], 16)])
            return values[name]

        return _VARIABLE.sub(value, self.data)
