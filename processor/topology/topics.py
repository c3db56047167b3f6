"""Topic names in commands: a literal topic, or a regular expression over topic names.

AMPS treats a topic with regular-expression metacharacters as a pattern matched anywhere
in topic names (anchor with ``^``/``$``); results come in configuration order. A name that
is itself a configured topic is always literal, so ``ORDERS.v2`` names that topic rather
than matching ``ORDERSxv2``.

A Pattern topic stores every topic its pattern matches, and a conflated copy of one every
copy its ``TopicFormat`` names (:func:`pattern_topic`): a command naming one of those
topics reads the storing topic, restricted to the named topic's records
(:func:`topic_restriction`).

Queries and deletes concern SOW topics only (:func:`resolve_topics`); publishes and
subscriptions also take plain topics (:func:`resolve_publish_topic`,
:func:`resolve_subscribed_topics`), which have no SOW: naming one in a query is an
InvalidRequestError that says to subscribe instead.
"""

from __future__ import annotations

import functools
import re

from processor.errors import InvalidRequestError, UnknownTopicError
from processor.expr.regex import Matcher, compile_regex
from processor.topology.model import SowTopic, Topic, Topology

#: Characters that make a topic name a regular expression (spec 1.18, section 9 item 24).
REGEX_CHARACTERS = frozenset(".^$*+?()[]{}|\\")


#: ``[type].[name]``: a topic named with its message type (spec 1.3; topics are scoped by
#: message type, so ``[json].[orders]`` and ``[nvfix].[orders]`` are two topics).
_SCOPED = re.compile(r"^\[([A-Za-z0-9_-]+)\]\.\[([^\[\]]+)\]$")


def is_pattern(name: str) -> bool:
    """True when a topic name contains regular-expression metacharacters (a name scoped
    by its message type, ``[type].[name]``, is not a pattern)."""
    return _SCOPED.match(name) is None and any(c in REGEX_CHARACTERS for c in name)


def _literal(topology: Topology, name: str) -> str:
    """The topology's name for ``name``: itself, or for ``[type].[name]`` the name of the
    topic of that name and type (``name`` when it is the only topic of its name).
    Raises UnknownTopicError when a bare name is shared by topics of several types."""
    if name in topology.topics or name in topology.plain_topics:
        return name
    scoped = _SCOPED.match(name)
    if scoped is not None:
        message_type, bare = scoped[1].lower(), scoped[2]
        topic = topology.topics.get(bare) or topology.plain_topics.get(bare)
        if topic is not None and topic.message_type == message_type:
            return bare
        return name
    shared = [
        key for key in (*topology.topics, *topology.plain_topics) if key.endswith(f"].[{name}]")
    ]
    if shared:
        raise UnknownTopicError(
            f"topic {name!r} is defined for several message types: name one of {', '.join(shared)}"
        )
    return name


def _known(topology: Topology) -> str:
    text = ", ".join(sorted(topology.topics)) or "none"
    if topology.plain_topics:
        text += f"; plain topics (no SOW): {', '.join(sorted(topology.plain_topics))}"
    return text


@functools.lru_cache(maxsize=256)
def _pattern_regex(pattern: str) -> Matcher:
    """A Pattern topic's compiled regular expression (compiled once: it is matched on
    every command that names a topic the topology does not list)."""
    return compile_regex(pattern, what="Pattern", backtracking=False)


def stores_several(topic: SowTopic) -> bool:
    """Whether ``topic`` stores several topics, each under its own name (in its records'
    envelopes, ``TOPIC_NAME()``): a Pattern topic, or a conflated copy of one (its
    ``TopicFormat`` names the copy of each topic)."""
    return topic.pattern is not None or (
        topic.conflated is not None and topic.conflated.topic_format is not None
    )


def copy_name(topic_format: str, name: str) -> str:
    """The name of the conflated copy of the topic ``name``: ``topic_format`` with every
    ``%n`` replaced by ``name`` (``%n-C``: ``orders`` -> ``orders-C``)."""
    return topic_format.replace("%n", name)


def copied_name(topic_format: str, name: str) -> str | None:
    """The topic whose copy ``topic_format`` names ``name`` (the inverse of
    :func:`copy_name`), or None when ``name`` is no copy's name."""
    fixed = topic_format.split("%n")
    copies = len(fixed) - 1
    if not copies:
        return None
    length, rest = divmod(len(name) - sum(map(len, fixed)), copies)
    if length < 1 or rest or not name.startswith(fixed[0]):
        return None
    copied = name[len(fixed[0]) : len(fixed[0]) + length]
    return copied if copy_name(topic_format, copied) == name else None


def _stores(topology: Topology, topic: SowTopic, name: str) -> bool:
    """Whether ``topic`` (:func:`stores_several`) stores the topic ``name``."""
    if topic.pattern is not None:
        return bool(_pattern_regex(topic.pattern).search(name))
    spec = topic.conflated
    if spec is None or spec.topic_format is None:
        return False
    copied = copied_name(spec.topic_format, name)
    underlying = topology.topics.get(spec.underlying)
    return copied is not None and underlying is not None and _stores(topology, underlying, copied)


def pattern_topic(topology: Topology, name: str) -> SowTopic | None:
    """The topic that stores the topic ``name`` among others (:func:`stores_several`),
    or None: the first conflated copy of a Pattern topic whose ``TopicFormat`` names it
    a copy of one of its underlying topic's topics, else the first Pattern topic whose
    pattern matches it (configuration order). Copies come first because the pattern a
    copy's underlying topic has often matches the copy's name as well (``^orders`` and
    ``orders-C``), and that name is the copy's. A configured topic is never stored by
    another, except a Pattern topic's own name when its pattern matches it."""
    known = topology.topics.get(name)
    if (known is not None and known.pattern is None) or name in topology.plain_topics:
        return None
    several = [topic for topic in topology.topics.values() if stores_several(topic)]
    for topic in sorted(several, key=lambda t: t.pattern is not None):
        if _stores(topology, topic, name):
            return topic
    return None


def topic_restriction(topology: Topology, name: str) -> str | None:
    """The filter that keeps a command on ``name`` to its own records where a topic
    stores them with other topics' (:func:`stores_several`: ``TOPIC_NAME() = 'name'``;
    for a regular expression that reads such topics, ``TOPIC_NAME() LIKE 'name'``), else
    None. The storing topic's own name reads every topic it stores."""
    if name in topology.topics or name in topology.plain_topics or _SCOPED.match(name):
        return None
    if not is_pattern(name):
        if pattern_topic(topology, name) is None:
            return None
        quoted = name.replace("\\", "\\\\").replace("'", "\\'")
        return f"TOPIC_NAME() = '{quoted}'"
    if not any(stores_several(t) for t in topology.topics.values()):
        return None
    return f"TOPIC_NAME() LIKE '{name.replace(chr(39), chr(92) + chr(39))}'"


def restricted(filter_text: str, restriction: str | None) -> str:
    """A filter with a topic restriction added (``filter AND restriction``)."""
    if restriction is None:
        return filter_text
    return f"({filter_text}) AND {restriction}" if filter_text.strip() else restriction


def resolve_topic(topology: Topology, name: str) -> SowTopic:
    """The SOW topic called ``name`` (literal; for a topic a Pattern topic or a conflated
    copy of one stores, that topic: :func:`pattern_topic`). A plain topic is an
    InvalidRequestError (it has no SOW); an unknown name an UnknownTopicError naming the
    topics there are."""
    name = _literal(topology, name)
    try:
        return topology.topic(name)
    except KeyError:
        family = pattern_topic(topology, name)
        if family is not None:
            return family
        if name in topology.plain_topics:
            raise InvalidRequestError(
                f"topic {name} has no SOW: subscribe to it instead (it is a plain topic: "
                "messages are delivered live and nothing is stored)"
            ) from None
        raise UnknownTopicError(
            f"topic {name!r} has no SOW; SOW topics here: {_known(topology)}"
        ) from None


def resolve_topics(topology: Topology, name: str) -> list[SowTopic]:
    """The SOW topics a command names: the literal topic, or every SOW topic the pattern
    matches, in configuration order. Raises UnknownTopicError when nothing matches (or
    InvalidRequestError when only plain topics do)."""
    if not is_pattern(name) or name in topology.topics or name in topology.plain_topics:
        return [resolve_topic(topology, name)]
    # RE2 (linear time): a topic pattern from a request can never hang a thread.
    pattern = compile_regex(name, what="topic pattern", backtracking=False)
    matched = [t for t in topology.topics.values() if pattern.search(t.name) or stores_several(t)]
    if not matched:
        plain = [t for t in topology.plain_topics if pattern.search(t)]
        if plain:
            raise InvalidRequestError(
                f"the pattern {name!r} matches only topics without a SOW "
                f"({', '.join(plain)}): subscribe to them instead"
            )
        raise UnknownTopicError(
            f"no SOW topic matches the pattern {name!r}; SOW topics here: {_known(topology)}"
        )
    return matched


def resolve_publish_topic(topology: Topology, name: str) -> Topic:
    """The topic a publish names (literal): a SOW topic or a plain topic; for a queue,
    its DefaultPublishTarget."""
    name = _literal(topology, name)
    plain = topology.plain_topics.get(name)
    if plain is not None:
        return plain
    topic = resolve_topic(topology, name)
    if topic.queue is not None and topic.queue.default_publish_target != name:
        return resolve_publish_topic(topology, topic.queue.default_publish_target)
    return topic


def resolve_subscribed_topics(topology: Topology, name: str) -> list[Topic]:
    """The topics a subscription names: the literal topic (SOW or plain), or every topic
    the pattern matches, SOW topics first, each kind in configuration order. Raises
    UnknownTopicError when nothing matches."""
    if not is_pattern(name) or name in topology.topics or name in topology.plain_topics:
        queue = topology.topics.get(name)
        if queue is not None and queue.queue is not None and name not in topology.plain_topics:
            raise InvalidRequestError(
                f"{name} is a queue: consume it (gRPC Queues.Consume, SowClient.consume, sow "
                f"consume); subscribe to {queue.queue.underlying} for every message published"
            )
        return [resolve_publish_topic(topology, name)]
    pattern = compile_regex(name, what="topic pattern", backtracking=False)
    matched = [
        t
        for t in topology.every_topic()
        if not (isinstance(t, SowTopic) and t.queue is not None)
        and (pattern.search(t.name) or (isinstance(t, SowTopic) and stores_several(t)))
    ]
    if not matched:
        raise UnknownTopicError(
            f"no topic matches the pattern {name!r}; topics here: {_known(topology)}"
        )
    return matched


def writable(topic: SowTopic) -> SowTopic:
    """``topic``, unless it is a view or a conflated topic (InvalidRequestError): their
    records are derived from their underlying topics, never published or deleted."""
    if topic.view is not None:
        underlying = ", ".join(ref.name for ref in topic.view.underlying)
        raise InvalidRequestError(
            f"{topic.name} is a view: its records are computed from {underlying}; publish "
            "to or delete from those topics instead"
        )
    if topic.queue is not None:
        raise InvalidRequestError(
            f"{topic.name} is a queue: publish to {topic.queue.default_publish_target}, and "
            "acknowledge its messages by bookmark"
        )
    if topic.conflated is not None:
        raise InvalidRequestError(
            f"{topic.name} is a conflated topic: its records are copied from "
            f"{topic.conflated.underlying}; publish to or delete from that topic instead"
        )
    return topic
