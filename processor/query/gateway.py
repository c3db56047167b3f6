"""The publish and sow_delete gateway: commands become records on the transaction log.

The gRPC service and the CLI use it; the rules (validation, SowKey computation, waiting for
the effect of a delete) live here once. Nothing here writes state: the processor applies
the commands in log order (see :mod:`processor.commands`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from processor.commands import (
    CORRELATION_HEADER,
    EXPIRATION_HEADER,
    FILTER_DELETE_KEY,
    FILTER_HEADER,
)
from processor.errors import InvalidRequestError, PositionTimeoutError
from processor.expr import compile as compile_expression
from processor.keys import KeyFunction, key_function, partition_for, validate_user_key
from processor.log import Headers, LogWriter
from processor.messages import Codec, codec_for
from processor.query.replica import LogPosition, Replica
from processor.query.topics import resolve_topic, resolve_topics
from processor.topology.model import SowTopic, Topology

DEFAULT_TIMEOUT_S = 30.0

LogRecord = tuple[str, bytes | None, bytes | None, int, Headers | None]


@dataclass(frozen=True, slots=True)
class Published:
    """Where a publish landed, and the SowKey it was given."""

    position: LogPosition
    sow_key: str


@dataclass(frozen=True, slots=True)
class Deleted:
    """The effect of a sow_delete: how many records it removed (-1 when not waited for)
    and where its commands landed in the log."""

    records_deleted: int
    positions: list[LogPosition]


class Gateway:
    """Turns publish and delete commands into log records. Thread-safe.

    The SowKey is computed here, before the record enters the log, with the same generator
    the processor uses, and the record goes to its SowKey's partition.
    """

    def __init__(self, topology: Topology, writer: LogWriter, replica: Replica | None) -> None:
        self.topology = topology
        self.writer = writer
        self.replica = replica
        self._codecs: dict[str, Codec] = {}
        self._key_functions: dict[str, KeyFunction | None] = {}

    def codec(self, topic: SowTopic) -> Codec:
        """The topic's codec (made once)."""
        codec = self._codecs.get(topic.name)
        if codec is None:
            codec = self._codecs[topic.name] = codec_for(topic)
        return codec

    def sow_key_for(self, topic: SowTopic, data: bytes, sow_key: str = "") -> str:
        """The SowKey of a message: generated, or validated when publisher-provided."""
        if topic.name not in self._key_functions:
            self._key_functions[topic.name] = key_function(topic)
        function = self._key_functions[topic.name]
        if function is None:
            return validate_user_key(sow_key)
        if sow_key:
            raise InvalidRequestError(
                f"topic {topic.name} generates its SowKeys "
                f"({', '.join(topic.keys) or 'custom key generator'}); do not pass a SowKey"
            )
        return function(self.codec(topic).decode(data))

    def publish(
        self,
        topic_name: str,
        data: bytes,
        sow_key: str = "",
        expiration_s: float = 0.0,
        correlation_id: str = "",
        text_form: bool = False,
    ) -> Published:
        """Validate and key a message, write it to the log, return its position.

        With ``text_form`` the message arrives as text (JSON; Base64 for binary topics)
        and is encoded in the topic's message type first.
        """
        topic = resolve_topic(self.topology, topic_name)
        if text_form:
            data = self.codec(topic).from_text(data)
        key = self.sow_key_for(topic, data, sow_key)
        headers: Headers = []
        if expiration_s:
            headers.append((EXPIRATION_HEADER, str(max(expiration_s, 0)).encode()))
        if correlation_id:
            headers.append((CORRELATION_HEADER, correlation_id.encode()))
        raw = key.encode()
        position = self.writer.send(
            topic.kafka_topic, raw, data, partition_for(raw, topic.partitions), headers or None
        )
        return Published(position, key)

    def delete(self, topic_name: str, sow_keys: Sequence[str], timeout_s: float = 0.0) -> Deleted:
        """Delete records by SowKey."""
        topic = resolve_topic(self.topology, topic_name)
        if not sow_keys:
            raise InvalidRequestError("sow_delete by keys needs at least one SowKey")
        keys = list(dict.fromkeys(sow_keys))
        if topic.user_keyed:
            keys = [validate_user_key(k) for k in keys]
        return self._write_deletes(
            [
                (
                    topic.kafka_topic,
                    k.encode(),
                    None,
                    partition_for(k.encode(), topic.partitions),
                    None,
                )
                for k in keys
            ],
            timeout_s,
        )

    def delete_by_filter(self, topic_name: str, text: str, timeout_s: float = 0.0) -> Deleted:
        """Delete every record matching a filter (``1=1`` deletes all) in the topic, or in
        every topic a pattern matches. The filter is checked before anything is written."""
        topics = resolve_topics(self.topology, topic_name)
        if not text.strip():
            raise InvalidRequestError("sow_delete by filter needs a filter; use 1=1 for all")
        # Build the evaluation code too, so everything the processor will do with the
        # filter is known to work before any command is written.
        _ = compile_expression(text).source
        headers: Headers = [(FILTER_HEADER, text.encode())]
        commands: list[LogRecord] = [
            (t.kafka_topic, FILTER_DELETE_KEY, None, p, headers)
            for t in topics
            for p in range(t.partitions)
        ]
        return self._write_deletes(commands, timeout_s)

    def delete_by_data(
        self, topic_name: str, data: bytes, timeout_s: float = 0.0, text_form: bool = False
    ) -> Deleted:
        """Delete the record that publishing this message would update."""
        topic = resolve_topic(self.topology, topic_name)
        if topic.user_keyed:
            raise InvalidRequestError(
                f"topic {topic.name} has publisher-provided SowKeys, so a message does not "
                "say which record it would update; delete by SowKeys instead"
            )
        if text_form:
            data = self.codec(topic).from_text(data)
        return self.delete(topic.name, [self.sow_key_for(topic, data)], timeout_s)

    def _write_deletes(self, commands: list[LogRecord], timeout_s: float) -> Deleted:
        positions = self.writer.send_many(commands)
        if self.replica is None:
            return Deleted(-1, positions)
        timeout = timeout_s or DEFAULT_TIMEOUT_S
        if not self.replica.wait_for(positions, timeout):
            raise PositionTimeoutError(
                f"the deletes were written to the log at {positions} but not applied within "
                f"{timeout:g}s; they will still be applied when the processor catches up"
            )
        return Deleted(self.replica.deleted(positions), positions)
