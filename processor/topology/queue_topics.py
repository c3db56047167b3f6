"""Queues as SOW topics: each queue of a topology is also a :class:`SowTopic` (its
``queue`` set) holding the queue's messages, keyed by bookmark, so a ``sow`` query browses
them and the processor keeps them (recovery, changelog, standbys) as any SOW topic's
records; the processor derives them (:mod:`processor.queues`).

* Over **plain topics** (AMPS's usual queue: the transaction-log topic of its name, or
  a regular expression over such topics) the queue reads their Kafka topics itself,
  partition for partition (``kafka_topic`` the first's, ``extra_inputs`` the others'; they
  need the same partition count): a publish is enqueued by the transaction that reads it.
* Over **SOW topics** (a name, or a regular expression matching several) the queue has
  an input topic of its own (``<first underlying kafka_topic>.queue.<name>``), which the
  processor writes in the transactions of the underlying topics' publishes; it has as
  many partitions as the underlying topic with the most, and a publish on partition
  ``p`` goes to queue partition ``p`` modulo that.

Its changelog, repartition (commands) and deliveries topics are named after
``<first underlying kafka_topic>.queue.<name>`` (``state_topic``).

A queue over plain and SOW topics together, or over plain topics of different partition
counts, is not served (:mod:`processor.topology.unserved` says why).
"""

from __future__ import annotations

from collections.abc import Mapping

from processor.topology.model import (
    PlainTopic,
    QueueSpec,
    SowTopic,
    Topic,
    Topology,
    default_kafka_topic,
)


def readable(topology: Topology) -> dict[str, Topic]:
    """The topics a queue of ``topology`` may read, by name (its SOW topics, views and
    plain topics; not the queues, one of which may bear its plain topic's name)."""
    topics: dict[str, Topic] = {n: t for n, t in topology.topics.items() if t.queue is None}
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
    if plain:
        kafka_topic, partitions = plain[0].kafka_topic, plain[0].partitions
        extra_inputs = tuple(t.kafka_topic for t in plain[1:])
    else:
        kafka_topic, extra_inputs = state_topic, ()
        partitions = max((t.partitions for t in sources), default=1)
    return SowTopic(
        name=spec.name,
        message_type=spec.message_type,
        schema=spec.schema,
        kafka_topic=kafka_topic,
        partitions=partitions,
        queue=spec,
        extra_inputs=extra_inputs,
        state_topic=state_topic,
    )
