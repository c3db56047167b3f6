"""Plain topics (no SOW) in topologies: the YAML ``sow: false`` declaration, AMPS
``TransactionLog`` topics, and their errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from processor.app import topic_specs
from processor.errors import TopologyError
from processor.topology import load_topology
from processor.topology.amps_xml import parse_amps_config
from processor.topology.model import PlainTopic, SowTopic
from processor.topology.yaml_loader import parse_yaml


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def yaml_error(text: str, *fragments: str) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        parse_yaml(text, "topo.yaml")
    message = str(info.value)
    assert "topo.yaml" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return info.value


def test_yaml_plain_topic(tmp_path: Path) -> None:
    write(tmp_path, "ticks.avsc", '{"type": "record", "name": "T", "fields": []}')
    topology = parse_yaml(
        """
defaults: {partitions: 3, durability: transient, expiration: 10s}
topics:
  - {name: ORDERS, key: /id}
  - name: TICKS
    sow: false
    kafka_topic: ticks.in
  - name: QUOTES
    sow: false
    message_type: avro
    schema: ticks.avsc
    partitions: 1
  - {name: KEPT, sow: true, key: /id, kafka_topic: kept}
""",
        str(tmp_path / "topo.yaml"),
    )
    assert list(topology.topics) == ["ORDERS", "KEPT"]
    assert list(topology.plain_topics) == ["TICKS", "QUOTES"]
    ticks, quotes = topology.plain_topics.values()
    assert isinstance(ticks, PlainTopic)
    assert (ticks.kafka_topic, ticks.partitions, ticks.message_type) == ("ticks.in", 3, "json")
    # A plain topic is not a kind of SOW topic: nothing that concerns a SOW reaches it.
    assert not isinstance(ticks, SowTopic)
    assert not hasattr(ticks, "expiration_s")
    assert not hasattr(ticks, "changelog_topic")
    assert (quotes.message_type, quotes.partitions) == ("avro", 1)
    assert quotes.schema == str(tmp_path / "ticks.avsc")
    assert [t.name for t in topology.every_topic()] == ["ORDERS", "KEPT", "TICKS", "QUOTES"]


def test_a_plain_topic_needs_only_its_input_kafka_topic() -> None:
    topology = parse_yaml(
        "topics: [{name: ORDERS, key: /id}, {name: TICKS, sow: false, partitions: 2}]", "t.yaml"
    )
    specs = {spec.name: spec.partitions for spec in topic_specs(topology, "dead")}
    assert specs == {
        "dead": 1,
        "ORDERS": 1,
        "ORDERS.sow-repartition": 1,
        "ORDERS.sow-changelog": 1,
        "TICKS": 2,
    }


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "topics: [{name: T, sow: false, key: /id}]",
            ["topics[T].key", "has no SOW (sow: false), so 'key' does not apply", "remove 'key'"],
        ),
        (
            "topics: [{name: T, sow: false, expiration: 5s}]",
            ["topics[T].expiration", "a plain topic takes only name, sow, message_type"],
        ),
        (
            "topics: [{name: T, sow: 'no'}]",
            ["topics[T].sow", "expected true (a SOW topic, the default) or false", "'no'"],
        ),
        (
            "topics: [{name: T, key: /id}, {name: T, sow: false, kafka_topic: t2}]",
            ["topic 'T' is defined twice", "topic names must be unique"],
        ),
        (
            "topics: [{name: A, key: /id, kafka_topic: x}, {name: B, sow: false, kafka_topic: x}]",
            ["Kafka topic 'x' (the input topic of 'B') is also the input topic of 'A'"],
        ),
        (
            "topics: [{name: A, key: /id}, {name: B, sow: false, kafka_topic: A.sow-changelog}]",
            ["(the input topic of 'B') is also the changelog topic of 'A'"],
        ),
        (
            "topics: [{name: 'a b', sow: false}]",
            ["Kafka topic 'a b' (taken from the topic name) is not a legal Kafka topic name"],
        ),
        (
            "topics: [{name: T, sow: false, message_type: avro}]",
            ["message_type avro needs 'schema'"],
        ),
    ],
)
def test_yaml_plain_topic_errors(text: str, fragments: list[str]) -> None:
    yaml_error(text, *fragments)


def test_plain_topics_alone_are_not_a_topology(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.yaml", "topics: [{name: T, sow: false}]")
    with pytest.raises(TopologyError, match="defines no SOW topics \\(plain topics alone"):
        load_topology(path)


def test_directory_plain_and_sow_topic_names_clash(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "topics: [{name: T, key: /id}]")
    write(tmp_path, "b.yaml", "topics: [{name: T, sow: false, kafka_topic: t2}]")
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path)
    message = str(info.value)
    assert "a.yaml" in message
    assert "b.yaml" in message
    assert "'T' is defined twice" in message


def test_directory_merges_plain_topics(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "topics: [{name: A, key: /id}]")
    write(tmp_path, "b.yaml", "topics: [{name: B, sow: false}]")
    topology = load_topology(tmp_path)
    assert (list(topology.topics), list(topology.plain_topics)) == (["A"], ["B"])


XML = """<AMPSConfig>
  <SOW><Topic><Name>ORDERS</Name><Key>/id</Key></Topic></SOW>
  <TransactionLog>
    <JournalDirectory>./journal</JournalDirectory>
    {topics}
  </TransactionLog>
</AMPSConfig>"""


def test_xml_transaction_log_topics_without_a_sow_are_plain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = """
    <Topic><Name>ORDERS</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>TICKS</Name><MessageType>binary</MessageType>
      <KafkaTopic>ticks.in</KafkaTopic><Partitions>4</Partitions></Topic>
    <Topic><Name>orders.*</Name></Topic>
    <Topic><Name>alerts</Name></Topic>"""
    with caplog.at_level(logging.WARNING):
        topology = parse_amps_config(XML.format(topics=topics), "amps.xml", environ={})
    assert list(topology.topics) == ["ORDERS"]
    assert list(topology.plain_topics) == ["TICKS", "alerts"]
    ticks = topology.plain_topics["TICKS"]
    assert (ticks.message_type, ticks.kafka_topic, ticks.partitions) == ("binary", "ticks.in", 4)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "AMPSConfig/TransactionLog/Topic[3]" in warned
    assert "'orders.*' is a pattern" in warned


@pytest.mark.parametrize(
    ("topics", "fragments"),
    [
        (
            "<Topic><Name>T</Name><Key>/id</Key></Topic>",
            ["AMPSConfig/TransactionLog/Topic[1]/Key", "unknown element"],
        ),
        (
            "<Topic><MessageType>json</MessageType></Topic>",
            ["AMPSConfig/TransactionLog/Topic[1]", "needs one"],
        ),
        (
            "<Topic><Name>T</Name><Partitions>0</Partitions></Topic>",
            ["AMPSConfig/TransactionLog/Topic[1]/Partitions"],
        ),
        (
            "<Topic><Name>T</Name><MessageType>yaml</MessageType></Topic>",
            ["AMPSConfig/TransactionLog/Topic[1]/MessageType"],
        ),
        (
            "<Topic><Name>a b</Name></Topic>",
            ["AMPSConfig/TransactionLog/Topic[1]/Name", "not a legal Kafka topic name"],
        ),
    ],
)
def test_xml_transaction_log_topic_errors(topics: str, fragments: list[str]) -> None:
    with pytest.raises(TopologyError) as info:
        parse_amps_config(XML.format(topics=topics), "amps.xml", environ={})
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
