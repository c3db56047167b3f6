"""Views and conflated topics in the YAML topology (issue 21, item 5): a YAML definition
loads to the same ViewSpec / ConflatedTopicSpec as the AMPS XML loader makes of the same
definition (seed 002's examples), with the same checks, and errors name the file and the
field path."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from processor.errors import TopologyError
from processor.topology.amps_xml import parse_amps_config
from processor.topology.loader import load_topology
from processor.topology.model import (
    ConflatedTopicSpec,
    HashIndexSpec,
    TopicRef,
    Topology,
    ViewConflation,
    ViewSpec,
)
from processor.topology.yaml_loader import parse_yaml
from tests.unit.test_amps_entries import SEED_CONFLATED, SEED_VIEWS, config

#: SEED_VIEWS (seed 002, "Example 9.2: View Example") written in YAML.
SEED_VIEWS_YAML = """
topics:
  - {name: /ett/order, message_type: fix, key: /orderId}
  - {name: orders, message_type: json, key: /orderId}
  - {name: source-for-hash-sample, message_type: json, key: /id}
  - {name: example, message_type: json, key: /id}
  - {name: ORDERS, message_type: nvfix, key: /OrderID}
  - {name: COMPANIES, message_type: nvfix, key: /CompanyId}
views:
  - name: TOTAL_VALUE
    message_type: nvfix
    underlying: /ett/order
    projection:
      - /109
      - SUM(/14 * /6) AS /71406
    grouping: [/109]
  - name: CompleteByRegion
    underlying: orders
    message_type: json
    projection: ["COUNT(/orderId) AS /completedOrders", "/region AS /region"]
    grouping: [/region]
    filter: "/status = 'complete'"
  - name: hash-sample-view
    message_type: json
    underlying: source-for-hash-sample
    projection: ["SUM(/qty) as /quantity", /customerName, /orderType]
    grouping: [/customerName, /orderType]
    hash_indexes: [/name, /orderType]
  - name: example-nvfix
    message_type: nvfix
    underlying: "[json].[example]"
    projection: ["[json].[example]./id AS /id"]
    grouping: ["[json].[example]./id"]
  - name: TOTAL_COMPANY_VOLUME
    joins: ["[ORDERS]./Tick = [COMPANIES]./Tick"]
    message_type: nvfix
    projection:
      - "[COMPANIES]./CompanyId"
      - "[COMPANIES]./Tick"
      - "[COMPANIES]./Name"
      - "SUM([ORDERS]./Shares) AS /TotalVolume"
    grouping: ["[ORDERS]./Tick"]
"""

#: SEED_CONFLATED in YAML, each over its own FastPublishTopic.
SEED_CONFLATED_YAML = {
    "nvfix": """
conflated_topics:
  - name: FastPublishTopic-C
    message_type: nvfix
    underlying: FastPublishTopic
    interval: 5s
    filter: "/region = 'A'"
""",
    "json": """
conflated_topics:
  - name: LongIntervalTopic-C
    message_type: json
    underlying: FastPublishTopic
    interval: 120s
    hash_indexes: [/order/status]
""",
}


def yaml(text: str, source: str = "t.yaml") -> Topology:
    return parse_yaml(text, source)


def xml(text: str) -> Topology:
    return parse_amps_config(text, "t.xml", environ={})


def bare(spec: ViewSpec | ConflatedTopicSpec) -> Any:
    """A spec without where it was defined (the one difference between the formats)."""
    return dataclasses.replace(spec, source="", where="")


def assert_same_entries(from_yaml: Topology, from_xml: Topology) -> None:
    assert list(from_yaml.views) == list(from_xml.views)
    assert list(from_yaml.conflated_topics) == list(from_xml.conflated_topics)
    for name, spec in from_xml.views.items():
        mine = from_yaml.views[name]
        for field in dataclasses.fields(ViewSpec):
            if field.name not in ("source", "where"):
                assert getattr(mine, field.name) == getattr(spec, field.name), (name, field.name)
        assert bare(mine) == bare(spec)
    for name, conflated in from_xml.conflated_topics.items():
        assert bare(from_yaml.conflated_topics[name]) == bare(conflated)


def test_seed_views_in_yaml_are_the_xml_loaders_specs() -> None:
    from_yaml, from_xml = yaml(SEED_VIEWS_YAML), xml(SEED_VIEWS)
    assert_same_entries(from_yaml, from_xml)
    joined = from_yaml.views["TOTAL_COMPANY_VOLUME"]
    assert joined.underlying == (TopicRef("ORDERS"), TopicRef("COMPANIES"))
    assert joined.joins[0].left_field == "/Tick"
    assert from_yaml.views["example-nvfix"].underlying == (TopicRef("example", "json"),)
    # the texts are kept as written; qualifiers are made plain for compilation only
    assert from_yaml.views["example-nvfix"].projection == ("[json].[example]./id AS /id",)
    # each view is the same SOW topic in both (Grouping fields indexed automatically)
    assert set(from_yaml.topics) == set(from_xml.topics)
    for name in from_xml.views:
        mine, theirs = from_yaml.topics[name], from_xml.topics[name]
        assert dataclasses.replace(mine, view=None) == dataclasses.replace(theirs, view=None)
        assert mine.view is from_yaml.views[name]
    total = from_yaml.views["TOTAL_VALUE"]
    assert (total.source, total.where) == ("t.yaml", "views[0]")


@pytest.mark.parametrize(("message_type", "entry"), SEED_CONFLATED)
def test_seed_conflated_topics_in_yaml_are_the_xml_loaders_specs(
    message_type: str, entry: str
) -> None:
    underlying = (
        f"<Topic><Name>FastPublishTopic</Name><MessageType>{message_type}</MessageType>"
        "<Key>/id</Key></Topic>"
    )
    topics = f"topics:\n  - {{name: FastPublishTopic, message_type: {message_type}, key: /id}}\n"
    from_yaml = yaml(topics + SEED_CONFLATED_YAML[message_type])
    assert_same_entries(from_yaml, xml(config(underlying + entry)))
    (conflated,) = from_yaml.conflated_topics.values()
    assert conflated.where == "conflated_topics[0]"
    assert conflated.interval_s == (5.0 if message_type == "nvfix" else 120.0)


def test_a_conflated_topic_takes_its_underlying_topics_type_and_the_default_interval() -> None:
    topology = yaml(
        "topics:\n  - {name: Q, message_type: nvfix, key: /id}\n"
        "conflated_topics:\n  - {name: Q-C, underlying: Q, enrichment: ['1 AS /one']}\n"
    )
    conflated = topology.conflated_topics["Q-C"]
    assert (conflated.message_type, conflated.interval_s) == ("nvfix", 5.0)
    assert conflated.enrichment == ("1 AS /one",)


def test_a_conflated_pattern_topic_with_its_topic_format() -> None:
    regex = "<Topic><Name>R</Name><Pattern>regex.*</Pattern><Key>/id</Key></Topic>"
    entry = (
        "<ConflatedTopic><Name>RC</Name><UnderlyingTopic>R</UnderlyingTopic>"
        "<Interval>20s</Interval><TopicFormat>%n-C</TopicFormat></ConflatedTopic>"
    )
    from_yaml = yaml(
        "topics:\n  - {name: R, pattern: 'regex.*', key: /id}\n"
        "conflated_topics:\n  - {name: RC, underlying: R, interval: 20s, topic_format: '%n-C'}\n"
    )
    assert_same_entries(from_yaml, xml(config(regex + entry)))
    assert from_yaml.conflated_topics["RC"].topic_format == "%n-C"


def test_every_view_option_is_the_xml_loaders() -> None:
    from_xml = xml(
        config(
            """<Topic><Name>A</Name><Key>/id</Key></Topic>
            <Topic><Name>B</Name><Key>/id</Key></Topic>
            <View>
              <Name>AB</Name><MessageType>json</MessageType>
              <UnderlyingTopic>
                <Join>[A]./x = [B]./x</Join>
                <Join>[json].[A].[/y] = [B]./y</Join>
              </UnderlyingTopic>
              <Projection><Field>[A]./x</Field><Field>COUNT([B]./id) AS /n</Field></Projection>
              <Grouping><Field>[A]./x</Field></Grouping>
              <KeyDomain>shared</KeyDomain>
              <Conflation>INLINE</Conflation>
              <JoinNullEquivalency>enabled</JoinNullEquivalency>
              <HashIndex><Key>/a</Key><Key>/b</Key></HashIndex>
              <HashIndex><Key>/n</Key></HashIndex>
            </View>"""
        )
    )
    from_yaml = yaml(
        """
topics:
  - {name: A, key: /id, partitions: 3}
  - {name: B, key: /id}
views:
  - name: AB
    message_type: json
    joins: ["[A]./x = [B]./x", "[json].[A].[/y] = [B]./y"]
    projection: ["[A]./x", "COUNT([B]./id) AS /n"]
    grouping: "[A]./x"
    key_domain: shared
    conflation: INLINE
    join_null_equivalency: true
    hash_indexes: [[/a, /b], /n]
"""
    )
    assert_same_entries(from_yaml, from_xml)
    view = from_yaml.views["AB"]
    assert (view.conflation, view.join_null_equivalency) == (ViewConflation.INLINE, True)
    assert view.hash_indexes == (HashIndexSpec(("/a", "/b")), HashIndexSpec(("/n",)))
    assert from_yaml.topics["AB"].partitions == 3  # as many as the underlying with the most


def test_a_views_kafka_topic_and_partitions() -> None:
    topology = yaml(
        """
topics: [{name: A, key: /id, partitions: 2}]
views:
  - {name: V, message_type: json, underlying: A, projection: [/g], grouping: [/g],
     partitions: 8, kafka_topic: v-out}
  - {name: W, message_type: json, underlying: A, projection: [/g], grouping: [/g]}
"""
    )
    assert (topology.views["V"].partitions, topology.views["V"].kafka_topic) == (8, "v-out")
    assert (topology.topics["V"].partitions, topology.topics["V"].kafka_topic) == (8, "v-out")
    assert (topology.topics["W"].partitions, topology.topics["W"].kafka_topic) == (2, "W")
    assert topology.views["W"].partitions == 0  # as in XML: derived for the view's topic


def test_views_of_views_and_a_conflated_topic_of_a_view() -> None:
    topology = yaml(
        """
topics: [{name: A, key: /id, partitions: 4}]
views:
  - {name: V1, message_type: json, underlying: A, projection: [/g, "SUM(/q) AS /q"],
     grouping: [/g]}
  - {name: V2, message_type: json, underlying: V1, projection: ["MAX(/q) AS /top"],
     grouping: [/g]}
conflated_topics:
  - {name: V2-C, underlying: V2, interval: 250ms}
  - {name: V2-C-C, underlying: V2-C}
"""
    )
    assert list(topology.views) == ["V1", "V2"]
    assert topology.views["V2"].underlying == (TopicRef("V1"),)
    assert topology.topics["V2"].view is topology.views["V2"]
    assert topology.topics["V2"].partitions == 4
    assert topology.conflated_topics["V2-C"].interval_s == 0.25
    assert topology.conflated_topics["V2-C-C"].underlying == "V2-C"


def test_scoped_names_as_in_the_seed() -> None:
    """Seed 002 as printed: the nvfix view 'example' reads the json topic 'example'."""
    text = SEED_VIEWS_YAML.replace("name: example-nvfix", "name: example")
    from_yaml = yaml(text)
    from_xml = xml(SEED_VIEWS.replace("<Name>example-nvfix</Name>", "<Name>example</Name>"))
    assert_same_entries(from_yaml, from_xml)
    assert from_yaml.topics["[json].[example]"].message_type == "json"
    assert from_yaml.topics["[nvfix].[example]"].view is from_yaml.views["example"]
    same_type = text.replace(
        "name: example\n    message_type: nvfix", "name: example\n    message_type: json"
    )
    assert same_type != text
    with pytest.raises(TopologyError, match=r"views\[3\]: topic 'example' is defined twice"):
        yaml(same_type)


def test_a_view_reads_a_topic_of_its_file_only(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("topics: [{name: A, key: /id}]\n")
    view = "{name: V, message_type: json, underlying: %s, projection: [/g], grouping: [/g]}"
    (tmp_path / "b.yaml").write_text(f"topics: [{{name: B, key: /id}}]\nviews: [{view % 'A'}]\n")
    with pytest.raises(TopologyError) as caught:
        load_topology(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'b.yaml'}: views[V].underlying: ")
    assert "'A', which is not defined in this file" in str(caught.value)
    (tmp_path / "b.yaml").write_text(f"topics: [{{name: B, key: /id}}]\nviews: [{view % 'B'}]\n")
    topology = load_topology(tmp_path)  # merged with a.yaml: the view is kept, and its topic
    assert topology.views["V"].source == str(tmp_path / "b.yaml")
    assert topology.topics["V"].view is topology.views["V"]


TOPICS = """topics:
  - {name: A, key: /id}
  - {name: B, key: /id}
  - {name: BIN, message_type: binary}
  - {name: P, pattern: 'p.*', key: /id}
  - {name: PLAIN, sow: false}
"""


def view(**fields: str) -> str:
    """One view over A with projection and grouping /g, changed or extended by ``fields``
    (YAML flow values; an empty value removes the field)."""
    base = {
        "name": "V",
        "message_type": "json",
        "underlying": "A",
        "projection": "[/g]",
        "grouping": "[/g]",
    }
    base.update(fields)
    return "{" + ", ".join(f"{k}: {v}" for k, v in base.items() if v) + "}"


def views(*items: str) -> str:
    return "views:\n" + "".join(f"  - {item}\n" for item in items)


def conflated(**fields: str) -> str:
    base = {"name": "C", "underlying": "A", **fields}
    body = ", ".join(f"{k}: {v}" for k, v in base.items() if v)
    return f"conflated_topics:\n  - {{{body}}}\n"


@pytest.mark.parametrize(
    ("body", "where", "fragments"),
    [
        (views(view(message_type="")), "views[V]", ["needs 'message_type'", "bflat"]),
        (
            views(view(message_type="binary")),
            "views[V].message_type",
            ["a view cannot have message_type binary"],
        ),
        (views(view(message_type="avro")), "views[V].schema", ["needs 'schema'"]),
        (views(view(message_type="text")), "views[V].message_type", ["allowed: json"]),
        (views(view(underlying="")), "views[V]", ["'underlying'", "'joins'", "give one"]),
        (
            views(view(joins="['[A]./x = [B]./x']")),
            "views[V]",
            ["give only one of them"],
        ),
        (views(view(projection="")), "views[V]", ["needs 'projection'"]),
        (views(view(grouping="")), "views[V]", ["needs 'grouping'"]),
        (views(view(filtre="'/a = 1'")), "views[V].filtre", ["'filter'?"]),
        (views("{message_type: json}"), "views[0]", ["has no 'name'"]),
        (views("[V]"), "views[0]", ["a view is a mapping"]),
        ("views: {V: 1}\n", "views", ["expected a list of views"]),
        (
            views(view(underlying="X")),
            "views[V].underlying",
            [
                "'X', which is not defined in this file",
                "SOW topics, views or conflated topics",
                "(A, B, BIN, P)",
            ],
        ),
        (
            views(view(underlying="W"), view(name="W", underlying="V")),
            "views[W]",
            ["views[V] reads views[W] reads views[V]: views and conflated topics cannot"],
        ),
        (
            views(view(underlying="C")) + conflated(underlying="V"),
            "conflated_topics[C]",
            ["views[V] reads conflated_topics[C] reads views[V]"],
        ),
        (
            views(view(name="A", underlying="V2"), view(name="V2")),
            "views[0]",
            ["topic 'A' is defined twice (first at topics[0])"],
        ),
        (
            views(view(underlying="'[nvfix].[A]'")),
            "views[V].underlying",
            ["'A' has message_type json, not nvfix"],
        ),
        (views(view(underlying="'[text].[A]'")), "views[V].underlying", ["allowed: json"]),
        (views(view(underlying="[A]")), "views[V].underlying", ["quoted", "got a list"]),
        (views(view(underlying="BIN")), "views[V].underlying", ["'BIN' is a binary topic"]),
        (views(view(underlying="P")), "views[V].underlying", ["Pattern", "cannot read"]),
        (views(view(underlying="PLAIN")), "views[V].underlying", ["'PLAIN' is a plain topic"]),
        (
            views(view(underlying="", joins="['[A]./x < [B]./x']")),
            "views[V].joins[0]",
            ["relates two fields with '='"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [B]./x', '/x = [A]./x']")),
            "views[V].joins[1]",
            ["'/x' in the join names no topic"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [A]./y']")),
            "views[V].joins[0]",
            ["both sides read 'A'"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [X]./x']")),
            "views[V].joins[0]",
            ["'X', which is not defined"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [P]./x']")),
            "views[V].joins[0]",
            ["Pattern"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [BIN]./x']")),
            "views[V].joins[0]",
            ["so the join cannot read its fields"],
        ),
        (views(view(underlying="", joins="[]")), "views[V].joins", ["expected a list of joins"]),
        (
            views(
                view(name="V1"),
                view(name="V2"),
                view(name="W", underlying="", joins="['[A]./x = [B]./x', '[V1]./g = [V2]./g']"),
            ),
            "views[W].joins[1]",
            ["[V1]./g = [V2]./g: relates no topic joined by the Joins before it (A, B)"],
        ),
        (
            views(view(underlying="", joins="['[A]./x = [B]./x']", filter="'/x = 1'")),
            "views[V].filter",
            ["filter is allowed only in a view of one underlying topic, not with joins"],
        ),
        (views(view(filter="'/x = '")), "views[V].filter", ["not a valid filter"]),
        (views(view(filter="'[B]./x = 1'")), "views[V].filter", ["'B', which this view"]),
        (
            views(view(projection="[/g, 'SUM(MAX(/q)) AS /m']")),
            "views[V].projection[1]",
            ["not a valid projection field", "cannot be nested"],
        ),
        (
            views(view(projection="[/g, 'NO_SUCH(/q) AS /m']")),
            "views[V].projection[1]",
            ["NO_SUCH"],
        ),
        (
            views(view(projection="[/g, /h AS /g]")),
            "views[V].projection[1]",
            ["/g is written by two projection fields (the other is views[V].projection[0])"],
        ),
        (
            views(view(projection="['[B]./g']")),
            "views[V].projection[0]",
            ["[B]/g names 'B', which this view does not read; it reads: A"],
        ),
        (
            views(view(projection="['[nvfix].[A]./g']")),
            "views[V].projection[0]",
            ["'A' has message_type json, not nvfix"],
        ),
        (views(view(projection="[]")), "views[V].projection", ["expected a list of fields"]),
        (views(view(projection="[/g, 3]")), "views[V].projection[1]", ["quote it"]),
        (
            views(view(grouping="['SUM(/g)']")),
            "views[V].grouping[0]",
            ["not a valid grouping field"],
        ),
        (views(view(conflation="always")), "views[V].conflation", ["allowed: none, inline"]),
        (
            views(view(join_null_equivalency="enabled")),
            "views[V].join_null_equivalency",
            ["expected true", "or false"],
        ),
        (views(view(hash_indexes="[[]]")), "views[V].hash_indexes", ["at least one field"]),
        (views(view(partitions="0")), "views[V].partitions", ["positive integer"]),
        (views(view(kafka_topic="'a b'")), "views[V].kafka_topic", ["not a legal Kafka topic"]),
        (views(view(name="'a b'")), "views[a b].name", ["set kafka_topic to a legal name"]),
        (views(view(key_domain="''")), "views[V].key_domain", ["a non-empty name"]),
        (
            views(view(), view()),
            "views[1]",
            ["topic 'V' is defined twice (first at views[0])"],
        ),
        (views(view(name="A")), "views[0]", ["topic 'A' is defined twice (first at topics[0])"]),
        (conflated(underlying=""), "conflated_topics[C]", ["needs 'underlying'"]),
        (
            conflated(underlying="X"),
            "conflated_topics[C].underlying",
            ["'X', which is not defined", "SOW topics, views or conflated topics"],
        ),
        (
            conflated(underlying="'[json].[A]'"),
            "conflated_topics[C].underlying",
            ["'[json].[A]', which is not defined"],
        ),
        (
            conflated(underlying="PLAIN"),
            "conflated_topics[C].underlying",
            ["'PLAIN' is a plain topic (at topics[4])"],
        ),
        (
            conflated(message_type="nvfix"),
            "conflated_topics[C].message_type",
            ["must be the message_type of the underlying topic 'A' (json)"],
        ),
        (
            conflated(interval="50ms"),
            "conflated_topics[C].interval",
            ["interval 50ms is below the minimum, 100ms"],
        ),
        (conflated(interval="5"), "conflated_topics[C].interval", ["a unit is required"]),
        (conflated(interval="[5s]"), "conflated_topics[C].interval", ["got a list"]),
        (
            conflated(topic_format="'%n-C'"),
            "conflated_topics[C].topic_format",
            ["the underlying topic 'A' is not a Pattern topic"],
        ),
        (
            conflated(underlying="P"),
            "conflated_topics[C].underlying",
            ["topic_format (such as %n-C) is required"],
        ),
        (
            conflated(underlying="P", topic_format="C"),
            "conflated_topics[C].topic_format",
            ["must contain %n"],
        ),
        (
            conflated(underlying="P", topic_format="'%n.C'"),
            "conflated_topics[C].topic_format",
            ["contains .", "regular expressions"],
        ),
        (
            conflated(enrichment="['/x OF PREVIOUS AS /y']"),
            "conflated_topics[C].enrichment",
            ["cannot read OF PREVIOUS"],
        ),
        (conflated(enrichment="['/x']"), "conflated_topics[C].enrichment", ["not valid"]),
        (conflated(filter="'/x =='"), "conflated_topics[C].filter", ["not a valid filter"]),
        (
            conflated(underlying="BIN", filter="'/x = 1'"),
            "conflated_topics[C].filter",
            ["'BIN' is a binary topic", "so the filter cannot"],
        ),
        (
            conflated(underlying="BIN", hash_indexes="[/x]"),
            "conflated_topics[C].hash_indexes",
            ["so the hash index cannot"],
        ),
        (conflated(intervall="5s"), "conflated_topics[C].intervall", ["'interval'?"]),
        (
            conflated(name="A"),
            "conflated_topics[0]",
            ["'A' is defined twice (first at topics[0])"],
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


def test_views_and_conflated_topics_may_read_each_other_wherever_written() -> None:
    """YAML keeps views and conflated topics in two lists: one that reads another is read
    after it, so a view may read a conflated topic (as in AMPS) or a later view."""
    topology = yaml(
        """
topics:
  - {name: A, key: /id}
views:
  - {name: OVER_C, message_type: json, underlying: C, projection: [/g], grouping: [/g]}
  - {name: OVER_W, message_type: json, underlying: W, projection: [/g], grouping: [/g]}
  - {name: W, message_type: json, underlying: A, projection: [/g], grouping: [/g]}
conflated_topics:
  - {name: C, underlying: D}
  - {name: D, underlying: A}
"""
    )
    assert list(topology.views) == ["OVER_C", "W", "OVER_W"]  # each after what it reads
    assert topology.views["OVER_C"].underlying[0].name == "C"
    assert topology.conflated_topics["C"].underlying == "D"
    assert topology.topics["OVER_C"].view is not None


def test_a_long_chain_written_backwards_loads() -> None:
    """Deeper than Python's recursion limit: the reading order is found without recursion."""
    count = 1_100
    items = [
        view(name=f"V{i}", underlying=f"V{i + 1}" if i + 1 < count else "A") for i in range(count)
    ]
    topology = yaml(TOPICS + views(*items))
    assert next(iter(topology.views)) == f"V{count - 1}"
    assert topology.views["V0"].underlying[0].name == "V1"


def test_a_view_joining_a_later_view_is_read_after_it() -> None:
    topology = yaml(
        TOPICS
        + views(
            view(name="J", underlying="", joins="['[json].[A]./g = [W]./g']"),
            view(name="W", underlying="B"),
        )
    )
    assert list(topology.views) == ["W", "J"]
