"""The SOW entries kafka-sow loads but does not serve yet, and the refusal to start with them.

Views and conflated topics come with issue 21, queues with issue 22. Until then a
topology that has one is refused by :func:`refuse_unserved` (``sow serve``, ``app.start``)
with one line naming each entry, its file and element, and the issue: a server that
started without them would answer NOT_FOUND for every query on them.
"""

from __future__ import annotations

from processor.errors import UnservedEntryError
from processor.topology.model import ConflatedTopicSpec, Entry, QueueSpec, Topology, ViewSpec


def kind_of(entry: Entry) -> str:
    """The AMPS element of an entry: View, ConflatedTopic, Queue, LocalQueue or GroupLocalQueue."""
    if isinstance(entry, ViewSpec):
        return "View"
    if isinstance(entry, ConflatedTopicSpec):
        return "ConflatedTopic"
    return entry.kind.value


def issue_of(entry: Entry) -> int:
    """The issue that implements the entry's kind."""
    return 22 if isinstance(entry, QueueSpec) else 21


def refusal(entry: Entry) -> str:
    """What ``sow check-config`` says ``sow serve`` does with the entry."""
    return f"refused by sow serve until issue {issue_of(entry)} implements {kind_of(entry)}"


def refuse_unserved(topology: Topology) -> None:
    """Raise UnservedEntryError when ``topology`` has views, conflated topics or queues."""
    entries = topology.entries()
    if not entries:
        return
    named = "; ".join(
        f"{kind_of(e)} {e.name!r} at {e.source}: {e.where} (issue {issue_of(e)})" for e in entries
    )
    raise UnservedEntryError(
        f"kafka-sow does not serve these SOW entries yet: {named}; remove them to serve "
        "the topics (sow check-config describes each)"
    )
