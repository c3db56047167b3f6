"""SOW queries and the publish/delete gateway, independent of any transport.

The gRPC service and the CLI translate to and from these types; the rules (validation,
SowKey computation, read-your-writes) live here once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from processor import changelog
from processor.errors import (
    InvalidRequestError,
    PositionTimeoutError,
    UnknownTopicError,
    UnsupportedError,
)
from processor.keys import KeyFunction, key_function, partition_for, validate_user_key
from processor.log import Headers, LogWriter
from processor.messages import Codec, codec_for
from processor.query.replica import LogPosition, Replica
from processor.topology.model import SowTopic, Topology

MAX_BATCH_SIZE = 10000
DEFAULT_BATCH_SIZE = 10
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SowQuery:
    """A ``sow`` command. Filter, top_n, skip_n and order_by arrive with the next issue."""

    topic: str
    sow_keys: tuple[str, ...] = ()
    query_id: str = ""
    batch_size: int = 0
    min_position: tuple[LogPosition, ...] = ()
    timeout_s: float = 0.0
    filter: str = ""
    top_n: int = 0
    skip_n: int = 0
    order_by: str = ""


@dataclass(frozen=True, slots=True)
class QueryStats:
    """Counts reported in the group end."""

    topic_matches: int
    matches: int
    records_returned: int
    elapsed_us: int


@dataclass(slots=True)
class QueryResult:
    """A query's records, batched, and the position vector of the snapshot it read."""

    query_id: str
    topic: str
    snapshot: list[LogPosition]
    batches: list[list[changelog.Envelope]] = field(default_factory=list)
    stats: QueryStats | None = None


def resolve_topic(topology: Topology, name: str) -> SowTopic:
    """The SOW topic called ``name``; UnknownTopicError names the topics there are."""
    try:
        return topology.topic(name)
    except KeyError:
        known = ", ".join(sorted(topology.topics)) or "none"
        raise UnknownTopicError(f"topic {name!r} has no SOW; SOW topics here: {known}") from None


class QueryEngine:
    """Runs SOW queries against the read replica. Thread-safe."""

    def __init__(self, topology: Topology, replica: Replica) -> None:
        self.topology = topology
        self.replica = replica

    def validate(self, query: SowQuery) -> SowTopic:
        """Check a query before anything runs; raise a typed error naming the problem."""
        topic = resolve_topic(self.topology, query.topic)
        if query.batch_size < 0 or query.batch_size > MAX_BATCH_SIZE:
            raise InvalidRequestError(
                f"BatchSize {query.batch_size} is out of range: use 1 to {MAX_BATCH_SIZE} "
                f"(0 means the default, {DEFAULT_BATCH_SIZE})"
            )
        if query.skip_n and not query.top_n:
            raise InvalidRequestError("skip_n requires top_n")
        if query.filter or query.top_n or query.skip_n or query.order_by:
            raise UnsupportedError(
                "filter, top_n, skip_n and OrderBy are not implemented yet; "
                "query by topic and SowKeys for now"
            )
        return topic

    def run(self, query: SowQuery) -> QueryResult:
        """Validate, wait for ``min_position``, snapshot, and batch the results."""
        topic = self.validate(query)
        if query.min_position:
            timeout = query.timeout_s or DEFAULT_TIMEOUT_S
            if not self.replica.wait_for(query.min_position, timeout):
                raise PositionTimeoutError(
                    f"the SOW did not reach log positions {list(query.min_position)} within "
                    f"{timeout:g}s; the processor may be behind or stopped"
                )
        started = time.perf_counter()
        keys = tuple(k.encode() for k in query.sow_keys)
        rows, vector = self.replica.snapshot(topic, keys)
        size = query.batch_size or DEFAULT_BATCH_SIZE
        envelopes = [changelog.decode(value) for _, value in rows]
        result = QueryResult(query.query_id, topic.name, vector)
        result.batches = [envelopes[i : i + size] for i in range(0, len(envelopes), size)]
        topic_matches = len(rows) if keys else self.replica.count(topic)
        result.stats = QueryStats(
            topic_matches=topic_matches,
            matches=len(envelopes),
            records_returned=len(envelopes),
            elapsed_us=int((time.perf_counter() - started) * 1e6),
        )
        return result


@dataclass(frozen=True, slots=True)
class Published:
    """Where a publish landed, and the SowKey it was given."""

    position: LogPosition
    sow_key: str


class Gateway:
    """Turns publish and delete commands into log records (the gRPC and CLI entry point).

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
            headers.append(("sow.expiration", str(max(expiration_s, 0)).encode()))
        if correlation_id:
            headers.append(("sow.correlation_id", correlation_id.encode()))
        raw = key.encode()
        position = self.writer.send(
            topic.kafka_topic, raw, data, partition_for(raw, topic.partitions), headers or None
        )
        return Published(position, key)

    def delete(
        self, topic_name: str, sow_keys: Sequence[str], timeout_s: float = 0.0
    ) -> tuple[int, list[LogPosition]]:
        """Delete records by SowKey through the log; wait and count how many existed."""
        topic = resolve_topic(self.topology, topic_name)
        if not sow_keys:
            raise InvalidRequestError("sow_delete by keys needs at least one SowKey")
        keys = list(dict.fromkeys(sow_keys))
        if topic.user_keyed:
            keys = [validate_user_key(k) for k in keys]
        records = [
            (topic.kafka_topic, k.encode(), None, partition_for(k.encode(), topic.partitions), None)
            for k in keys
        ]
        positions = self.writer.send_many(records)
        if self.replica is None:
            return -1, positions
        timeout = timeout_s or DEFAULT_TIMEOUT_S
        if not self.replica.wait_for(positions, timeout):
            raise PositionTimeoutError(
                f"the deletes were written to the log at {positions} but not applied within "
                f"{timeout:g}s; they will still be applied when the processor catches up"
            )
        return self.replica.deleted(positions), positions
