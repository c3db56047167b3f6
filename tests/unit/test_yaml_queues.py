"""Queues in the YAML topology (issue 22, item 1): a YAML definition loads to the same
QueueSpec as the AMPS XML loader makes of the same definition (seed 002's examples), with
the same checks (processor/topology/queue_rules.py), and errors name the file and the
field path (``queues[MQ].lease_period``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from processor.cli.check import cmd_check_config
from processor.errors import TopologyError, UnservedEntryError
from processor.topology import amps_queues, queue_rules
from processor.topology.model import Topology
from processor.topology.queue_spec import (
    ExpirationModel,
    FairnessModel,
    Leasing,
    QueueKind,
    QueueRecoveryPoint,
    QueueSemantics,
    QueueSpec,
)
from processor.topology.unserved import refuse_unserved
from processor.topology.yaml_queues import QUEUE_ELEMENTS
from tests.unit.test_amps_entries import SEED_QUEUES, config
from tests.unit.test_yaml_views import bare, xml, yaml

#: SEED_QUEUES in YAML: the TransactionLog topics are plain topics (sow: false).
SEED_QUEUES_YAML = """
topics:
  - {name: CATALOG, key: /sku}
  - {name: ORDERS_DIRECT, sow: false, message_type: json}
  - {name: ORDERS_WEB, sow: false, message_type: json}
queues:
  - name: MQ
    message_type: json
    underlying: ORDERS_.*
    default_publish_target: ORDERS_DIRECT
    lease_period: 60s
    expiration: 1d
    max_backlog: 3
  - name: GroupQueue
    kind: group_local
    message_type: json
    underlying: ORDERS_.*
    default_publish_target: ORDERS_DIRECT
    group_local_queue_domain: CONSUME_INSTANCES
"""


def assert_same_queues(from_yaml: Topology, from_xml: Topology) -> None:
    assert list(from_yaml.queues) == list(from_xml.queues)
    for name, spec in from_xml.queues.items():
        mine = from_yaml.queues[name]
        for field in dataclasses.fields(QueueSpec):
            if field.name not in ("source", "where"):
                assert getattr(mine, field.name) == getattr(spec, field.name), (name, field.name)
        assert bare(mine) == bare(spec)


def test_seed_queues_in_yaml_are_the_xml_loaders_specs() -> None:
    from_yaml = yaml(SEED_QUEUES_YAML)
    assert_same_queues(from_yaml, xml(SEED_QUEUES))
    mq = from_yaml.queues["MQ"]
    assert (mq.source, mq.where) == ("t.yaml", "queues[0]")
    assert mq.underlying_topics == ("ORDERS_DIRECT", "ORDERS_WEB")
    assert (mq.lease_period_s, mq.expiration_s, mq.max_backlog) == (60.0, 86400.0, 3)
    group = from_yaml.queues["GroupQueue"]
    assert (group.kind, group.where) == (QueueKind.GROUP_LOCAL, "queues[1]")


def test_every_queue_option_is_the_xml_loaders() -> None:
    from_xml = xml(
        config(
            """<Topic><Name>JOBS</Name><Key>/id</Key></Topic>
            <LocalQueue>
              <Topic>WORK</Topic>
              <MessageType>json</MessageType>
              <UnderlyingTopic>JOBS</UnderlyingTopic>
              <DefaultPublishTarget>JOBS</DefaultPublishTarget>
              <LeasePeriod>30s</LeasePeriod>
              <Semantics>AT-MOST-ONCE</Semantics>
              <MaxBacklog>100</MaxBacklog>
              <MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>
              <Expiration>2h</Expiration>
              <ExpirationModel>latest</ExpirationModel>
              <Filter>/kind = 'batch'</Filter>
              <RecoveryPoint>15217338283876189281|1527775235000000001|</RecoveryPoint>
              <FairnessModel>round-robin</FairnessModel>
              <Leasing>strict</Leasing>
              <MaxDeliveries>10</MaxDeliveries>
              <MaxCancels>2</MaxCancels>
              <Priority>/price * /qty</Priority>
              <DeferredAckExpiration>15m</DeferredAckExpiration>
              <FileBackedMetadata>enabled</FileBackedMetadata>
            </LocalQueue>
            <QueueDefinition><Name>LATER</Name><MessageType>json</MessageType>
              <UnderlyingTopic>JOBS</UnderlyingTopic><RecoveryPoint>creation</RecoveryPoint>
              <TargetQueueDepth>1000</TargetQueueDepth></QueueDefinition>
            <Queue><Name>BARRIER</Name><MessageType>json</MessageType>
              <UnderlyingTopic>JOBS</UnderlyingTopic>
              <RecoveryPoint>20240131T100000Z</RecoveryPoint>
              <BarrierExpression>/isSyncPoint IS NOT NULL</BarrierExpression></Queue>
            <GroupLocalQueue><Name>GROUP</Name><MessageType>json</MessageType>
              <UnderlyingTopic>JOBS</UnderlyingTopic><InitialOwner>amps-1</InitialOwner>
              <GroupLocalQueueDomain>d</GroupLocalQueueDomain></GroupLocalQueue>"""
        )
    )
    from_yaml = yaml(
        """
topics: [{name: JOBS, key: /id}]
queues:
  - name: WORK
    kind: LOCAL
    message_type: json
    underlying: JOBS
    default_publish_target: JOBS
    lease_period: 30s
    semantics: AT-MOST-ONCE
    max_backlog: 100
    max_per_subscription_backlog: "5"
    expiration: 2h
    expiration_model: latest
    filter: "/kind = 'batch'"
    recovery_point: 15217338283876189281|1527775235000000001|
    fairness_model: round-robin
    leasing: strict
    max_deliveries: 10
    max_cancels: 2
    priority: /price * /qty
    deferred_ack_expiration: 15m
    file_backed_metadata: true
  - {name: LATER, message_type: json, underlying: JOBS, recovery_point: creation,
     target_queue_depth: 1000, file_backed_metadata: false}
  - name: BARRIER
    kind: queue
    message_type: json
    underlying: JOBS
    recovery_point: 20240131T100000Z
    barrier_expression: /isSyncPoint IS NOT NULL
  - {name: GROUP, kind: group_local, message_type: json, underlying: JOBS,
     initial_owner: amps-1, group_local_queue_domain: d}
"""
    )
    assert_same_queues(from_yaml, from_xml)
    work = from_yaml.queues["WORK"]
    assert (work.kind, work.semantics) == (QueueKind.LOCAL, QueueSemantics.AT_MOST_ONCE)
    assert (work.fairness_model, work.leasing) == (FairnessModel.ROUND_ROBIN, Leasing.STRICT)
    assert work.expiration_model is ExpirationModel.LATEST
    assert work.recovery_point == QueueRecoveryPoint(
        "bookmark", bookmark="15217338283876189281|1527775235000000001|"
    )
    assert (work.max_per_subscription_backlog, work.file_backed_metadata) == (5, True)
    assert (work.priority, work.deferred_ack_expiration_s) == ("/price * /qty", 900.0)
    later = from_yaml.queues["LATER"]
    assert (later.target_queue_depth, later.file_backed_metadata) == (1000, False)
    assert from_yaml.queues["BARRIER"].recovery_point.kind == "timestamp"
    assert from_yaml.queues["GROUP"].initial_owner == "amps-1"


def test_every_amps_queue_element_has_its_yaml_field() -> None:
    """The YAML fields and the XML elements are the shared rules' elements: one cannot
    gain an option the other lacks."""
    assert sorted(QUEUE_ELEMENTS.values()) == sorted(queue_rules.ELEMENTS)
    assert set(amps_queues.ELEMENTS) == {"Name", "Topic", "MessageType", *queue_rules.ELEMENTS}


def test_a_queue_may_bear_the_name_of_the_plain_topic_it_reads() -> None:
    topology = yaml(
        "topics:\n  - {name: A, key: /id}\n  - {name: TASKS, sow: false}\n"
        "queues:\n  - {name: TASKS, message_type: json}\n"
    )
    tasks = topology.queues["TASKS"]
    assert (tasks.underlying, tasks.default_publish_target) == ("TASKS", "TASKS")
    assert (tasks.underlying_pattern, tasks.underlying_topics) == (False, ("TASKS",))
    assert "TASKS" in topology.plain_topics


def test_check_config_describes_a_yaml_queue_and_serve_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(SEED_QUEUES_YAML)
    assert cmd_check_config(argparse.Namespace(paths=[path])) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    queues = {line["queue"]: line for line in lines if "queue" in line}
    mq = queues["MQ"]
    assert (mq["element"], mq["kind"], mq["lease_period"], mq["expiration"]) == (
        "queues[0]",
        "Queue",
        "1m",
        "1d",
    )
    assert mq["underlying_topics"] == ["ORDERS_DIRECT", "ORDERS_WEB"]
    assert mq["served"] == "served: a SOW topic whose records the processor derives"
    assert (
        "refused by sow serve: queue 'MQ' reads the same plain topic"
        in (queues["GroupQueue"]["served"])
    )
    assert mq["does"].startswith("delivers each message published to ORDERS_.* to one")
    assert queues["GroupQueue"]["kind"] == "GroupLocalQueue"
    assert "1 entries sow serve refuses for now" in err
    with pytest.raises(UnservedEntryError) as caught:
        refuse_unserved(yaml(SEED_QUEUES_YAML))
    assert "'MQ' at" not in str(caught.value)
    assert "GroupLocalQueue 'GroupQueue' at t.yaml: queues[1] (queue 'MQ' reads" in str(
        caught.value
    )


TOPICS = """topics:
  - {name: A, key: /id}
  - {name: BIN, message_type: binary}
  - {name: IN_A, sow: false}
  - {name: IN_B, sow: false}
"""


def queue(**fields: str) -> str:
    """One queue Q over A, changed or extended by ``fields`` (YAML flow values; an empty
    value removes the field)."""
    base = {"name": "Q", "message_type": "json", "underlying": "A", **fields}
    body = ", ".join(f"{k}: {v}" for k, v in base.items() if v)
    return f"queues:\n  - {{{body}}}\n"


VIEW = (
    "views:\n  - {name: V, message_type: json, underlying: %s, projection: [/g], grouping: [/g]}\n"
)


@pytest.mark.parametrize(
    ("body", "where", "fragments"),
    [
        (queue(message_type=""), "queues[Q]", ["a queue needs 'message_type'"]),
        (queue(message_type="text"), "queues[Q].message_type", ["allowed: json"]),
        (queue(message_type="avro"), "queues[Q].schema", ["needs 'schema'"]),
        (queue(schema="x.avsc"), "queues[Q].schema", ["only for message types avro"]),
        (
            queue(message_type="nvfix"),
            "queues[Q].message_type",
            ["the underlying topic 'A' (at topics[0]) has message_type json, not the queue's"],
        ),
        (
            queue(underlying=""),
            "queues[Q]",
            [
                "underlying topic 'Q' (the queue's name, by default) is not a topic of this file",
                "a SOW topic, or a plain topic",
                "(allowed: A, BIN, IN_A, IN_B)",
            ],
        ),
        (
            queue(underlying="V") + VIEW % "A",
            "queues[Q].underlying",
            ["underlying topic 'V' is defined at views[0], not a topic"],
        ),
        (
            queue(underlying="'IN_.*'"),
            "queues[Q]",
            ["'IN_.*' is a regular expression", "needs default_publish_target"],
        ),
        (
            queue(underlying="'IN_.*'", default_publish_target="A"),
            "queues[Q].default_publish_target",
            ["default_publish_target 'A' must be a topic", "matches (matched: IN_A, IN_B)"],
        ),
        (
            queue(default_publish_target="IN_A"),
            "queues[Q].default_publish_target",
            ["'IN_A' must be one of the queue's topics: its underlying topic 'A'"],
        ),
        (queue(underlying="'IN_('"), "queues[Q].underlying", ["invalid regular expression"]),
        (queue(underlying="[A]"), "queues[Q].underlying", ["expected a topic name", "a list"]),
        (queue(kind="distributed"), "queues[Q].kind", ["allowed: queue, local, group_local"]),
        (queue(kind="[local]"), "queues[Q].kind", ["expected queue, local or group_local"]),
        (
            queue(semantics="exactly-once"),
            "queues[Q].semantics",
            ["semantics 'exactly-once' is not allowed; allowed: at-least-once, at-most-once"],
        ),
        (
            queue(semantics="at-most-once", fairness_model="fast"),
            "queues[Q].fairness_model",
            ["an at-most-once queue delivers round-robin only, not fast"],
        ),
        (
            queue(fairness_model="random"),
            "queues[Q].fairness_model",
            ["allowed: fast, round-robin, proportional"],
        ),
        (
            queue(target_queue_depth="999"),
            "queues[Q].target_queue_depth",
            ["target_queue_depth 999 is out of range; expected an integer >= 1000"],
        ),
        (
            queue(priority="/p", barrier_expression="'/b = 1'"),
            "queues[Q].barrier_expression",
            [
                "barrier_expression cannot be combined with priority",
                "priority, barrier_expression and target_queue_depth exclude each other",
            ],
        ),
        (
            queue(target_queue_depth="5000", priority="/p"),
            "queues[Q].target_queue_depth",
            ["target_queue_depth cannot be combined with priority"],
        ),
        (
            queue(target_queue_depth="5000", barrier_expression="'/b = 1'"),
            "queues[Q].target_queue_depth",
            ["target_queue_depth cannot be combined with barrier_expression"],
        ),
        (
            queue(initial_owner="amps-1"),
            "queues[Q].initial_owner",
            ["initial_owner is for a queue of kind group_local only, not a queue of kind queue"],
        ),
        (
            queue(kind="local", group_local_queue_domain="d"),
            "queues[Q].group_local_queue_domain",
            ["for a queue of kind group_local only, not a queue of kind local"],
        ),
        (queue(priority="'/p +'"), "queues[Q].priority", ["not a valid value expression"]),
        (queue(barrier_expression="'SUM(/x) = 1'"), "queues[Q].barrier_expression", ["SUM"]),
        (queue(filter="'/x =='"), "queues[Q].filter", ["the filter is not a valid filter"]),
        (
            queue(lease_period="0s"),
            "queues[Q].lease_period",
            ["lease_period must be greater than 0, got 0s"],
        ),
        (
            queue(deferred_ack_expiration="0ms"),
            "queues[Q].deferred_ack_expiration",
            ["deferred_ack_expiration must be greater than 0"],
        ),
        (queue(expiration="1"), "queues[Q].expiration", ["a unit is required"]),
        (queue(expiration="[1d]"), "queues[Q].expiration", ["expected an interval", "a list"]),
        (
            queue(recovery_point="yesterday"),
            "queues[Q].recovery_point",
            ["recovery_point 'yesterday' is not allowed; allowed: epoch, now, creation"],
        ),
        (
            queue(max_backlog="0"),
            "queues[Q].max_backlog",
            ["max_backlog 0 is out of range; expected an integer >= 1"],
        ),
        (
            queue(max_per_subscription_backlog="0"),
            "queues[Q].max_per_subscription_backlog",
            ["expected an integer >= 1"],
        ),
        (queue(max_cancels="-1"), "queues[Q].max_cancels", ["max_cancels '-1'", ">= 0"]),
        (queue(max_deliveries="1.5"), "queues[Q].max_deliveries", ["not a whole number"]),
        (queue(max_backlog="[3]"), "queues[Q].max_backlog", ["expected an integer, got a list"]),
        (
            queue(file_backed_metadata="enabled"),
            "queues[Q].file_backed_metadata",
            ["expected true", "got the string 'enabled'"],
        ),
        (queue(leasing="loose"), "queues[Q].leasing", ["allowed: strict, sublet"]),
        (
            queue(expiration_model="never"),
            "queues[Q].expiration_model",
            ["allowed: default, queue, latest, earliest"],
        ),
        (queue(leaseperiod="1s"), "queues[Q].leaseperiod", ["did you mean 'lease_period'?"]),
        (
            queue(message_type="binary", underlying="BIN", filter="'/a = 1'"),
            "queues[Q].filter",
            ["'BIN' is a binary topic", "so the filter cannot read its fields"],
        ),
        (
            queue(message_type="binary", underlying="BIN", priority="/p"),
            "queues[Q].priority",
            ["so the priority cannot read its fields"],
        ),
        ("queues:\n  - {message_type: json}\n", "queues[0]", ["the queue has no 'name'"]),
        ("queues:\n  - [Q]\n", "queues[0]", ["a queue is a mapping of fields"]),
        ("queues: {Q: 1}\n", "queues", ["expected a list of queues"]),
        (queue(name="A"), "queues[0]", ["'A' is defined twice (first: a topic, at topics[0])"]),
        (
            queue() + "  - {name: Q, message_type: json, underlying: A}\n",
            "queues[1]",
            ["'Q' is defined twice (first: queues[0])"],
        ),
        (
            queue() + VIEW % "Q",
            "views[V].underlying",
            ["'Q' is a queue (at queues[0]); a view reads SOW topics, views or conflated topics"],
        ),
        (
            queue(kind="local") + "conflated_topics:\n  - {name: C, underlying: Q}\n",
            "conflated_topics[C].underlying",
            ["'Q' is a local queue (at queues[0])"],
        ),
    ],
)
def test_errors_name_the_field(body: str, where: str, fragments: list[str]) -> None:
    with pytest.raises(TopologyError) as caught:
        yaml(TOPICS + body)
    message = str(caught.value)
    assert message.startswith(f"t.yaml: {where}: "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
