"""Select lists (spec 1.19): parsing once, projecting messages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import InvalidRequestError
from processor.messages.select import parse_select

MESSAGE = {
    "id": 1,
    "complaint": "late",
    "details": {"a": 1, "b": 2},
    "event": {"description": "d", "when": 5},
}


def test_only_the_included_fields() -> None:
    assert parse_select("[-/,+/id,+/complaint]").project(MESSAGE) == {
        "id": 1,
        "complaint": "late",
    }


def test_everything_but_an_excluded_field() -> None:
    projected = parse_select("[+/,-/details]").project(MESSAGE)
    assert projected == {"id": 1, "complaint": "late", "event": MESSAGE["event"]}


def test_the_most_specific_directive_wins() -> None:
    projected = parse_select("[-/event,+/event/description]").project(MESSAGE)
    assert projected == {
        "id": 1,
        "complaint": "late",
        "details": {"a": 1, "b": 2},
        "event": {"description": "d"},
    }


def test_the_first_of_two_directives_for_one_field_wins() -> None:
    assert parse_select("-/,+/id,-/id").project(MESSAGE) == {"id": 1}
    assert parse_select("-/,-/id,+/id").project(MESSAGE) == {}


def test_a_missing_field_is_not_created() -> None:
    assert parse_select("[-/,+/id,+/nothere,+/event/nothere]").project(MESSAGE) == {"id": 1}


def test_a_field_no_directive_covers_is_included() -> None:
    assert parse_select("[-/details]").project({"id": 1, "details": 2}) == {"id": 1}


def test_the_message_is_not_changed() -> None:
    before = {"a": {"b": 1, "c": 2}}
    parse_select("[-/a/b]").project(before)
    assert before == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(
    ("text", "directive"),
    [
        ("[-/,id]", "id"),
        ("[+/a,,+/b]", ""),
        ("[+a]", "+a"),
        ("[+/a//b]", "+/a//b"),
        ("[+/a", "[+/a"),
    ],
)
def test_a_bad_directive_is_named(text: str, directive: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_select(text)
    message = str(caught.value)
    assert f"directive {directive!r}" in message
    assert "[-/,+/id,+/price]" in message  # says what a directive looks like


_leaf = st.one_of(st.integers(), st.text(max_size=2))
_tree = st.recursive(
    _leaf, lambda inner: st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=10
)
_messages = st.dictionaries(st.sampled_from("abc"), _tree, max_size=3)
_paths = st.lists(st.sampled_from("abc"), max_size=3).map(lambda p: "/" + "/".join(p))
_directives = st.lists(st.tuples(st.sampled_from("+-"), _paths), min_size=1, max_size=4)


def _leaves(message: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if not isinstance(message, dict) or not message:
        return {path: message}
    out: dict[tuple[str, ...], Any] = {}
    for name, value in message.items():
        out.update(_leaves(value, (*path, name)))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages, _directives)
def test_every_leaf_follows_its_most_specific_directive(
    message: dict[str, Any], directives: list[tuple[str, str]]
) -> None:
    select = parse_select(",".join(sign + path for sign, path in directives))
    projected = _leaves(select.project(message)) if message else {}
    decisions: dict[tuple[str, ...], bool] = {}
    for sign, text in directives:
        key = () if text == "/" else tuple(text[1:].split("/"))
        decisions.setdefault(key, sign == "+")
    for leaf, value in _leaves(message).items():
        if not leaf:
            continue
        decision = next(
            (decisions[leaf[:end]] for end in range(len(leaf), -1, -1) if leaf[:end] in decisions),
            True,
        )
        if decision:
            assert projected.get(leaf) == value
        else:
            assert leaf not in projected
