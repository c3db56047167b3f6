"""Queues as SOW topics: each queue of a topology is also a :class:`SowTopic` (its
``queue`` set) holding the queue's messages, keyed by bookmark, so a ``sow`` query browses
them and the processor keeps them (recovery, changelog, standbys) as any SOW topic's
records; the processor derives them (:mod:`processor.queues`).

* Over **one plain topic** (AMPS's usual queue: the transaction-log topic of its name)
  the queue reads that topic's Kafka topic itself, partition for partition: a publish is
  enqueued by the transaction that reads it.
* Over **SOW topics** (a name, or a regular expression matching several) the queue has
  an input topic of its own (``<first underlying kafka_topic>.queue.<name>``), which the
  processor writes in the transactions of the underlying topics' publishes; it has as
  many partitions as the underlying topic with the most, and a publish on partition
  ``p`` goes to queue partition ``p`` modulo that.

A queue over several plain topics, or over plain and SOW topics together, is not served
(:mod:`processor.topology.unserved` says why).
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


def reads_plain(spec: QueueSpec, topics: Mapping[str, Topic]) -> PlainTopic | None:
    """The one plain topic a queue reads directly (None: it reads SOW topics, or more
    than one topic)."""
    sources = queue_sources(spec, topics)
    if len(sources) == 1 and isinstance(sources[0], PlainTopic):
        return sources[0]
    return None


def queue_topic(spec: QueueSpec, topics: Mapping[str, Topic]) -> SowTopic:
    """The SOW topic holding ``spec``'s messages; ``topics``: the topics defined (SOW,
    plain, views), by name."""
    plain = reads_plain(spec, topics)
    if plain is not None:
        kafka_topic, partitions = plain.kafka_topic, plain.partitions
    else:
        sources = queue_sources(spec, topics)
        prefix = f"{sources[0].kafka_topic}." if sources else ""
        kafka_topic = f"{prefix}queue.{default_kafka_topic(spec.name)}"
        partitions = max((t.partitions for t in sources), default=1)
    return SowTopic(
        name=spec.name,
        message_type=spec.message_type,
        schema=spec.schema,
        kafka_topic=kafka_topic,
        partitions=partitions,
        queue=spec,
    )
