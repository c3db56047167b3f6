"""The SOW entries kafka-sow loads but does not serve yet, and the refusal to start with them.

Views (of one topic or of Joins), and conflated topics (of a SOW topic, view, conflated
topic or Pattern topic, with or without Enrichment), are served; queues come with issue
22. Until then a topology that has one is refused by :func:`refuse_unserved`
(``sow serve``, ``app.start``) with one line naming each entry, its file and element,
and the issue: a server that started without them would answer NOT_FOUND for every
query on them.
"""

from __future__ import annotations

from processor.errors import TopologyError, UnservedEntryError
from processor.topology.model import ConflatedTopicSpec, Entry, QueueSpec, Topology, ViewSpec
from processor.topology.view_topics import underlying_topics


def unserved(entry: Entry, topology: Topology | None = None) -> bool:
    """Whether ``sow serve`` refuses the entry (see the module doc; with ``topology``
    None, what the entry reads is assumed to be served)."""
    if isinstance(entry, ConflatedTopicSpec):
        return topology is not None and entry.underlying not in topology.topics
    if not isinstance(entry, ViewSpec):
        return True
    if topology is None:
        return False
    try:
        underlying_topics(entry, topology.topics)
    except TopologyError:
        return True  # it reads a queue
    return False


def kind_of(entry: Entry) -> str:
    """The AMPS element of an entry: View, ConflatedTopic, Queue, LocalQueue or GroupLocalQueue."""
    if isinstance(entry, ViewSpec):
        return "View"
    if isinstance(entry, ConflatedTopicSpec):
        return "ConflatedTopic"
    return entry.kind.value


def _described(entry: Entry) -> str:
    return kind_of(entry)


def issue_of(entry: Entry) -> int:
    """The issue that implements the entry's kind."""
    return 22 if isinstance(entry, QueueSpec) else 21


def refusal(entry: Entry, topology: Topology | None = None) -> str:
    """What ``sow check-config`` says ``sow serve`` does with the entry."""
    if not unserved(entry, topology):
        return "served: a SOW topic whose records the processor derives"
    return f"refused by sow serve until issue {issue_of(entry)} implements {kind_of(entry)}"


def refuse_unserved(topology: Topology) -> None:
    """Raise UnservedEntryError when ``topology`` has views, conflated topics or queues."""
    entries = [entry for entry in topology.entries() if unserved(entry, topology)]
    if not entries:
        return
    named = "; ".join(
        f"{_described(e)} {e.name!r} at {e.source}: {e.where} (issue {issue_of(e)})"
        for e in entries
    )
    raise UnservedEntryError(
        f"kafka-sow does not serve these SOW entries yet: {named}; remove them to serve "
        "the topics (sow check-config describes each)"
    )
