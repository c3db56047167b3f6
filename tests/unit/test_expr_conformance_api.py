"""Compiled expressions as a caller sees them: what matches, which errors compilation
reports (with positions), the inputs an expression reads, determinism and constant
folding, and IF evaluating one branch."""

from __future__ import annotations

from typing import Any

import pytest

from processor.errors import ExpressionError
from processor.expr import FieldInput, compile


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("/qty", {"qty": 5}, id="number-true"),
        pytest.param("/flag", {"flag": True}, id="bool-true"),
        pytest.param("/price > 990", {"price": 991.5}, id="comparison"),
        # PCRE's backreference (spec 1.4's example; backtracking engine, bounded)
        pytest.param(r"/state LIKE '(.)\1'", {"state": "Mississippi"}, id="backreference"),
        pytest.param("/a LIKE 'a(?=b)'", {"a": "xab"}, id="lookahead"),
    ],
)
def test_matches_true(text: str, message: dict[str, Any]) -> None:
    assert compile(text).matches(message) is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("/qty", {"qty": 0}, id="zero"),
        pytest.param("/s", {"s": "abc"}, id="impl33-text"),
        pytest.param("/x = 1", {}, id="null"),
        pytest.param("NAN_VALUE()", {}, id="nan"),
        pytest.param("/a AND /b", {"a": True}, id="null-and"),
        pytest.param(r"/state LIKE '(.)\1'", {"state": "Ohio"}, id="backreference-miss"),
        pytest.param("/a LIKE 'a(?=b)'", {"a": "xac"}, id="lookahead-miss"),
    ],
)
def test_matches_false(text: str, message: dict[str, Any]) -> None:
    assert compile(text).matches(message) is False


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("FOO(1)", "unknown function FOO()", id="unknown-function"),
        pytest.param("LENGHT('a')", "did you mean LENGTH", id="suggestion"),
        pytest.param("SUBSTR('a')", "SUBSTR() takes 2 to 3 arguments, got 1", id="arity"),
        pytest.param("LENGTH('a', 'b')", "LENGTH() takes 1 argument, got 2", id="arity-one"),
        pytest.param("SUM(/a) > 1", "aggregate function SUM()", id="aggregate-in-filter"),
        pytest.param("/a LIKE '(?u)a+'", "the flag 'u' is not supported", id="unknown-flag"),
        pytest.param("/a LIKE '(?C1)a'", "the callout", id="callout"),
        pytest.param(r"/a LIKE '(a)\2'", "invalid group reference", id="backreference-no-group"),
        pytest.param(
            "REGEXP_REPLACE(/a, '(*COMMIT)b', 'x')", "(*COMMIT)", id="regexp-replace-verb"
        ),
        pytest.param("/a LIKE '('", "invalid regular expression", id="invalid-regex"),
        pytest.param(
            "REGEXP_REPLACE(/a, '(', 'x')",
            "invalid regular expression",
            id="invalid-regexp-replace",
        ),
        pytest.param("CLIENT_NAME() = 'x'", "not supported here", id="unsupported"),
        pytest.param("/a OF CURRENT = 1", "enrichment", id="of-current"),
        pytest.param("[ORDERS]./a = 1", "Join", id="qualified-identifier"),
    ],
)
def test_semantic_errors(text: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile(text)
    assert fragment in str(caught.value)


def test_error_carries_position() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile("/a = 1 AND FOO(1)")
    assert caught.value.position == 11


def test_inputs_and_determinism() -> None:
    expression = compile("/b = 1 AND (/a > /b OR /a/x IS NULL) AND /b < 5")
    assert expression.inputs == (
        FieldInput("/b", ("b",)),
        FieldInput("/a", ("a",)),
        FieldInput("/a/x", ("a", "x")),
    )
    assert expression.deterministic
    assert not compile("UNIX_TIMESTAMP() > /t").deterministic
    assert compile("/a > 1").evaluate_inputs([2]) is True
    assert compile("/a = NULL AND /b = 1").inputs == (FieldInput("/b", ("b",)),)


def test_constant_folding_keeps_non_deterministic_calls() -> None:
    first = compile("UNIX_TIMESTAMP()")({})
    assert isinstance(first, float)
    assert compile("UNIX_TIMESTAMP()")({}) >= first
    assert "_f_UNIX_TIMESTAMP" in compile("UNIX_TIMESTAMP()").source


def test_if_evaluates_only_the_chosen_branch() -> None:
    # A branch that would be NULL-propagating garbage is never evaluated; the result is
    # the chosen branch (observable through the generated source's conditional).
    expression = compile("IF(/a > 0, /a, UPPER(/b))")
    assert expression({"a": 2, "b": "x"}) == 2
    assert expression({"a": -1, "b": "x"}) == "X"
    assert " if " in expression.source
