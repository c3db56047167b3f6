"""Views: SOW topics whose records are derived from other topics' changes (issue 21).

A view is a SOW topic of the topology (:mod:`processor.topology.view_topics`) computed in
two halves, each inside the processor's exactly-once transactions: every underlying
topic's changes are sent to the view's partitions (:mod:`processor.views.feed`), and
each view partition keeps its groups and writes its records
(:mod:`processor.views.partition`). A conflated topic is derived the same way
(:mod:`processor.views.conflation`). :func:`view_wiring` gives the processor all of it.
"""

from __future__ import annotations

from typing import Any

from processor.engine.derived import DerivedTopic
from processor.engine.transaction import ChangeListener
from processor.topology.model import Topology
from processor.views.conflation import ConflatedDefinition, ConflatedFeed, ConflatedTopic
from processor.views.definition import ViewDefinition
from processor.views.feed import ViewFeed
from processor.views.partition import ViewTopic


def view_wiring(topology: Topology) -> dict[str, Any]:
    """The processor's ``listeners`` and ``derived`` options for the topology's views
    (empty when it has none)."""
    listeners: dict[str, list[ChangeListener]] = {}
    derived: dict[str, DerivedTopic] = {}
    for topic in topology.topics.values():
        if topic.conflated is not None:
            copy = ConflatedDefinition(topic, topology.topics)
            derived[topic.name] = ConflatedTopic(copy)
            listeners.setdefault(copy.source, []).append(ConflatedFeed(copy))
        if topic.view is None:
            continue
        definition = ViewDefinition(topic, topology.topics)
        derived[topic.name] = ViewTopic(definition)
        for source in definition.sources:
            listeners.setdefault(source, []).append(ViewFeed(definition, source))
    if not derived:
        return {}
    return {"listeners": listeners, "derived": derived}
