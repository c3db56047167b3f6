"""A view's digest (processor/views/definition.py) covers what its records depend on: a
view reading a conflated topic is rebuilt when that conflated topic is redefined (its
reset removes the copies without telling the view), and a view reading the plain topic
keeps its digest."""

from __future__ import annotations

from processor.views.definition import digest_of
from tests.unit.test_amps_entries import config, parse

VIEW = """<View><Name>{name}</Name><MessageType>json</MessageType>
  <UnderlyingTopic>{reads}</UnderlyingTopic>
  <Projection><Field>/g</Field><Field>COUNT(/id) AS /n</Field></Projection>
  <Grouping><Field>/g</Field></Grouping></View>"""


def digests(conflated_filter: str) -> dict[str, bytes]:
    body = (
        "<Topic><Name>A</Name><MessageType>json</MessageType><Key>/id</Key></Topic>"
        "<ConflatedTopic><Name>C</Name><UnderlyingTopic>A</UnderlyingTopic>"
        f"<MessageType>json</MessageType><Interval>1s</Interval>"
        f"<Filter>{conflated_filter}</Filter></ConflatedTopic>"
        + VIEW.format(name="OVER_C", reads="C")
        + VIEW.format(name="OVER_A", reads="A")
    )
    topology = parse(config(body))
    return {name: digest_of(view, topology.topics) for name, view in topology.views.items()}


def test_a_view_of_a_conflated_topic_changes_digest_with_it_and_no_other_view_does() -> None:
    before, after = digests("/x = 1"), digests("/x = 2")
    assert before["OVER_C"] != after["OVER_C"]
    assert before["OVER_A"] == after["OVER_A"]
