"""The SOW entries kafka-sow loads but does not serve, and the refusal to start with them.

Views (of one topic or of Joins), conflated topics (of a SOW topic, view, conflated
topic or Pattern topic, with or without Enrichment) and queues (over plain topics or over
SOW topics, by name or regular expression) are served. Not served: a queue over plain and
SOW topics together or over a plain topic another queue reads, and a view or conflated
topic reading a queue. A topology
that has one is refused by :func:`refuse_unserved` (``sow serve``, ``app.start``) with
one line naming each entry, its file and element, and why: a server that started without
them would answer NOT_FOUND for every query on them.
"""

from __future__ import annotations

from processor.errors import TopologyError, UnservedEntryError
from processor.topology.model import ConflatedTopicSpec, Entry, PlainTopic, Topology, ViewSpec
from processor.topology.queue_spec import QueueSpec
from processor.topology.queue_topics import plain_sources, queue_sources, readable
from processor.topology.view_topics import underlying_topics


def unserved(entry: Entry, topology: Topology | None = None) -> bool:
    """Whether ``sow serve`` refuses the entry (see the module doc; with ``topology``
    None, what the entry reads is assumed to be served)."""
    return why_unserved(entry, topology) is not None


def why_unserved(entry: Entry, topology: Topology | None = None) -> str | None:
    """Why ``sow serve`` refuses the entry (None: it serves it)."""
    if topology is None:
        return None
    if isinstance(entry, QueueSpec):
        sources = queue_sources(entry, readable(topology))
        plain = [t for t in sources if isinstance(t, PlainTopic)]
        if plain and len(plain) < len(sources):
            return (
                f"it reads {len(sources)} topics, {len(plain)} of them without a SOW; a queue "
                "reads plain topics or SOW topics, not both"
            )
        inputs = {t.kafka_topic for t in plain}
        known, names = readable(topology), list(topology.topics)
        shared = [
            other.name
            for other in topology.topics.values()
            if other.queue is not None
            and names.index(other.name) < names.index(entry.name)
            and inputs & {t.kafka_topic for t in plain_sources(other.queue, known)}
        ]
        if shared:
            return (
                f"queue {shared[0]!r} reads the same plain topic; one plain topic feeds one "
                "queue here (give the topic a SOW for several queues to read it)"
            )
        return None
    if isinstance(entry, ConflatedTopicSpec):
        read = topology.topics.get(entry.underlying)
        if read is None:
            return f"it reads {entry.underlying!r}, which is no SOW topic"
        return "it reads a queue" if read.queue is not None else None
    try:
        read_topics = underlying_topics(entry, topology.topics)
    except TopologyError as exc:
        return str(exc)
    if any(topic.queue is not None for topic in read_topics):
        return "it reads a queue"
    return None


def kind_of(entry: Entry) -> str:
    """The AMPS element of an entry: View, ConflatedTopic, Queue, LocalQueue or GroupLocalQueue."""
    if isinstance(entry, ViewSpec):
        return "View"
    if isinstance(entry, ConflatedTopicSpec):
        return "ConflatedTopic"
    return entry.kind.value


def _described(entry: Entry) -> str:
    return kind_of(entry)


def refusal(entry: Entry, topology: Topology | None = None) -> str:
    """What ``sow check-config`` says ``sow serve`` does with the entry."""
    why = why_unserved(entry, topology)
    if why is None:
        return "served: a SOW topic whose records the processor derives"
    return f"refused by sow serve: {why}"


def refuse_unserved(topology: Topology) -> None:
    """Raise UnservedEntryError when ``topology`` has views, conflated topics or queues."""
    entries = [entry for entry in topology.entries() if unserved(entry, topology)]
    if not entries:
        return
    named = "; ".join(
        f"{_described(e)} {e.name!r} at {e.source}: {e.where} ({why_unserved(e, topology)})"
        for e in entries
    )
    raise UnservedEntryError(
        f"kafka-sow does not serve these SOW entries: {named}; remove them to serve "
        "the topics (sow check-config describes each)"
    )
