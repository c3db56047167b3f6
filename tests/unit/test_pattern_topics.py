"""Pattern topics in the topology: loading from YAML and AMPS XML, the rules (Key fields
needed; no KeyDomain, History, Preprocessing or Enrichment), and how a command's topic
name finds the Pattern topic and the filter that keeps it to its own records."""

from __future__ import annotations

import pytest

from processor.errors import TopologyError
from processor.topology.amps_xml import parse_amps_config
from processor.topology.topics import (
    pattern_topic,
    resolve_topic,
    resolve_topics,
    restricted,
    topic_restriction,
)
from processor.topology.yaml_loader import parse_yaml as parse_topology

YAML = """
topics:
  - {name: ORDERS, pattern: '^orders\\.', key: /id}
  - {name: orders.special, key: /id}
  - {name: PLAIN, key: /id}
"""


def test_a_pattern_topic_loads_and_stores_the_topics_it_matches() -> None:
    topology = parse_topology(YAML, "t.yaml")
    family = topology.topic("ORDERS")
    assert family.pattern == "^orders\\."
    assert pattern_topic(topology, "orders.us") is family
    assert resolve_topic(topology, "orders.us") is family
    # A configured topic is its own, even when a pattern matches its name.
    assert pattern_topic(topology, "orders.special") is None
    assert resolve_topic(topology, "orders.special").name == "orders.special"
    assert pattern_topic(topology, "trades.us") is None
    xml = parse_amps_config(
        "<AMPSConfig><SOW><Topic><Name>ORDERS</Name><Pattern>^orders\\.</Pattern>"
        "<Key>/id</Key></Topic></SOW></AMPSConfig>",
        "cfg.xml",
    )
    assert xml.topic("ORDERS").pattern == "^orders\\."


def test_the_restriction_keeps_a_command_to_its_topics_records() -> None:
    topology = parse_topology(YAML, "t.yaml")
    assert topic_restriction(topology, "ORDERS") is None  # its own name reads them all
    assert topic_restriction(topology, "PLAIN") is None
    assert topic_restriction(topology, "ordersXus") is None  # no pattern stores it
    assert topic_restriction(topology, "orders.it's") == "TOPIC_NAME() LIKE 'orders.it\\'s'"
    assert topic_restriction(topology, "orders-us") is None
    assert restricted("/a = 1", "TOPIC_NAME() = 'x'") == "(/a = 1) AND TOPIC_NAME() = 'x'"
    assert restricted(" ", "TOPIC_NAME() = 'x'") == "TOPIC_NAME() = 'x'"
    names = [t.name for t in resolve_topics(topology, "^PLAIN$")]
    assert names == ["ORDERS", "PLAIN"]  # a regex reads the Pattern topics too, restricted


def test_a_literal_name_a_pattern_stores_is_restricted_by_equality() -> None:
    topology = parse_topology("topics:\n  - {name: ALL, pattern: '^o_', key: /id}\n", "t.yaml")
    assert topic_restriction(topology, "o_us") == "TOPIC_NAME() = 'o_us'"


@pytest.mark.parametrize(
    ("fields", "fragments"),
    [
        ("pattern: '^o'", ["topics[A].pattern", "needs key fields"]),
        ("pattern: '(', key: /id", ["topics[A].pattern", "not a valid regular expression"]),
        ("pattern: '^o', key: /id, key_domain: D", ["topics[A].key_domain", "cannot be set"]),
        (
            "pattern: '^o', key: /id, history: {window: 1d, granularity: 1m}",
            ["topics[A].history", "cannot have history"],
        ),
        (
            "pattern: '^o', key: /id, enrichment: ['1 AS /x']",
            ["topics[A].enrichment", "cannot have enrichment"],
        ),
    ],
)
def test_pattern_topic_rules(fields: str, fragments: list[str]) -> None:
    with pytest.raises(TopologyError) as error:
        parse_topology(f"topics:\n  - {{name: A, {fields}}}\n", "t.yaml")
    for fragment in fragments:
        assert fragment in str(error.value)
