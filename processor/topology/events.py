"""The event topics, AMPS's ``/AMPS/ClientStatus`` and ``/AMPS/SOWStats``: plain topics a
query service adds to its topology and publishes to (processor/requests/events.py)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from processor.errors import TopologyError
from processor.topology.model import PlainTopic, Topology

CLIENT_STATUS = "/AMPS/ClientStatus"
SOW_STATS = "/AMPS/SOWStats"
#: The Kafka topics that carry them are ``<prefix>.client-status`` and
#: ``<prefix>.sow-stats`` (SOW_EVENT_TOPIC_PREFIX).
DEFAULT_PREFIX = "sow-events"


def event_topics(prefix: str = DEFAULT_PREFIX) -> tuple[PlainTopic, PlainTopic]:
    """The event topics, on the Kafka topics of ``prefix``."""
    return (
        PlainTopic(CLIENT_STATUS, "json", f"{prefix}.client-status"),
        PlainTopic(SOW_STATS, "json", f"{prefix}.sow-stats"),
    )


def with_event_topics(topology: Topology, prefix: str = DEFAULT_PREFIX) -> Topology:
    """``topology`` with the event topics (on the Kafka topics of ``prefix``) among its
    plain topics. ``/AMPS/`` names are reserved, as in AMPS: a topology that declares
    one is refused."""
    added = event_topics(prefix)
    if all(topology.plain_topics.get(t.name) == t for t in added):
        return topology  # added already
    taken = [name for name in (t.name for t in topology.every_topic()) if name.startswith("/AMPS/")]
    if taken:
        raise TopologyError(
            f"topic {taken[0]!r}: names starting with /AMPS/ are reserved for the event "
            "topics (/AMPS/ClientStatus, /AMPS/SOWStats); rename the topic",
            source=", ".join(topology.sources) or "<topology>",
        )
    plain = {**topology.plain_topics, **{t.name: t for t in added}}
    return dataclasses.replace(topology, plain_topics=MappingProxyType(plain))
