"""``sow check-config``: validate topology files without starting anything.

One JSON line per topic (what the product does with it), per view, conflated topic or
queue (its parsed settings, and that ``sow serve`` refuses it until its issue lands), per
action (when it runs and what it does, docs/actions.md), and one for the security the
topology names (its entitlements file and logon); then the
replication ``sow serve`` would give the topics it creates, with a warning when an external
cluster would keep a single copy (:func:`replication_summary`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any

import orjson

from processor.config import Settings
from processor.errors import BrokerError
from processor.keys import key_function
from processor.log.replication import MAX_DEFAULT_REPLICATION, Replication
from processor.messages import codec_for
from processor.topology.actions import ActionSpec
from processor.topology.loader import load_topology
from processor.topology.message_types import traits as message_traits
from processor.topology.model import (
    ConflatedTopicSpec,
    Entry,
    HashIndexSpec,
    JoinSpec,
    RecoveryKind,
    SowTopic,
    Topic,
    TopicRef,
    Topology,
    UnusedOption,
    ViewSpec,
)
from processor.topology.quantities import format_interval
from processor.topology.queue_spec import QueueRecoveryPoint, QueueSpec
from processor.topology.unserved import kind_of, refusal, unserved

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
        "message_type_can": message_traits(topic.message_type).capabilities(),
        "kafka_topic": topic.kafka_topic,
        "partitions": topic.partitions,
        "order": ORDER_ONE if topic.partitions == 1 else ORDER_PER_KEY,
    }
    registry = topic.schema_registry
    if registry is not None:
        out["schema_registry"] = {
            "url": registry.url,
            "subject": registry.subject or f"{topic.kafka_topic}-value",
            **({"message": registry.message} if registry.message else {}),
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
    if topic.upsert is not None:  # docs/upsert-tables.md
        out["upsert_topic"] = {"topic": topic.upsert_topic, "key": topic.upsert.key.value}
    out["durability"] = topic.durability.value
    out["expiration"] = (
        "disabled"
        if topic.expiration_s is None
        else "per message only"
        if topic.expiration_s == 0
        else f"{topic.expiration_s:g}s"
    )
    if topic.keys:
        out["key_domain"] = topic.domain
    point = topic.recovery_point
    out["recovery_point"] = (
        point.kind.value if point.kind is not RecoveryKind.TIMESTAMP else _plain(point.timestamp)
    )
    if topic.indexes:
        out["indexes"] = list(topic.indexes)
    if topic.hash_indexes:
        out["hash_indexes"] = [list(index.keys) for index in topic.hash_indexes]
    if topic.history is not None:
        out["history"] = {
            "window": format_interval(topic.history.window_s),
            "granularity": format_interval(topic.history.granularity_s),
        }
    if topic.pattern is not None:
        out["pattern"] = topic.pattern
        out["stores"] = (
            f"every topic whose name matches {topic.pattern!r}, each with its own records "
            f"(SowKeys keyed by the topic's name), in {topic.changelog_topic}"
        )
    for name in ("preprocessing", "enrichment"):
        if getattr(topic, name):
            out[name] = list(getattr(topic, name))
    if topic.unused_options:
        out["not_applied"] = _plain(topic.unused_options)
    return out


def _does(entry: Entry) -> str:
    """What an entry will do, in one sentence."""
    if isinstance(entry, ViewSpec):
        read = " JOIN ".join(_plain(ref) for ref in entry.underlying)
        if entry.filter is not None:
            read += f" where {entry.filter}"
        return (
            f"aggregates {read} grouped by {', '.join(entry.grouping)} into {entry.message_type} "
            "messages, recomputed on every change"
        )
    if isinstance(entry, ConflatedTopicSpec):
        return (
            f"republishes the current value of each record of {entry.underlying} at most "
            f"every {format_interval(entry.interval_s)}"
        )
    return (
        f"delivers each message published to {entry.underlying} to one subscriber at a time "
        f"({entry.semantics.value}); publishes to the queue go to {entry.default_publish_target}"
    )


def _plain(value: Any) -> Any:
    """A model value as JSON: enums by value, intervals as text, specs as lists or text."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, TopicRef):
        return (
            value.name if value.message_type is None else f"[{value.message_type}].[{value.name}]"
        )
    if isinstance(value, JoinSpec):
        return value.text
    if isinstance(value, HashIndexSpec):
        return list(value.keys)
    if isinstance(value, QueueRecoveryPoint):
        return value.bookmark or (_plain(value.timestamp) if value.timestamp else value.kind)
    if isinstance(value, UnusedOption):
        return {"element": value.element, "value": value.value, "reason": value.reason}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def describe_entry(entry: Entry, topology: Topology | None = None) -> dict[str, Any]:
    """A view, conflated topic or queue: what it does, whether ``sow serve`` serves it,
    and every setting it was given (intervals as text)."""
    kind = kind_of(entry)
    key = {"View": "view", "ConflatedTopic": "conflated_topic"}.get(kind, "queue")
    out: dict[str, Any] = {key: entry.name, "element": entry.where}
    if isinstance(entry, QueueSpec):
        out["kind"] = kind
    out["served"] = refusal(entry, topology)
    out["does"] = _does(entry)
    for item in dataclasses.fields(entry):
        value = getattr(entry, item.name)
        if item.name in ("name", "source", "where", "kind") or value in (None, (), False):
            continue
        name = item.name
        if name.endswith("_s") and isinstance(value, float):
            name, value = name[:-2], format_interval(value)
        out[name] = _plain(value)
    return out


def describe_action(action: ActionSpec) -> dict[str, Any]:
    """An action: when it runs, what it does (docs/actions.md), and a line saying both."""
    on = action.on
    when: dict[str, Any] = {"module": on.module.value}
    if on.every is not None:
        when["every"] = on.every.text
    else:
        when["topic"] = on.topic
    if on.filter:
        when["filter"] = on.filter
    if on.duration_ms:
        when["duration"] = format_interval(on.duration_ms / 1000)
    steps = []
    for step in action.do:
        fields = {"filter": step.filter, "data": step.data}
        steps.append(
            {"module": step.module.value, "topic": step.topic}
            | {name: value for name, value in fields.items() if value}
        )
    return {
        "action": action.name,
        "element": action.where,
        "on": when,
        "do": steps,
        "does": action.describe(),
    }


def cmd_check_config(args: argparse.Namespace) -> int:
    """Load each file (or directory), build every topic's codec and key function, and
    print one JSON line per topic, then per view, conflated topic and queue, per action,
    then the security the topology names; the first problem fails the command."""
    secured: list[tuple[str, Topology]] = []
    for path in args.paths:
        topology = load_topology(path)
        lines: list[dict[str, Any]] = []
        for topic in topology.every_topic():
            if isinstance(topic, SowTopic) and topic.derived:
                continue  # described with its entry
            codec_for(topic)  # reads and checks an Avro schema
            if isinstance(topic, SowTopic):
                key_function(topic)  # imports a custom KeyGenerator
            lines.append(describe(topic))
        lines.extend(describe_entry(entry, topology) for entry in topology.entries())
        lines.extend(describe_action(action) for action in topology.actions)
        if topology.security is not None:
            lines.append({"security": topology.security.describe()})
            secured.append((str(path), topology))
        for line in lines:
            sys.stdout.write(orjson.dumps({"source": str(path), **line}).decode() + "\n")
        entries = [entry for entry in topology.entries() if unserved(entry, topology)]
        refused = f", {len(entries)} entries sow serve refuses for now" if entries else ""
        queues = sum(1 for topic in topology.topics.values() if topic.queue is not None)
        views = sum(1 for topic in topology.topics.values() if topic.derived) - queues
        sys.stderr.write(
            f"{path}: OK ({len(topology.topics) - views - queues} SOW topics, {views} views "
            f"and conflated topics, {queues} queues, "
            f"{len(topology.plain_topics)} plain topics, {len(topology.actions)} actions"
            f"{refused})\n"
        )
    from processor.cli.security_commands import security_summary

    # the environment's, as sow serve's
    settings = Settings.from_env(bootstrap_servers=getattr(args, "bootstrap_servers", None))
    for path, topology in secured:  # each under the settings, which win
        for said in security_summary(settings, topology):
            sys.stderr.write(f"{path}: {said}\n")
    if not secured:
        for said in security_summary(settings):
            sys.stderr.write(said + "\n")
    from processor.log.kafka.settings import use_client_properties

    use_client_properties(settings.client_properties)  # security, as sow serve's clients
    for said in replication_summary(settings):
        sys.stderr.write(said + "\n")
    return 0


#: How long check-config waits for an external cluster to say how many brokers it has.
ASK_TIMEOUT_S = 3.0
#: What to set on a cluster that can keep copies (docs/operations.md, "Replication").
ADVICE = (
    "set SOW_REPLICATION_FACTOR=3 and SOW_MIN_INSYNC_REPLICAS=2 on a cluster of 3 brokers "
    "or more (or leave both unset there: they follow its size)"
)


def replication_summary(
    settings: Settings, count: Callable[[str, float], int] | None = None
) -> list[str]:
    """The replication ``sow serve`` would give every topic it creates, one line, and a
    line starting ``warning:`` when an external cluster would keep one copy (the settings
    say 1, or leave it to a cluster of one broker) or has fewer brokers than copies asked.
    ``count`` asks the cluster its size (default :func:`broker_count`, with a short
    timeout; a cluster that does not answer is said, not failed). ConfigurationError when
    no write could succeed (more in sync than copies) or the embedded broker cannot hold
    the copies asked."""
    factor, in_sync = settings.replication_factor, settings.min_insync_replicas
    if factor is not None and in_sync is not None:
        Replication(factor, in_sync).resolve(factor)  # more in sync than copies: refused
    bootstrap = settings.bootstrap_servers
    if not bootstrap:
        nodes = settings.embedded_brokers
        copies, least = Replication(factor, in_sync).resolve(nodes)  # as sow serve would
        cluster = f"a cluster of {nodes} nodes" if nodes > 1 else "a single node"
        return [
            f"replication: {copies} cop{'y' if copies == 1 else 'ies'} of every topic the "
            f"product creates, {least} in sync (the embedded Apache Kafka, {cluster})"
        ]
    lines: list[str] = []
    unasked = ""
    try:
        from processor.log.kafka.brokers import broker_count

        brokers: int | None = (count or broker_count)(bootstrap, ASK_TIMEOUT_S)
    except BrokerError as exc:
        brokers, unasked = None, f"could not ask {bootstrap} how many brokers it has ({exc})"
    if brokers is None and factor is None:
        said = f"{in_sync} in sync" if in_sync is not None else "2 in sync once there are 3"
        lines.append(
            f"replication: {unasked}: every topic the product creates will get as many "
            f"copies as it has brokers, at most {MAX_DEFAULT_REPLICATION}, {said}"
        )
        return lines
    copies = factor or min(brokers or 1, MAX_DEFAULT_REPLICATION)
    _, least_in_sync = Replication(copies, in_sync).resolve(copies)  # refused as above
    source = (
        "SOW_REPLICATION_FACTOR"
        if factor is not None
        else f"{bootstrap} has {brokers} broker{'s' if brokers != 1 else ''}"
    )
    if brokers is None:
        source += f"; {unasked}"
    lines.append(
        f"replication: {copies} cop{'y' if copies == 1 else 'ies'} of every topic the "
        f"product creates, {least_in_sync} in sync ({source})"
    )
    if copies == 1:
        why = (
            "SOW_REPLICATION_FACTOR=1 is set"
            if factor is not None
            else f"{bootstrap} has one broker and SOW_REPLICATION_FACTOR is unset"
        )
        lines.append(
            f"warning: {why}: every topic the product creates keeps a single copy, and a "
            f"broker lost loses acknowledged writes; {ADVICE}"
        )
    if brokers is not None and copies > brokers:
        lines.append(
            f"warning: SOW_REPLICATION_FACTOR={copies} but {bootstrap} lists {brokers} live "
            f"broker{'s' if brokers != 1 else ''}: sow serve cannot create its topics until "
            f"{copies} are up; set SOW_REPLICATION_FACTOR to at most {brokers}, or add brokers"
        )
    return lines
