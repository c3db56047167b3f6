"""Generated code stays correct and bounded for nested arithmetic and deep expressions
(regressions: an operand evaluated only on one branch; source growing exponentially)."""

from __future__ import annotations

from typing import Any

import pytest

from processor.errors import ExpressionError
from processor.expr import FieldInput, compile, extract
from processor.expr.compiler import Compiler
from processor.expr.expression import Expression, compile_node
from processor.expr.parser import parse


def reference(text: str) -> Expression:
    return Expression(text, parse(text), Compiler(text, fast=False))


MESSAGES: list[dict[str, Any]] = [
    {},
    {"a": 1, "b": 1},
    {"a": 1, "b": 0},
    {"a": 0, "b": 0},
    {"a": 1.5, "b": 2},
    {"a": "3", "b": True},
    {"a": None, "b": 2.5, "c": 1},
    {"a": [1, 2], "b": "x"},
]


@pytest.mark.parametrize(
    "text",
    [
        "(/a > 0) + (/b > 0) >= 1",
        "(/a IS NULL) * (/c IS NULL)",
        "/a * 2 + /b * 3",
        "(/a + /b) * (/b - /a) > 0",
        "-(/a * /b) + /c",
        "(/a * /b) / (/b + 1) % 2",
    ],
)
def test_nested_arithmetic_equals_the_reference(text: str) -> None:
    fast, slow = compile(text), reference(text)
    keys = list(range(len(MESSAGES)))
    for message in MESSAGES:
        assert repr(fast(message)) == repr(slow(message)), message
        assert fast.matches(message) == slow.matches(message), message
    columns = []
    for item in fast.inputs:
        assert isinstance(item, FieldInput)
        columns.append({k: extract(MESSAGES[k], item.steps) for k in keys})
    expected = [k for k in keys if slow.matches(MESSAGES[k])]
    assert fast.scan(keys, columns) == expected
    assert fast.scan(keys, columns, aligned=True) == expected


def test_long_sums_generate_source_linear_in_their_length() -> None:
    sizes = []
    for terms in (10, 20, 40):
        expression = compile(" + ".join(f"/f{i}" for i in range(terms)) + " > 0")
        assert expression.matches({f"f{i}": 1.5 for i in range(terms)})
        sizes.append(len(expression.source))
    assert sizes[2] < 5 * sizes[0]


def test_too_deep_for_the_fast_form_falls_back_to_the_helper_form() -> None:
    text = "/a" + " + 1" * 120 + " > 0"
    expression = compile_node(parse(text), text)
    assert expression.matches({"a": 1})
    assert expression({"a": -200}) is False


def test_the_deepest_expressions_the_parser_accepts_evaluate() -> None:
    text = "/a" + " + 1" * 198 + " > 0"
    expression = compile(text)
    assert expression.matches({"a": 1})
    assert expression.scan(["k"], [{"k": -500}]) == []
    with pytest.raises(ExpressionError):
        compile("/a" + " + 1" * 400 + " > 0")
