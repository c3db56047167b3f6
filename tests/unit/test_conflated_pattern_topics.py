"""Conflated topics of Pattern topics (seed 002 SOW/ConflatedTopic TopicFormat) and with
Enrichment, in the topology: the names of the copies and how a command's topic name
reaches them, what the loaders accept around them, and what ``sow serve`` serves. Their
records are tested through gRPC in tests/integration/test_conflated_topics.py."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import TopologyError, UnknownTopicError
from processor.topology import refuse_unserved
from processor.topology.amps_xml import parse_amps_config
from processor.topology.model import Topology
from processor.topology.topics import (
    copied_name,
    copy_name,
    pattern_topic,
    resolve_topic,
    resolve_topics,
    topic_restriction,
)
from processor.topology.unserved import refusal, unserved
from processor.topology.yaml_loader import parse_yaml
from processor.views.conflation import derived_digest

BOOKS = """<AMPSConfig><SOW>
  <Topic><Name>BOOKS</Name><Pattern>^(orders|trades)</Pattern><Key>/id</Key></Topic>
  <Topic><Name>orders.fixed</Name><Key>/id</Key></Topic>
  <ConflatedTopic>
    <Name>BOOKS-C</Name>
    <UnderlyingTopic>BOOKS</UnderlyingTopic>
    <TopicFormat>%n-C</TopicFormat>
    <Enrichment><Field>TOPIC_NAME() AS /copy</Field></Enrichment>
  </ConflatedTopic>
  <ConflatedTopic>
    <Name>BOOKS-C-SLOW</Name>
    <UnderlyingTopic>BOOKS-C</UnderlyingTopic>
    <Interval>1m</Interval>
    <TopicFormat>slow:%n</TopicFormat>
  </ConflatedTopic>
</SOW></AMPSConfig>"""


def _books() -> Topology:
    return parse_amps_config(BOOKS, "books.xml", environ={})


@pytest.mark.parametrize(
    ("topic_format", "name", "copied"),
    [
        ("%n-C", "orders-C", "orders"),
        ("%n-C", "/my/orders-C", "/my/orders"),
        ("%n-C", "-C", None),  # the copy of no topic: names are not empty
        ("%n-C", "orders-c", None),
        ("C-%n", "orders-C", None),
        ("%n:%n", "a:a", "a"),
        ("%n:%n", "a:b", None),
        ("%n:%n", "ab:ab", "ab"),
    ],
)
def test_a_copys_name_gives_the_topic_it_copies(
    topic_format: str, name: str, copied: str | None
) -> None:
    assert copied_name(topic_format, name) == copied


@given(
    st.text(min_size=1, max_size=20),
    st.text(max_size=5),
    st.text(max_size=5),
    st.integers(min_value=1, max_value=3),
)
def test_every_copys_name_gives_back_its_topic(
    name: str, before: str, after: str, copies: int
) -> None:
    topic_format = before + "%n".join([""] * copies + [after])
    assert copied_name(topic_format, copy_name(topic_format, name)) == name


def test_a_copys_name_reaches_the_copy_restricted_to_that_topic() -> None:
    topology = _books()
    copies, slow = topology.topic("BOOKS-C"), topology.topic("BOOKS-C-SLOW")
    # ^(orders|trades) matches orders-C as well: the name is the copy's.
    assert pattern_topic(topology, "orders-C") is copies
    assert resolve_topic(topology, "orders-C") is copies
    assert topic_restriction(topology, "orders-C") == "TOPIC_NAME() = 'orders-C'"
    assert pattern_topic(topology, "slow:trades-C") is slow  # a copy of a copy
    assert pattern_topic(topology, "orders") is topology.topic("BOOKS")
    # The copy's own name reads every copy; a configured topic is its own.
    assert topic_restriction(topology, "BOOKS-C") is None
    assert resolve_topic(topology, "orders.fixed-C") is copies
    assert pattern_topic(topology, "orders.fixed") is None
    # A regular expression reads the copies it matches, like a Pattern topic's topics.
    assert [t.name for t in resolve_topics(topology, "-C$")] == ["BOOKS", "BOOKS-C", "BOOKS-C-SLOW"]
    assert topic_restriction(topology, "-C$") == "TOPIC_NAME() LIKE '-C$'"
    with pytest.raises(UnknownTopicError):
        resolve_topic(topology, "quotes-C")  # BOOKS stores no quotes


def test_xml_and_yaml_define_the_same_conflated_copy() -> None:
    yaml = parse_yaml(
        "topics:\n"
        "  - {name: BOOKS, pattern: '^(orders|trades)', key: /id}\n"
        "conflated_topics:\n"
        "  - name: BOOKS-C\n"
        "    underlying: BOOKS\n"
        "    topic_format: '%n-C'\n"
        "    enrichment: ['TOPIC_NAME() AS /copy']\n",
        "books.yaml",
    )
    xml = _books().conflated_topics["BOOKS-C"]
    same = dataclasses.replace(yaml.conflated_topics["BOOKS-C"], source=xml.source, where=xml.where)
    assert same == xml
    assert yaml.topic("BOOKS-C").enrichment == ("TOPIC_NAME() AS /copy",)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            "<ConflatedTopic><Name>X</Name><UnderlyingTopic>BOOKS-C</UnderlyingTopic>"
            "</ConflatedTopic>",
            "is a Pattern topic: <TopicFormat> (such as %n-C) is required",
        ),
        (
            "<View><Name>V</Name><UnderlyingTopic>BOOKS-C</UnderlyingTopic>"
            "<MessageType>json</MessageType><Projection><Field>COUNT(/id) AS /n</Field>"
            "</Projection><Grouping><Field>/id</Field></Grouping></View>",
            "which a view cannot read",
        ),
    ],
)
def test_a_copy_of_a_pattern_topic_is_read_like_a_pattern_topic(entry: str, problem: str) -> None:
    text = BOOKS.replace("</SOW>", entry + "</SOW>")
    with pytest.raises(TopologyError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_amps_config(text, "books.xml", environ={})


def test_sow_serve_serves_copies_of_pattern_topics_and_enrichment() -> None:
    topology = _books()
    refuse_unserved(topology)
    for entry in topology.conflated_topics.values():
        assert not unserved(entry, topology)
        assert refusal(entry, topology).startswith("served")


def test_a_changed_enrichment_or_topic_format_changes_the_definition_digest() -> None:
    topology = _books()
    copies = topology.topic("BOOKS-C")
    digest = derived_digest(copies, topology.topics)
    spec = copies.conflated
    assert spec is not None
    for changed in (
        dataclasses.replace(spec, enrichment=("TOPIC_NAME() AS /from",)),
        dataclasses.replace(spec, topic_format="%n-X"),
    ):
        other = dataclasses.replace(copies, conflated=changed)
        assert derived_digest(other, topology.topics) != digest


def test_a_conflated_topic_without_either_keeps_its_digest() -> None:
    # Such a definition was served before copies and Enrichment were: its records are
    # not rebuilt when the processor is upgraded. (The digest those processors computed.)
    topology = parse_amps_config(
        "<AMPSConfig><SOW><Topic><Name>orders</Name><Key>/id</Key></Topic><ConflatedTopic>"
        "<Name>orders-C</Name><UnderlyingTopic>orders</UnderlyingTopic>"
        "<Filter>/qty &gt; 0</Filter></ConflatedTopic></SOW></AMPSConfig>",
        "orders.xml",
        environ={},
    )
    assert derived_digest(topology.topic("orders-C"), topology.topics) == b"a1292a4d676c196d"
