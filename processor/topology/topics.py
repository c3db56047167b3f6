"""Topic names in commands: a literal topic, or a regular expression over topic names.

AMPS treats a topic with regular-expression metacharacters as a pattern matched anywhere
in topic names (anchor with ``^``/``$``); results come in configuration order. A name that
is itself a configured topic is always literal, so ``ORDERS.v2`` names that topic rather
than matching ``ORDERSxv2``.

Queries and deletes concern SOW topics only (:func:`resolve_topics`); publishes and
subscriptions also take plain topics (:func:`resolve_publish_topic`,
:func:`resolve_subscribed_topics`), which have no SOW: naming one in a query is an
InvalidRequestError that says to subscribe instead.
"""

from __future__ import annotations

import functools
import re

from processor.errors import InvalidRequestError, UnknownTopicError
from processor.expr.regex import Regex, compile_regex
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
def _pattern_regex(pattern: str) -> Regex:
    """A Pattern topic's compiled regular expression (compiled once: it is matched on
    every command that names a topic the topology does not list)."""
    return compile_regex(pattern, what="Pattern")


def pattern_topic(topology: Topology, name: str) -> SowTopic | None:
    """The Pattern topic that stores the topic ``name`` (the first, in configuration
    order, whose pattern matches it), or None. A configured topic is never a Pattern
    topic's, except a Pattern topic's own name when its pattern matches it."""
    known = topology.topics.get(name)
    if (known is not None and known.pattern is None) or name in topology.plain_topics:
        return None
    for topic in topology.topics.values():
        if topic.pattern is not None and _pattern_regex(topic.pattern).search(name):
            return topic
    return None


def topic_restriction(topology: Topology, name: str) -> str | None:
    """The filter that keeps a command on ``name`` to its own records where a Pattern topic
    stores them with other topics' (``TOPIC_NAME() = 'name'``; for a regular expression
    that reads Pattern topics, ``TOPIC_NAME() LIKE 'name'``), else None. A Pattern topic's
    own name reads every topic it stores."""
    if name in topology.topics or name in topology.plain_topics or _SCOPED.match(name):
        return None
    if not is_pattern(name):
        if pattern_topic(topology, name) is None:
            return None
        quoted = name.replace("\\", "\\\\").replace("'", "\\'")
        return f"TOPIC_NAME() = '{quoted}'"
    if not any(t.pattern is not None for t in topology.topics.values()):
        return None
    return f"TOPIC_NAME() LIKE '{name.replace(chr(39), chr(92) + chr(39))}'"


def restricted(filter_text: str, restriction: str | None) -> str:
    """A filter with a topic restriction added (``filter AND restriction``)."""
    if restriction is None:
        return filter_text
    return f"({filter_text}) AND {restriction}" if filter_text.strip() else restriction


def resolve_topic(topology: Topology, name: str) -> SowTopic:
    """The SOW topic called ``name`` (literal; for a topic a Pattern topic stores, that
    Pattern topic). A plain topic is an InvalidRequestError (it has no SOW); an unknown
    name an UnknownTopicError naming the topics there are."""
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
    pattern = compile_regex(name, what="topic pattern")
    matched = [t for t in topology.topics.values() if pattern.search(t.name) or t.pattern]
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
    """The topic a publish names (literal): a SOW topic or a plain topic."""
    name = _literal(topology, name)
    plain = topology.plain_topics.get(name)
    return plain if plain is not None else resolve_topic(topology, name)


def resolve_subscribed_topics(topology: Topology, name: str) -> list[Topic]:
    """The topics a subscription names: the literal topic (SOW or plain), or every topic
    the pattern matches, SOW topics first, each kind in configuration order. Raises
    UnknownTopicError when nothing matches."""
    if not is_pattern(name) or name in topology.topics or name in topology.plain_topics:
        return [resolve_publish_topic(topology, name)]
    pattern = compile_regex(name, what="topic pattern")
    matched = [
        t
        for t in topology.every_topic()
        if pattern.search(t.name) or (isinstance(t, SowTopic) and t.pattern)
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
    if topic.conflated is not None:
        raise InvalidRequestError(
            f"{topic.name} is a conflated topic: its records are copied from "
            f"{topic.conflated.underlying}; publish to or delete from that topic instead"
        )
    return topic
