"""The entitlement filter of a read, as filter text the read paths AND into their own
(the same way a Pattern topic's restriction rides them: ``topology.topics.restricted``).

A read names a literal topic (its grants decide, and a topic the principal may not read
is refused) or a regular expression over topic names (each record through the grants of
its own topic, ``TOPIC_NAME()``; records of topics it may not read match nothing)."""

from __future__ import annotations

import re

from processor.security.context import Rights
from processor.topology.model import Topology
from processor.topology.topics import is_pattern

#: ``[type].[name]``: a topic named with its message type; entitlements name the topic.
_SCOPED = re.compile(r"^\[[A-Za-z0-9_-]+\]\.\[([^\[\]]+)\]$")


def read_restriction(rights: Rights, topology: Topology, name: str) -> str | None:
    """The entitlement filter of a read of ``name`` (None: every record); raises
    NotEntitledError when the principal may read none of it."""
    if not rights.restricted:
        return None
    if is_pattern(name) and name not in topology.topics and name not in topology.plain_topics:
        return rights.pattern_read_filter()
    return rights.read_filter(topic_name(name))


def entitled(filter_text: str, restriction: str | None) -> str:
    """``filter_text`` AND the entitlement filter."""
    if restriction is None:
        return filter_text
    return f"({filter_text}) AND ({restriction})" if filter_text.strip() else restriction


def topic_name(name: str) -> str:
    """The topic's name as entitlements see it (``[type].[name]`` -> ``name``)."""
    scoped = _SCOPED.match(name)
    return name if scoped is None else scoped[1]
