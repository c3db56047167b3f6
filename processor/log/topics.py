"""The Kafka topics a topology needs (created at start, before any component runs)."""

from __future__ import annotations

from processor.log import TopicSpec
from processor.topology import Topology
from processor.topology.queue_topics import processor_topology

_HOUR = {"retention.ms": str(3_600_000)}


def topic_specs(topology: Topology, dead_letter_topic: str) -> list[TopicSpec]:
    """Every Kafka topic the topology needs (a plain topic needs only its input topic),
    the processor's own topics (its queues' relays) included."""
    topology = processor_topology(topology)
    specs = [TopicSpec(dead_letter_topic, 1, {})]
    for plain in topology.plain_topics.values():
        specs.append(TopicSpec(plain.kafka_topic, plain.partitions, {}))
    plain_inputs = {plain.kafka_topic for plain in topology.plain_topics.values()}
    for topic in topology.topics.values():
        if topic.kafka_topic not in plain_inputs:  # a queue reading its plain topic
            specs.append(TopicSpec(topic.kafka_topic, topic.partitions, {}))
        if topic.queue is not None:  # read live only: an hour is plenty
            specs.append(TopicSpec(topic.deliveries_topic, topic.partitions, _HOUR))
        specs.append(TopicSpec(topic.repartition_topic, topic.partitions, {}))
        changelog_config = {"cleanup.policy": "compact"}
        if topic.history is not None:
            # Replays and the history index see every version only while compaction
            # leaves them: keep the Window uncompacted.
            lag_ms = int(topic.history.window_s * 1000)
            changelog_config["min.compaction.lag.ms"] = str(lag_ms)
        specs.append(TopicSpec(topic.changelog_topic, topic.partitions, changelog_config))
        if topic.upsert_topic is not None:  # docs/upsert-tables.md: a table, keyed by record
            compact = {"cleanup.policy": "compact"}
            specs.append(TopicSpec(topic.upsert_topic, topic.partitions, compact))
    return specs
