"""The order a view joins its topics in (processor/topology/join_plan.py): the first
Join's left-hand topic is preserved and first; each later topic joins the rows of those
placed before it on every Join that relates it to them."""

from __future__ import annotations

import pytest

from processor.errors import JoinPlanError
from processor.topology.join_plan import JoinPair, JoinStep, join_plan
from processor.topology.model import JoinSpec, TopicRef


def join(left: str, left_field: str, right: str, right_field: str) -> JoinSpec:
    text = f"[{left}].{left_field} = [{right}].{right_field}"
    return JoinSpec(text, TopicRef(left), left_field, TopicRef(right), right_field)


def test_two_topics_on_two_fields_join_in_one_step() -> None:
    plan = join_plan((join("A", "/x", "B", "/x"), join("B", "/y", "A", "/z")))
    assert plan.topics == ("A", "B")
    assert plan.steps == (JoinStep(1, (JoinPair(0, "/x", "/x"), JoinPair(0, "/z", "/y"))),)


def test_a_chain_and_a_star_add_one_topic_per_step() -> None:
    chain = join_plan((join("A", "/b", "B", "/id"), join("B", "/c", "C", "/id")))
    assert chain.topics == ("A", "B", "C")
    assert chain.steps[1] == JoinStep(2, (JoinPair(1, "/c", "/id"),))
    star = join_plan((join("A", "/b", "B", "/id"), join("C", "/id", "A", "/c")))
    assert star.topics == ("A", "B", "C")
    assert star.steps[1] == JoinStep(2, (JoinPair(0, "/c", "/id"),))


def test_joins_written_in_any_order_are_placed_once_they_connect() -> None:
    plan = join_plan(
        (join("A", "/b", "B", "/id"), join("C", "/d", "D", "/id"), join("B", "/c", "C", "/id"))
    )
    assert plan.topics == ("A", "B", "C", "D")
    assert [step.pairs for step in plan.steps] == [
        (JoinPair(0, "/b", "/id"),),
        (JoinPair(1, "/c", "/id"),),
        (JoinPair(2, "/d", "/id"),),
    ]


def test_joins_that_never_connect_are_refused_naming_the_first() -> None:
    with pytest.raises(JoinPlanError, match=r"\[C\]./d = \[D\]./id: relates no topic") as caught:
        join_plan((join("A", "/b", "B", "/id"), join("C", "/d", "D", "/id")))
    assert caught.value.join == "[C]./d = [D]./id"
