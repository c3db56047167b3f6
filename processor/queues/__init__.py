"""Message queues (issue 22; docs/queues.md): every publish to a queue's underlying topics
is a message delivered to one subscriber at a time under a lease, and removed when
acknowledged.

:mod:`processor.queues.ledger` holds one queue partition's decisions (order, leases,
backlogs, fairness, acknowledgements, returns, expiry, barriers), with no I/O; the
processor's queue partitions (:mod:`processor.queues.partition`) persist what it decides,
and :func:`queue_wiring` gives the processor all of it.
"""

from __future__ import annotations

from typing import Any

from processor.engine.derived import DerivedTopic
from processor.engine.transaction import ChangeListener
from processor.queues.definition import QueueDefinition
from processor.queues.feed import QueueFeed
from processor.queues.relay import QueueRelay
from processor.queues.topic import QueueTopic
from processor.topology.model import Topology
from processor.topology.queue_topics import readable


def queue_wiring(topology: Topology) -> dict[str, Any]:
    """The processor's ``listeners`` and ``derived`` options for the topology's queues and
    their relays (``topology`` as the processor runs it:
    :func:`~processor.topology.queue_topics.processor_topology`; empty when it has none)."""
    listeners: dict[str, list[ChangeListener]] = {}
    derived: dict[str, DerivedTopic] = {}
    known = readable(topology)
    for topic in topology.topics.values():
        if topic.relay_to is not None:
            plain = topology.plain_topics.values()
            name = next(t.name for t in plain if t.kafka_topic == topic.kafka_topic)
            derived[topic.name] = QueueRelay(topic, topology.topics[topic.relay_to], name)
            continue
        if topic.queue is None:
            continue
        definition = QueueDefinition(topic, known)
        derived[topic.name] = QueueTopic(definition)
        for source in definition.sources:
            listeners.setdefault(source, []).append(QueueFeed(definition))
    if not derived:
        return {}
    return {"listeners": listeners, "derived": derived}
