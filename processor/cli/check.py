"""``sow check-config``: validate topology files without starting anything."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from processor.keys import key_function
from processor.messages import codec_for
from processor.topology.loader import load_topology
from processor.topology.model import SowTopic, Topic

#: The delivery order a subscriber gets (docs/subscriptions.md, "Ordering"): AMPS delivers
#: in publish order; a partitioned log orders per partition only.
ORDER_PER_KEY = (
    "per SowKey: changes to one record arrive in publish order, changes to records in "
    "different partitions may arrive in another order (AMPS: publish order); "
    "set partitions: 1 for one order across keys"
)
ORDER_ONE = "publish order (one partition)"


def describe(topic: Topic) -> dict[str, Any]:
    """What the product will do for one topic, as printed."""
    out: dict[str, Any] = {
        "topic": topic.name,
        "sow": isinstance(topic, SowTopic),
        "message_type": topic.message_type,
        "kafka_topic": topic.kafka_topic,
        "partitions": topic.partitions,
        "order": ORDER_ONE if topic.partitions == 1 else ORDER_PER_KEY,
    }
    if not isinstance(topic, SowTopic):
        return out
    if topic.key_generator is not None:
        out["key_generator"] = topic.key_generator.factory
    elif topic.keys:
        out["key"] = list(topic.keys)
    else:
        out["key"] = "publisher-provided SowKey"
    out["changelog_topic"] = topic.changelog_topic
    out["durability"] = topic.durability.value
    out["expiration"] = (
        "disabled"
        if topic.expiration_s is None
        else "per message only"
        if topic.expiration_s == 0
        else f"{topic.expiration_s:g}s"
    )
    if topic.indexes:
        out["indexes"] = list(topic.indexes)
    if topic.hash_indexes:
        out["hash_indexes"] = [list(index.keys) for index in topic.hash_indexes]
    return out


def cmd_check_config(args: argparse.Namespace) -> int:
    """Load each file (or directory), build every topic's codec and key function, and
    print one JSON line per topic; the first problem fails the command."""
    for path in args.paths:
        topology = load_topology(path)
        for topic in topology.every_topic():
            codec_for(topic)  # reads and checks an Avro schema
            if isinstance(topic, SowTopic):
                key_function(topic)  # imports a custom KeyGenerator
            sys.stdout.write(orjson.dumps({"source": str(path), **describe(topic)}).decode() + "\n")
        sys.stderr.write(
            f"{path}: OK ({len(topology.topics)} SOW topics, "
            f"{len(topology.plain_topics)} plain topics)\n"
        )
    return 0
