"""The checks every topology format shares: unique topic names and Kafka topics.

Across one file or many, topic names are unique (a SOW topic and a plain topic may not
share one), and so are all Kafka topics the topology derives (each topic's input
``kafka_topic``; for a SOW topic also ``<kafka_topic>.sow-changelog`` and
``<kafka_topic>.sow-repartition``). The names of views, conflated topics and queues differ
from each other and from every topic's, except that a queue may bear the name of the
plain topic it reads (AMPS's default UnderlyingTopic is the queue's Name). Every problem raises
:class:`~processor.errors.TopologyError` naming the file, the field or element, what is
wrong and what is allowed. The format loaders call :func:`check_topic` and :func:`assemble`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from processor.errors import ExpressionError, ParseError, TopologyError
from processor.expr.construction import compile_construction
from processor.topology.action_rules import check_actions
from processor.topology.actions import ActionSpec
from processor.topology.message_types import traits as message_traits
from processor.topology.model import (
    KAFKA_TOPIC_NAME,
    ConflatedTopicSpec,
    Entry,
    PlainTopic,
    SowTopic,
    Topic,
    Topology,
    ViewSpec,
    default_kafka_topic,
)
from processor.topology.queue_spec import QueueSpec
from processor.topology.queue_topics import queue_topic
from processor.topology.upserts import UpsertKey
from processor.topology.view_topics import conflated_topic, view_topic

#: Longest ``kafka_topic``: Kafka allows 249 characters, and ``.sow-repartition`` is added.
MAX_KAFKA_TOPIC_LENGTH = 249 - len(".sow-repartition")

#: One loaded topic, with the file and the field path that defined it (for messages).
Loaded = tuple[Topic, str, str]


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a topology file; an unreadable file is a TopologyError."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"cannot read the file: {exc}", source=str(path)) from exc


def merge_topologies(parts: Sequence[Topology]) -> Topology:
    """One topology holding every topic of ``parts``; a topic name defined twice is an error,
    and so is security named by two of them."""
    named = [part.security for part in parts if part.security is not None]
    if len(named) > 1:
        raise TopologyError(
            f"security is named here and in {named[0].source} ({named[0].where}); name the "
            "entitlements file and logon in one file of the directory",
            source=named[1].source,
            where=named[1].where,
        )
    entries: list[Loaded] = []
    others: list[Entry] = []
    sources: list[str] = []
    for part in parts:
        source = part.sources[0] if part.sources else "<topology>"
        sources.extend(part.sources)
        entries.extend(
            (topic, source, f"topic {name!r}")
            for name, topic in [*part.topics.items(), *part.plain_topics.items()]
            if not (isinstance(topic, SowTopic) and topic.derived)  # rebuilt below
        )
        others.extend(part.entries())
    actions = tuple(action for part in parts for action in part.actions)
    merged = assemble(entries, tuple(sources), others, actions)
    return dataclasses.replace(merged, security=named[0]) if named else merged


def _at(source: str, where: str, current: str) -> str:
    return where if source == current else f"{source}: {where}"


def assemble(
    entries: Sequence[Loaded],
    sources: tuple[str, ...],
    others: Sequence[Entry] = (),
    actions: tuple[ActionSpec, ...] = (),
    alone: bool = True,
) -> Topology:
    """A :class:`Topology` of ``entries`` (SOW and plain topics, in order) and ``others``
    (views, conflated topics and queues, in order); names and derived Kafka topics must
    be unique. ``actions`` are checked against the topics (:func:`check_actions`) unless
    the file is not ``alone`` (one of a directory's: they are checked once merged)."""
    by_name: dict[str, Loaded] = {}
    kafka: dict[str, tuple[str, str, str, str]] = {}
    for topic, source, where in scoped_by_message_type([*entries, *_view_topics(entries, others)]):
        if topic.name in by_name:
            _, first_source, first_where = by_name[topic.name]
            raise TopologyError(
                f"topic {topic.name!r} is defined twice (first at "
                f"{_at(first_source, first_where, source)}); topic names must be unique",
                source=source,
                where=where,
            )
        by_name[topic.name] = (topic, source, where)
        derived: tuple[tuple[str, str], ...] = (("input", topic.kafka_topic),)
        if isinstance(topic, SowTopic):
            derived += (
                ("changelog", topic.changelog_topic),
                ("repartition", topic.repartition_topic),
            )
        for role, name in derived:
            if name in kafka:
                other, other_role, other_source, other_where = kafka[name]
                raise TopologyError(
                    f"Kafka topic {name!r} (the {role} topic of {topic.name!r}) is also the "
                    f"{other_role} topic of {other!r} (at "
                    f"{_at(other_source, other_where, source)}); every topic needs its "
                    "own kafka_topic (KafkaTopic in AMPS XML)",
                    source=source,
                    where=where,
                )
            kafka[name] = (topic.name, role, source, where)
    topics: dict[str, SowTopic] = {}
    plain: dict[str, PlainTopic] = {}
    for name, (topic, _, _) in by_name.items():
        if isinstance(topic, SowTopic):
            topics[name] = topic
        elif isinstance(topic, PlainTopic):
            plain[name] = topic
    views: dict[str, ViewSpec] = {}
    conflated: dict[str, ConflatedTopicSpec] = {}
    queues: dict[str, QueueSpec] = {}
    for entry in others:
        # A view's or conflated topic's name was checked with the topics: it is one.
        known = {} if isinstance(entry, ViewSpec | ConflatedTopicSpec) else by_name
        _check_entry_name(entry, known, {**views, **conflated, **queues})
        if isinstance(entry, ViewSpec):
            views[entry.name] = entry
        elif isinstance(entry, ConflatedTopicSpec):
            conflated[entry.name] = entry
        else:
            queues[entry.name] = entry
            _add_queue_topic(entry, topics, plain, kafka)
    if alone and actions:
        sow = {name: (t.message_type, t.derived) for name, t in topics.items()}
        kinds = {name: t.message_type for name, t in plain.items()}
        actions = check_actions(actions, sow, kinds)
    return Topology(topics, sources, plain, views, conflated, queues, actions=actions)


def _add_queue_topic(
    spec: QueueSpec,
    topics: dict[str, SowTopic],
    plain: dict[str, PlainTopic],
    kafka: dict[str, tuple[str, str, str, str]],
) -> None:
    """Add the SOW topic holding a queue's messages (:mod:`processor.topology.queue_topics`);
    its Kafka topics must be its own, except the plain topic it reads."""
    topic = queue_topic(spec, {**topics, **plain})
    roles = [
        ("changelog", topic.changelog_topic),
        ("repartition", topic.repartition_topic),
        ("deliveries", topic.deliveries_topic),
    ]
    if topic.kafka_topic == topic.state_topic:  # its own (several queues may read one)
        roles.insert(0, ("input", topic.kafka_topic))
    for role, name in roles:
        if name in kafka:
            other, other_role, other_source, other_where = kafka[name]
            raise TopologyError(
                f"Kafka topic {name!r} (the {role} topic of queue {spec.name!r}) is also "
                f"the {other_role} topic of {other!r} (at "
                f"{_at(other_source, other_where, spec.source)}); name the queue apart",
                source=spec.source,
                where=spec.where,
            )
        kafka[name] = (spec.name, role, spec.source, spec.where)
    topics[spec.name] = topic


def _view_topics(entries: Sequence[Loaded], others: Sequence[Entry]) -> list[Loaded]:
    """The SOW topics of the views and conflated topics among ``others``
    (:mod:`processor.topology.view_topics`)."""
    defined: dict[str, Topic] = {topic.name: topic for topic, _, _ in entries}
    out: list[Loaded] = []
    for entry in others:
        if isinstance(entry, ViewSpec):
            topic = view_topic(entry, defined)
        elif isinstance(entry, ConflatedTopicSpec):
            topic = conflated_topic(entry, defined)
        else:
            continue
        defined.setdefault(entry.name, topic)
        out.append((topic, entry.source, entry.where))
    return out


def scoped_by_message_type(entries: Sequence[Loaded]) -> list[Loaded]:
    """Topics are scoped by message type (AMPS: ``[json].[orders]`` is not
    ``[nvfix].[orders]``): when topics of different message types share a name, each is
    named ``[type].[name]``, and reads the Kafka topic ``name.type`` unless it names its
    own. Topics of one type sharing a name are left for :func:`assemble` to refuse."""
    types: dict[str, set[str]] = {}
    for topic, _, _ in entries:
        types.setdefault(topic.name, set()).add(topic.message_type)
    out: list[Loaded] = []
    for topic, source, where in entries:
        scoped = topic
        if len(types[topic.name]) > 1:
            kafka_topic = topic.kafka_topic
            if kafka_topic == default_kafka_topic(topic.name):
                kafka_topic = f"{kafka_topic}.{topic.message_type}"
            scoped = dataclasses.replace(
                topic, name=scoped_name(topic.message_type, topic.name), kafka_topic=kafka_topic
            )
        out.append((scoped, source, where))
    return out


def scoped_name(message_type: str, name: str) -> str:
    """The name of a topic that shares its name with topics of other message types."""
    return f"[{message_type}].[{name}]"


def _check_entry_name(entry: Entry, topics: dict[str, Loaded], earlier: dict[str, Entry]) -> None:
    """A view, conflated topic or queue must not take a name already in use by one of
    its message type (names are scoped by message type, as in AMPS)."""
    other = earlier.get(entry.name)
    if other is not None and other.message_type == entry.message_type:
        first = _at(other.source, other.where, entry.source)
    elif entry.name in topics and topics[entry.name][0].message_type == entry.message_type:
        topic, source, where = topics[entry.name]
        if (
            isinstance(entry, QueueSpec)
            and isinstance(topic, PlainTopic)
            and entry.underlying == entry.name
        ):
            return  # the queue reads the plain topic of its name, as AMPS's default does
        first = f"a topic, at {_at(source, where, entry.source)}"
    else:
        return
    raise TopologyError(
        f"{entry.name!r} is defined twice (first: {first}); views, conflated topics, queues "
        "and topics need names of their own",
        source=entry.source,
        where=entry.where,
    )


def check_topic(topic: Topic, name_of: Callable[[str], str]) -> tuple[str, str] | None:
    """The first rule ``topic`` breaks, as ``(model field, message)``, or None.

    ``name_of`` maps a model field name (``keys``, ``key_generator``...) to the name the
    format uses for it, so messages speak the user's language.
    """
    if isinstance(topic, SowTopic):
        broken = _check_sow(topic, name_of)
        if broken is not None:
            return broken
    name = topic.kafka_topic
    if (
        not KAFKA_TOPIC_NAME.match(name)
        or name in (".", "..")
        or len(name) > MAX_KAFKA_TOPIC_LENGTH
    ):
        origin = " (taken from the topic name)" if name == default_kafka_topic(topic.name) else ""
        return "kafka_topic", (
            f"Kafka topic {name!r}{origin} is not a legal Kafka topic name; allowed: letters, "
            f"digits, '.', '_' and '-', 1 to {MAX_KAFKA_TOPIC_LENGTH} characters; set "
            f"{name_of('kafka_topic')} to a legal name"
        )
    return None


def _check_sow(topic: SowTopic, name_of: Callable[[str], str]) -> tuple[str, str] | None:
    """The first rule of a SOW topic's own fields that ``topic`` breaks, or None."""
    keys, generator = name_of("keys"), name_of("key_generator")
    if topic.keys and topic.key_generator is not None:
        return "key_generator", (
            f"{keys} and {generator} are both set; the SowKey comes from the {keys} fields or "
            f"from a key generator, not both: remove one"
        )
    seen: set[str] = set()
    for path in topic.keys:
        if path in seen:
            return "keys", f"{keys} field {path!r} is listed twice; list each field once"
        seen.add(path)
    kind = topic.message_type
    traits = message_traits(kind)
    if not traits.parsed:
        if topic.keys:
            return "keys", (
                f"{kind} messages are not parsed, so a {kind} topic cannot have {keys} fields; "
                f"remove {keys} (publishers then provide the SowKey) or set a {generator}"
            )
        for field in ("hash_indexes", "indexes"):
            if getattr(topic, field):
                return field, (
                    f"{kind} messages are not parsed, so a {kind} topic cannot have "
                    f"{name_of(field)}; use a parsed message type"
                )
    if topic.key_domain is not None and not topic.keys:
        return "key_domain", (
            f"{name_of('key_domain')} seeds keys generated from {keys} fields, and this topic "
            f"has no {keys}; remove {name_of('key_domain')} or add {keys} fields"
        )
    for field in ("preprocessing", "enrichment"):
        texts = getattr(topic, field)
        if not texts:
            continue
        if not traits.builds:
            why = "are not parsed" if not traits.parsed else "cannot be built from fields"
            return field, (
                f"{kind} messages {why}, so a {kind} topic cannot have "
                f"{name_of(field)}; remove it or use another message type"
            )
        try:
            compile_construction(texts, enrichment=field == "enrichment")
        except (ParseError, ExpressionError) as exc:
            return field, f"{name_of(field)} field is not valid: {exc}"
    if topic.pattern is not None:
        pattern = name_of("pattern")
        for field in ("history", "preprocessing", "enrichment"):
            if getattr(topic, field):
                return field, f"a {pattern} topic cannot have {name_of(field)} (as in AMPS)"
        if not topic.keys:
            return "pattern", (
                f"a {pattern} topic needs {keys} fields: its records' SowKeys are made from "
                f"them and each topic's name, so the topics it stores never share one"
            )
        if topic.key_domain is not None:
            return "key_domain", (
                f"a {pattern} topic keys each topic's records with that topic's name; "
                f"{name_of('key_domain')} cannot be set"
            )
    broken = _check_upsert(topic, name_of)
    if broken is not None:
        return broken
    if topic.history is not None and topic.expiration_s is not None:
        return "expiration_s", (
            f"{name_of('expiration_s')} must be disabled when {name_of('history')} is set "
            "(as in AMPS): history keeps every version of a record for its Window"
        )
    return None


def _check_upsert(topic: SowTopic, name_of: Callable[[str], str]) -> tuple[str, str] | None:
    """The first rule of the topic's upsert topic (docs/upsert-tables.md) it breaks."""
    name = topic.upsert_topic
    if topic.upsert is None or name is None:
        return None
    upsert = name_of("upsert")
    if topic.upsert.key is UpsertKey.FIELDS and not topic.keys:
        return "upsert", (
            f"{upsert} key 'fields' keys the upsert topic by the {name_of('keys')} fields, "
            f"and this topic has none; use key sow_key or add {name_of('keys')} fields"
        )
    if topic.upsert.key is UpsertKey.FIELDS and topic.pattern is not None:
        return "upsert", (
            f"a {name_of('pattern')} topic's records of different topics may have the same "
            f"{name_of('keys')} values; key its {upsert} topic by sow_key"
        )
    own = (topic.kafka_topic, topic.changelog_topic, topic.repartition_topic)
    if not KAFKA_TOPIC_NAME.match(name) or name in (".", "..") or name in own:
        return "upsert", (
            f"upsert topic {name!r} is not a legal Kafka topic name of its own; allowed: "
            "letters, digits, '.', '_' and '-', and not the topic's input, changelog or "
            f"repartition topic; set the {upsert} topic to another name"
        )
    return None
