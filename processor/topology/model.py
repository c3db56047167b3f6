"""The topology model: frozen descriptions of SOW topics and plain topics, and of the
other entries of an AMPS ``<SOW>`` section (views, conflated topics, queues), shared by
every loader.

A :class:`Topology` is what the YAML loader and the AMPS-configuration loader both
produce; nothing downstream knows which format it came from. Views, conflated topics and
queues are served as SOW topics the processor derives (issues 21 and 22).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from types import MappingProxyType
from typing import Any

from processor.errors import ValueFormatError
from processor.topology.actions import ActionSpec
from processor.topology.queue_spec import QueueSpec
from processor.topology.security_spec import SecuritySpec
from processor.topology.upserts import UpsertSpec

#: Kafka topic names: legal characters and length (Kafka's own rule).
KAFKA_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def default_kafka_topic(name: str) -> str:
    """The Kafka topic a topic reads unless it names one: its name, with AMPS's path-like
    separators (``/ett/order``) turned into dots (``ett.order``), since Kafka topic names
    have no ``/``. Other characters Kafka does not allow stay, and the topology refuses
    them with a message saying to set the Kafka topic."""
    return name.replace("/", ".").strip(".") if "/" in name else name


class Durability(Enum):
    """Whether a SOW topic's state survives a restart of its processor."""

    PERSISTENT = "persistent"
    TRANSIENT = "transient"


class RecoveryKind(Enum):
    """Where a transient topic starts reading the transaction log when it rebuilds."""

    EPOCH = "epoch"
    NOW = "now"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class RecoveryPoint:
    """AMPS ``RecoveryPoint``: epoch (whole log), now (only new publishes) or a timestamp."""

    kind: RecoveryKind = RecoveryKind.EPOCH
    timestamp: datetime | None = None

    def __post_init__(self) -> None:
        if (self.kind is RecoveryKind.TIMESTAMP) != (self.timestamp is not None):
            raise ValueFormatError(
                "a timestamp RecoveryPoint needs a timestamp, and only it has one"
            )

    @property
    def timestamp_ms(self) -> int | None:
        """Milliseconds since the epoch of a timestamp recovery point, else None."""
        return None if self.timestamp is None else int(self.timestamp.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class KeyGeneratorSpec:
    """A custom SowKey generator: a dotted Python path to a factory, and its options.

    The factory is called once as ``factory(topic_definition, options)`` and returns a
    callable that maps a decoded message to its SowKey string.
    """

    factory: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class History:
    """AMPS ``History``: keep past versions of every record for historical queries.

    ``window_s`` is how far back historical queries reach (older versions are pruned; the
    latest state of every record is always kept); ``granularity_s`` is the shortest time
    between two saved versions of one record (0: every version is saved).
    """

    window_s: float
    granularity_s: float

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise ValueFormatError(f"History Window must be positive, got {self.window_s:g}s")
        if self.granularity_s < 0 or self.granularity_s > self.window_s:
            raise ValueFormatError(
                f"History Granularity must be from 0 to the Window ({self.window_s:g}s), "
                f"got {self.granularity_s:g}s"
            )


@dataclass(frozen=True, slots=True)
class HashIndexSpec:
    """A configured hash index: exact-match and IN lookups over exactly these fields."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnusedOption:
    """An AMPS option that was validated but has no effect in kafka-sow, and why
    (``FileName``, the growth and sizing options, ``Pattern`` until it is implemented)."""

    element: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class SchemaRegistry:
    """Where a topic in the Schema Registry wire format finds its schemas: the registry's
    ``url`` (several, comma-separated, tried in turn), the ``subject`` whose latest version
    encodes the messages kafka-sow builds ("": ``<kafka_topic>-value``), and protobuf-sr's
    ``message`` type for them ("": the file's first) (docs/schema-registry.md)."""

    url: str
    subject: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class MessagePart:
    """One part of a composite message type: a message type and what it is configured
    with (the fields of the same names of :class:`Topic`)."""

    message_type: str
    schema: str | None = None
    proto_type: str | None = None
    field_separator: bytes = b"\x01"


@dataclass(frozen=True, slots=True)
class Topic:
    """What every topic has: a name, a message type (with what it is configured with:
    a ``schema``, a protobuf ``proto_type``, a fix ``field_separator``, a composite
    type's ``parts``), and the input Kafka topic it is read from (``kafka_topic``,
    default the name) with its partition count."""

    name: str
    message_type: str = "json"
    kafka_topic: str = ""
    partitions: int = 1
    #: The schema file of a type that needs one (``traits(message_type).schema``): the
    #: Avro schema (.avsc) for avro; the .proto file or descriptor set for protobuf.
    schema: str | None = None
    #: The byte that ends each field of a fix or nvfix message (AMPS FieldSeparator).
    field_separator: bytes = b"\x01"
    #: The protobuf message type (``package.Message``) the topic's messages are.
    proto_type: str | None = None
    #: A composite type's parts, in the order they are in each message.
    parts: tuple[MessagePart, ...] = ()
    #: The Schema Registry of a type in its wire format (``traits(...).registry``).
    schema_registry: SchemaRegistry | None = None

    def __post_init__(self) -> None:
        if not self.kafka_topic:
            object.__setattr__(self, "kafka_topic", default_kafka_topic(self.name))


def message_format(topic: Topic | MessagePart) -> dict[str, Any]:
    """The fields that say a topic's message type and its configuration, for a topic
    that takes its messages' type from another (a conflated topic, a queue, a relay)."""
    return {
        "message_type": topic.message_type,
        "schema": topic.schema,
        "field_separator": topic.field_separator,
        "proto_type": topic.proto_type,
        "parts": topic.parts if isinstance(topic, Topic) else (),
        "schema_registry": topic.schema_registry if isinstance(topic, Topic) else None,
    }


@dataclass(frozen=True, slots=True)
class SowTopic(Topic):
    """One SOW topic: the processor keeps the latest record per SowKey.

    ``keys`` are the Key paths (``/a/b``); empty means publishers provide the SowKey,
    unless ``key_generator`` is set. ``key_domain`` defaults to the topic name.
    """

    keys: tuple[str, ...] = ()
    key_domain: str | None = None
    key_generator: KeyGeneratorSpec | None = None
    durability: Durability = Durability.PERSISTENT
    recovery_point: RecoveryPoint = field(default_factory=RecoveryPoint)
    #: Default lifetime of a record in seconds; None means expiration is disabled,
    #: 0 means enabled for per-message expiration only.
    expiration_s: float | None = None
    hash_indexes: tuple[HashIndexSpec, ...] = ()
    indexes: tuple[str, ...] = ()
    #: Historical versions kept for historical queries (None: no history).
    history: History | None = None
    #: Preprocessing fields (``expr AS /target``), applied before the SowKey is computed.
    preprocessing: tuple[str, ...] = ()
    #: Enrichment fields, applied after the SowKey is computed (``OF PREVIOUS`` allowed).
    enrichment: tuple[str, ...] = ()
    #: A regular expression (AMPS ``Pattern``): the topic stores every topic whose name the
    #: pattern matches (searched, as AMPS matches topic patterns), each as its own set of
    #: records in this topic's store and changelog (see docs/topology.md "Pattern topics").
    pattern: str | None = None
    #: Options accepted without effect (AMPS XML ``FileName``, ``SlabSize``...), and why.
    unused_options: tuple[UnusedOption, ...] = ()
    #: The view whose records this topic holds (None: a topic publishers write). A view's
    #: records are derived by the processor from its underlying topics' changes
    #: (:mod:`processor.views`); its ``kafka_topic`` carries those changes to it, and
    #: nothing else may publish to it.
    view: ViewSpec | None = None
    #: The conflated topic whose records this topic holds (None: not one): the latest
    #: state of its underlying topic's records, written at most once per interval per
    #: record (:mod:`processor.views.conflation`); read-only, as a view.
    conflated: ConflatedTopicSpec | None = None
    #: The queue whose messages this topic holds (None: not one), keyed by bookmark
    #: (:mod:`processor.queues`). Over one plain topic it reads that topic's Kafka
    #: topic; over SOW topics, what the processor sends it. Publishes to it go to the
    #: queue's DefaultPublishTarget.
    queue: QueueSpec | None = None
    #: The queue this topic relays its plain topic's publishes to (None: not a relay): a
    #: processor-only topic (never served) whose partitions send each publish to the
    #: queue's one partition (:mod:`processor.topology.queue_topics`).
    relay_to: str | None = None
    #: What its changelog and repartition topics are named after (default
    #: ``kafka_topic``; a queue's own name, since queues may read the same topic).
    state_topic: str = ""
    #: Its upsert-table view (None: none): a compacted topic keyed by record, holding the
    #: stored message, with a tombstone for each removal (:mod:`processor.upserts`).
    upsert: UpsertSpec | None = None

    @property
    def upsert_topic(self) -> str | None:
        """The Kafka topic of its upsert-table view, or None."""
        if self.upsert is None:
            return None
        return self.upsert.topic or f"{self.state_topic or self.kafka_topic}.sow-upsert"

    @property
    def derived(self) -> bool:
        """Whether the processor derives this topic's records (a view, a conflated topic
        or a queue): publishers never write it."""
        return (
            self.view is not None
            or self.conflated is not None
            or self.queue is not None
            or self.relay_to is not None
        )

    @property
    def deliveries_topic(self) -> str:
        """A queue's deliveries: the leases and barrier messages its partitions hand
        out, read by the query services (:mod:`processor.queues.deliveries`)."""
        return f"{self.state_topic or self.kafka_topic}.queue-deliveries"

    @property
    def domain(self) -> str:
        """The KeyDomain used for SowKey generation (the topic name unless configured)."""
        return self.key_domain if self.key_domain is not None else self.name

    @property
    def user_keyed(self) -> bool:
        """True when publishers must provide the SowKey (no Key and no KeyGenerator)."""
        return not self.keys and self.key_generator is None

    @property
    def changelog_topic(self) -> str:
        """The compacted changelog topic holding this SOW topic's state."""
        return f"{self.state_topic or self.kafka_topic}.sow-changelog"

    @property
    def repartition_topic(self) -> str:
        """Where records whose Kafka key is not their SowKey are re-keyed."""
        return f"{self.state_topic or self.kafka_topic}.sow-repartition"


@dataclass(frozen=True, slots=True)
class PlainTopic(Topic):
    """A topic without a SOW (AMPS: a topic with no SOW entry): publishers publish to its
    input Kafka topic, subscribers receive each message live, and nothing is stored. It
    has no keys, no changelog and no repartition topic, and the processor never reads it:
    it lives in :attr:`Topology.plain_topics`, never in :attr:`Topology.topics`.
    """


@dataclass(frozen=True, slots=True)
class TopicRef:
    """A topic an entry reads, by name; ``message_type`` when the configuration qualified
    it (``[json].[ORDERS]``)."""

    name: str
    message_type: str | None = None


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """One view ``Join``: ``[left]./field = [right]./field``. AMPS compares the two values
    as strings; the left-hand topic of the first Join is the preserved side."""

    text: str
    left: TopicRef
    left_field: str
    right: TopicRef
    right_field: str


class ViewConflation(Enum):
    """A view's ``Conflation``: every update processed in order, or pending ones replaced."""

    NONE = "none"
    INLINE = "inline"


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """An AMPS ``<View>``: an aggregation over one topic or a join of several (issue 21).

    ``underlying`` is the one topic read, or every topic the ``joins`` name (first seen
    first); ``projection`` and ``grouping`` are the ``Field`` texts (compiled when the
    file was loaded); ``filter`` only without joins. ``source``/``where``: the file and
    element that defined it.
    """

    name: str
    message_type: str
    underlying: tuple[TopicRef, ...]
    projection: tuple[str, ...]
    grouping: tuple[str, ...]
    joins: tuple[JoinSpec, ...] = ()
    schema: str | None = None
    key_domain: str | None = None
    conflation: ViewConflation = ViewConflation.NONE
    filter: str | None = None
    hash_indexes: tuple[HashIndexSpec, ...] = ()
    join_null_equivalency: bool = False
    unused_options: tuple[UnusedOption, ...] = ()
    source: str = ""
    where: str = ""
    #: The view topic's Kafka topics and partitions (YAML; 0: as many as the underlying
    #: topic with the most; "": the name's default Kafka topic).
    partitions: int = 0
    kafka_topic: str = ""
    #: The view topic's upsert topic (YAML; docs/upsert-tables.md), keyed by SowKey.
    upsert: UpsertSpec | None = None


@dataclass(frozen=True, slots=True)
class ConflatedTopicSpec:
    """An AMPS ``<ConflatedTopic>``: the underlying topic's current values republished at
    most once per ``interval_s`` per SowKey (issue 21). ``topic_format`` (``%n-C``) names
    the copies when the underlying topic is a ``Pattern`` topic."""

    name: str
    underlying: str
    message_type: str
    interval_s: float = 5.0
    schema: str | None = None
    filter: str | None = None
    hash_indexes: tuple[HashIndexSpec, ...] = ()
    topic_format: str | None = None
    enrichment: tuple[str, ...] = ()
    source: str = ""
    where: str = ""


#: Every SOW entry kafka-sow parses but does not serve yet.
Entry = ViewSpec | ConflatedTopicSpec | QueueSpec


@dataclass(frozen=True, slots=True)
class Topology:
    """Every topic the product serves, by name, plus where it was loaded from.

    ``topics`` are the SOW topics (the processor keeps their state); ``plain_topics``
    the topics without a SOW (live subscriptions only). A name is in one of them at most
    (but see queues, below).
    ``views``, ``conflated_topics`` and ``queues`` are the other entries of an AMPS
    ``<SOW>`` section, each also a SOW topic in ``topics`` (its ``view``, ``conflated``
    or ``queue`` set; :mod:`processor.topology.unserved` names those not served); their
    names differ from every topic's, except a queue's own underlying plain topic (then
    the name is in both ``topics``, for the queue, and ``plain_topics``).
    """

    topics: Mapping[str, SowTopic]
    sources: tuple[str, ...] = ()
    plain_topics: Mapping[str, PlainTopic] = field(default_factory=lambda: MappingProxyType({}))
    views: Mapping[str, ViewSpec] = field(default_factory=lambda: MappingProxyType({}))
    conflated_topics: Mapping[str, ConflatedTopicSpec] = field(
        default_factory=lambda: MappingProxyType({})
    )
    queues: Mapping[str, QueueSpec] = field(default_factory=lambda: MappingProxyType({}))
    #: The entitlements file and logon the topology names (None: it names none; the
    #: settings say it, and win where both do: :mod:`processor.topology.security_spec`).
    security: SecuritySpec | None = None
    #: The actions (docs/actions.md; :mod:`processor.topology.actions`), in order.
    actions: tuple[ActionSpec, ...] = ()

    def topic(self, name: str) -> SowTopic:
        """The SOW topic called ``name``; raises KeyError when there is none."""
        return self.topics[name]

    def every_topic(self) -> list[Topic]:
        """SOW topics then plain topics, each in configuration order."""
        return [*self.topics.values(), *self.plain_topics.values()]

    def entries(self) -> list[Entry]:
        """Views, conflated topics then queues, each in configuration order."""
        return [*self.views.values(), *self.conflated_topics.values(), *self.queues.values()]

    def by_kafka_topic(self) -> dict[str, SowTopic]:
        """SOW topics indexed by their input Kafka topic."""
        return {t.kafka_topic: t for t in self.topics.values()}
