"""A SOW topic's upsert topic in the topology (docs/upsert-tables.md): both formats, the
errors that name the field, the topic created compacted with the SOW topic's partitions,
the processor's ACLs and check-config's line."""

from __future__ import annotations

import pytest

from processor.cli.check import describe
from processor.errors import TopologyError
from processor.log.kafka.acls import component_acls
from processor.log.topics import topic_specs
from processor.topology.amps_xml import parse_amps_config
from processor.topology.upserts import UpsertKey, UpsertSpec
from processor.topology.yaml_loader import parse_yaml


def _yaml(fields: str) -> str:
    return f"topics:\n  - {{name: ORDERS, key: /id, partitions: 3, {fields}}}\n"


def test_yaml_true_is_the_default_topic_keyed_by_sow_key() -> None:
    topic = parse_yaml(_yaml("upsert: true"), "t.yaml").topics["ORDERS"]
    assert topic.upsert == UpsertSpec("", UpsertKey.SOW_KEY)
    assert topic.upsert_topic == "ORDERS.sow-upsert"
    assert parse_yaml(_yaml("upsert: false"), "t.yaml").topics["ORDERS"].upsert_topic is None


def test_yaml_and_xml_name_the_topic_and_the_key_alike() -> None:
    yaml = parse_yaml(_yaml("upsert: {topic: orders-table, key: fields}"), "t.yaml")
    xml = parse_amps_config(
        "<AMPSConfig><SOW><Topic><Name>ORDERS</Name><MessageType>json</MessageType>"
        "<Key>/id</Key><Partitions>3</Partitions><UpsertTopic>orders-table</UpsertTopic>"
        "<UpsertKey>fields</UpsertKey></Topic></SOW></AMPSConfig>",
        "c.xml",
    )
    assert yaml.topics["ORDERS"] == xml.topics["ORDERS"]
    assert xml.topics["ORDERS"].upsert == UpsertSpec("orders-table", UpsertKey.FIELDS)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("upsert: {key: nope}", "upsert key is sow_key"),
        ("upsert: {topics: x}", "unknown field 'topics'"),
        ("upsert: 3", "upsert is true, false or a mapping"),
        ("upsert: {topic: 'a b'}", "not a legal Kafka topic name"),
        ("upsert: {topic: ORDERS.sow-changelog}", "not the topic's input, changelog"),
    ],
)
def test_a_bad_upsert_option_names_its_field(fields: str, message: str) -> None:
    with pytest.raises(TopologyError, match=r"topics\[ORDERS\]\.upsert") as raised:
        parse_yaml(_yaml(fields), "t.yaml")
    assert message in str(raised.value)


def test_fields_keys_need_key_fields() -> None:
    with pytest.raises(TopologyError, match="has none; use key sow_key"):
        parse_yaml("topics:\n  - {name: T, upsert: {key: fields}}\n", "t.yaml")


def test_an_upsert_key_without_a_topic_is_refused_in_xml() -> None:
    with pytest.raises(TopologyError, match="<UpsertKey> needs <UpsertTopic>"):
        parse_amps_config(
            "<AMPSConfig><SOW><Topic><Name>T</Name><MessageType>json</MessageType>"
            "<UpsertKey>fields</UpsertKey></Topic></SOW></AMPSConfig>",
            "c.xml",
        )


def test_the_topic_is_compacted_with_the_sow_topics_partitions_and_the_processor_writes_it() -> (
    None
):
    topology = parse_yaml(_yaml("upsert: true"), "t.yaml")
    specs = {spec.name: spec for spec in topic_specs(topology, "dead")}
    upsert = specs["ORDERS.sow-upsert"]
    assert (upsert.partitions, upsert.config) == (3, {"cleanup.policy": "compact"})
    granted = {(acl.name, acl.operation) for acl in component_acls("processor", topology)}
    assert {("ORDERS.sow-upsert", "Write"), ("ORDERS.sow-upsert", "Create")} <= granted
    plain = parse_yaml(_yaml("upsert: false"), "t.yaml")
    assert not any("upsert" in acl.name for acl in component_acls("processor", plain))
    assert describe(topology.topics["ORDERS"])["upsert_topic"] == {
        "topic": "ORDERS.sow-upsert",
        "key": "sow_key",
    }


_VIEW = """
topics:
  - {name: ORDERS, key: /id, partitions: 2}
views:
  - {name: V, message_type: json, underlying: ORDERS, projection: ["/r AS /r"], grouping: [/r],
     %s}
"""


def test_a_view_has_an_upsert_topic_keyed_by_sow_key() -> None:
    view = parse_yaml(_VIEW % "upsert: {topic: v-table}", "t.yaml").topics["V"]
    assert (view.upsert_topic, view.partitions) == ("v-table", 2)
    specs = {spec.name: spec for spec in topic_specs(parse_yaml(_VIEW % "upsert: true", "t"), "d")}
    assert specs["V.sow-upsert"].partitions == 2
    with pytest.raises(TopologyError, match=r"views\[V\]\.upsert: a view's upsert topic is keyed"):
        parse_yaml(_VIEW % "upsert: {key: fields}", "t.yaml")
    with pytest.raises(TopologyError, match=r"views\[V\]\.upsert: .*not a legal Kafka topic"):
        parse_yaml(_VIEW % "upsert: {topic: 'a b'}", "t.yaml")
