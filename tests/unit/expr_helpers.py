"""What the expression tests share: expected-value matchers, the reference compilation
(no inline fast paths) with the check that every evaluation and scan path agrees with
it, and builders of position-free parse trees."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from processor.expr import (
    ContextInput,
    Expression,
    FieldInput,
    MessageContext,
    ast,
    compile,
    extract,
    scan,
)
from processor.expr.compiler import Compiler
from processor.expr.parser import parse

# -- expected values ----------------------------------------------------------------------


class _Nan:
    def __repr__(self) -> str:
        return "NaN"


NAN = _Nan()


class Approx:
    """A float expected within a relative tolerance."""

    def __init__(self, value: float, rel: float = 1e-9) -> None:
        self.value = value
        self.rel = rel

    def __repr__(self) -> str:
        return f"~{self.value}"


def same(actual: Any, expected: Any) -> bool:
    """Equal value and class (True is not 1, 3.0 is not 3); NaN equals NaN."""
    if expected is NAN:
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, Approx):
        return isinstance(actual, float) and actual == pytest.approx(
            expected.value, rel=expected.rel
        )
    return type(actual) is type(expected) and actual == expected


def identical(left: Any, right: Any) -> bool:
    """Two computed values are the same value (NaN is NaN, lists element by element)."""
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(identical, left, right))
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    return type(left) is type(right) and left == right


# -- the fast code against the reference --------------------------------------------------


def reference(text: str) -> Expression:
    """The same expression compiled without inline fast paths."""
    return Expression(text, parse(text), Compiler(text, fast=False))


def columns_of(
    expression: Expression, message: Any, context: MessageContext | None, key: str = "k"
) -> list[dict[str, Any]]:
    """One single-key memo column per input of ``expression`` (NULLs absent)."""
    columns: list[dict[str, Any]] = []
    for item in expression.inputs:
        if isinstance(item, FieldInput):
            value = extract(message, item.steps)
        else:
            assert isinstance(item, ContextInput)
            value = None if context is None else context.value(item.name)
        columns.append({} if value is None else {key: value})
    return columns


def agrees(text: str, message: Any, context: MessageContext | None = None) -> None:
    """The compiled expression's value, match and every scan strategy agree with the
    reference on one message."""
    fast = compile(text)
    slow = reference(text)
    value = fast(message, context)
    assert identical(value, slow(message, context))
    matched = fast.matches(message, context)
    assert matched == slow.matches(message, context)
    columns = columns_of(fast, message, context)
    expected = ["k"] if matched else []
    assert fast.scan(["k"], columns) == expected
    assert fast._scan(["k"], columns) == expected  # the per-key strategy, whatever scan chose
    aligned = [{"k": column.get("k")} for column in columns]  # every key, NULLs as None
    assert fast.scan(["k"], aligned, aligned=True) == expected
    for driver in fast._drivers:  # and every driven strategy
        assert scan.driven(driver, ["k"], columns) == expected


# -- parse trees, positions zeroed ------------------------------------------------------------


def strip(node: object) -> object:
    """``node`` with every ``pos``/``op_pos`` set to 0, recursively (tuples too)."""
    if isinstance(node, tuple):
        return tuple(strip(item) for item in node)
    if not isinstance(node, ast.Node):
        return node
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(node):
        if field.name in ("pos", "op_pos"):
            changes[field.name] = 0
        else:
            changes[field.name] = strip(getattr(node, field.name))
    return dataclasses.replace(node, **changes)


def idf(
    path: str, *steps: ast.Step, qualifiers: tuple[str, ...] = (), state: str | None = None
) -> ast.Identifier:
    """An Identifier; ``steps`` default to the names between the slashes of ``path``."""
    if not steps:
        steps = tuple(path.split("/")[1:])
    return ast.Identifier(0, path, steps, qualifiers, state)


def lit(value: object) -> ast.Literal:
    return ast.Literal(0, value)


def binary(op: str, left: ast.Node, right: ast.Node) -> ast.Binary:
    return ast.Binary(0, op, left, right, 0)


def unary(op: str, operand: ast.Node) -> ast.Unary:
    return ast.Unary(0, op, operand)  # type: ignore[arg-type]


def call(name: str, *args: ast.Node) -> ast.Call:
    return ast.Call(0, name, args)


A, B, X = idf("/a"), idf("/b"), idf("/x")
