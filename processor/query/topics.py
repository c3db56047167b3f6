"""Topic names in commands: a literal SOW topic, or a regular expression over topic names.

AMPS treats a topic with regular-expression metacharacters as a pattern matched anywhere
in topic names (anchor with ``^``/``$``); results come in configuration order. A name that
is itself a configured SOW topic is always literal, so ``ORDERS.v2`` names that topic
rather than matching ``ORDERSxv2``.
"""

from __future__ import annotations

from processor.errors import UnknownTopicError
from processor.expr.regex import compile_regex
from processor.topology.model import SowTopic, Topology

#: Characters that make a topic name a regular expression (spec 1.18, section 9 item 24).
REGEX_CHARACTERS = frozenset(".^$*+?()[]{}|\\")


def is_pattern(name: str) -> bool:
    """True when a topic name contains regular-expression metacharacters."""
    return any(c in REGEX_CHARACTERS for c in name)


def resolve_topic(topology: Topology, name: str) -> SowTopic:
    """The SOW topic called ``name`` (literal); UnknownTopicError names the topics there are."""
    try:
        return topology.topic(name)
    except KeyError:
        known = ", ".join(sorted(topology.topics)) or "none"
        raise UnknownTopicError(f"topic {name!r} has no SOW; SOW topics here: {known}") from None


def resolve_topics(topology: Topology, name: str) -> list[SowTopic]:
    """The SOW topics a command names: the literal topic, or every topic the pattern
    matches, in configuration order. Raises UnknownTopicError when nothing matches."""
    if name in topology.topics or not is_pattern(name):
        return [resolve_topic(topology, name)]
    # RE2 (linear time): a topic pattern from a request can never hang a thread.
    pattern = compile_regex(name, what="topic pattern")
    matched = [t for t in topology.topics.values() if pattern.search(t.name)]
    if not matched:
        known = ", ".join(sorted(topology.topics)) or "none"
        raise UnknownTopicError(
            f"no SOW topic matches the pattern {name!r}; SOW topics here: {known}"
        )
    return matched
