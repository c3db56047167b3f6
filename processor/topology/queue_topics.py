"""Queues as SOW topics: each queue of a topology is also a :class:`SowTopic` (its
``queue`` set) holding the queue's messages, keyed by bookmark, so a ``sow`` query browses
them and the processor keeps them (recovery, changelog, standbys) as any SOW topic's
records; the processor derives them (:mod:`processor.queues`).

A queue has **one partition**, whatever its input's partitioning: one ledger decides its
order, priority, barriers and backlogs, as AMPS's queue does (issue 31).

* Over **one plain topic of one partition** (AMPS's usual queue: the transaction-log
  topic of its name) the queue reads its Kafka topic itself: a publish is enqueued by
  the transaction that reads it.
* Over **plain topics of several partitions** (or several plain topics: a regular
  expression over them), each plain topic has a *relay*
  (:func:`relay_topics`): a processor-only topic over it whose partitions send each
  publish to the queue's own input topic (``<first underlying kafka_topic>.queue.<name>``)
  in the transaction that reads it; the queue reads that one partition.
* Over **SOW topics** (a name, or a regular expression matching several) the queue reads
  its own input topic too, which the processor writes in the transactions of the
  underlying topics' publishes.

Messages of different input partitions are enqueued in the order the processor reads
them (Kafka orders a partition, not a topic): a publish acknowledged before another is
published is enqueued first.

Its changelog, repartition (commands) and deliveries topics are named after
``<first underlying kafka_topic>.queue.<name>`` (``state_topic``).

A queue over plain and SOW topics together is not served
(:mod:`processor.topology.unserved` says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from processor.topology.model import (
    PlainTopic,
    SowTopic,
    Topic,
    Topology,
    default_kafka_topic,
    message_format,
)
from processor.topology.queue_spec import QueueSpec


def readable(topology: Topology) -> dict[str, Topic]:
    """The topics a queue of ``topology`` may read, by name (its SOW topics, views and
    plain topics; not the queues, one of which may bear its plain topic's name)."""
    topics: dict[str, Topic] = {
        n: t for n, t in topology.topics.items() if t.queue is None and t.relay_to is None
    }
    return {**topics, **topology.plain_topics}


def queue_sources(spec: QueueSpec, topics: Mapping[str, Topic]) -> list[Topic]:
    """The topics ``spec`` reads that ``topics`` has, in the queue's order."""
    names = spec.underlying_topics or (spec.underlying,)
    return [topics[name] for name in names if name in topics]


def plain_sources(spec: QueueSpec, topics: Mapping[str, Topic]) -> list[PlainTopic]:
    """The plain topics a queue reads directly, in order (empty: it reads SOW topics, or
    plain and SOW topics together, which is not served)."""
    sources = queue_sources(spec, topics)
    if sources and all(isinstance(t, PlainTopic) for t in sources):
        return [t for t in sources if isinstance(t, PlainTopic)]
    return []


def queue_topic(spec: QueueSpec, topics: Mapping[str, Topic]) -> SowTopic:
    """The SOW topic holding ``spec``'s messages; ``topics``: the topics defined (SOW,
    plain, views), by name."""
    plain = plain_sources(spec, topics)
    sources = queue_sources(spec, topics)
    prefix = f"{sources[0].kafka_topic}." if sources else ""
    state_topic = f"{prefix}queue.{default_kafka_topic(spec.name)}"
    # its own input topic, but one plain topic of one partition is read directly
    kafka_topic = plain[0].kafka_topic if plain and not relayed(plain) else state_topic
    fmt = (
        message_format(sources[0])
        if sources
        else {"message_type": spec.message_type, "schema": spec.schema}
    )
    return SowTopic(
        name=spec.name,
        **fmt,
        kafka_topic=kafka_topic,
        partitions=1,
        queue=spec,
        state_topic=state_topic,
    )


def relayed(plain: Sequence[PlainTopic]) -> bool:
    """Whether a queue over the plain topics ``plain`` reads them through relays: unless
    it reads one partition, its messages need one order (offsets of different
    partitions are not one)."""
    return len(plain) > 1 or plain[0].partitions > 1


def relay_topics(topology: Topology) -> list[SowTopic]:
    """The relays of the topology's queues over plain topics of several partitions: one
    per plain topic a queue reads, a topic of the processor only (never served)."""
    relays = []
    known = readable(topology)
    for queue in topology.topics.values():
        if queue.queue is None:
            continue
        plain = plain_sources(queue.queue, known)
        if not plain or not relayed(plain):
            continue
        for source in plain:
            relays.append(
                SowTopic(
                    name=f"{queue.name}.relay.{source.name}",
                    **message_format(source),
                    kafka_topic=source.kafka_topic,
                    partitions=source.partitions,
                    relay_to=queue.name,
                    state_topic=f"{queue.state_topic}.relay.{source.kafka_topic}",
                )
            )
    return relays


def processor_topology(topology: Topology) -> Topology:
    """``topology`` as the processor runs it: with the relays of its queues
    (:func:`relay_topics`) among its SOW topics."""
    relays = relay_topics(topology)
    if not relays:
        return topology
    topics = {**topology.topics, **{relay.name: relay for relay in relays}}
    return replace(topology, topics=MappingProxyType(topics))
