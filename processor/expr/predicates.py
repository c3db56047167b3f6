"""Compilation of the AMPS predicates: BETWEEN, IN, LIKE, BEGINS/ENDS WITH, IS NULL, IS NAN.

Each returns a boolean :class:`~processor.expr.codegen.Code` (a predicate with a NULL
operand is FALSE, spec section 9 item 1) and, except for the NOT forms, is strict in its
operand's inputs. Fast paths follow the rule of :mod:`processor.expr.compiler`: one value
class inline, the general helper of :mod:`processor.expr.operators` for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from processor.expr import ast, operators
from processor.expr.codegen import BOOL, NUMERIC_CHECK, STRING_CHECK, Code, plain_number
from processor.expr.values import isnan, text_of, to_number


class Compiler(Protocol):
    """What the predicates need of :class:`processor.expr.compiler.Compiler`."""

    fast: bool
    text: str

    def emit(self, node: ast.Node) -> Code: ...

    def bind(self, code: Code) -> tuple[str, str]: ...

    def constant(self, value: Any) -> Code: ...

    def global_(self, value: Any, prefix: str = "_k") -> str: ...

    @property
    def make(self) -> Callable[..., Code]:
        """``make(src, kind, *parts, deterministic=, nulls=, strict=)``: see the compiler."""
        ...


def between(c: Compiler, node: ast.Between) -> Code:
    """``x [NOT] BETWEEN lo AND hi``."""
    operand = c.emit(node.operand)
    low = c.emit(node.low)
    high = c.emit(node.high)
    first, use = c.bind(operand)
    slow = f"_between({use}, {low.src}, {high.src})"
    if not c.fast:
        check = ""
    elif low.const and high.const and plain_number(low.value) and plain_number(high.value):
        check = NUMERIC_CHECK.format(f=first, u=use)
    elif low.const and high.const and low.value.__class__ is str is high.value.__class__:
        check = STRING_CHECK.format(f=first)
    else:
        check = ""
    if check:
        src = f"({low.src} <= {use} <= {high.src} if {check} else {slow})"
    else:
        src = f"_between({first}, {low.src}, {high.src})"
    strict = operand.nulls | low.nulls | high.nulls
    return negate(c, c.make(src, BOOL, operand, low, high, strict=strict), node.negated)


def negate(c: Compiler, code: Code, negated: bool) -> Code:
    """The NOT form of a predicate (never strict: NOT FALSE is TRUE)."""
    if not negated:
        return code
    return c.make(f"(not {code.src})", BOOL, code)


def in_(c: Compiler, node: ast.In) -> Code:
    """``x [NOT] IN (items)``; an all-literal list becomes set membership."""
    operand = c.emit(node.operand)
    items = [c.emit(item) for item in node.items]
    if not c.fast or not all(item.const for item in items):
        src = f"_in({operand.src}, ({''.join(item.src + ', ' for item in items)}))"
        code = c.make(src, BOOL, operand, *items, strict=operand.nulls)
        return negate(c, code, node.negated)
    values = tuple(
        int(v) if v.__class__ is bool else v
        for v in (item.value for item in items)
        if v is not None and not (v.__class__ is float and isnan(v))
    )
    strings = frozenset(v for v in values if v.__class__ is str)
    numbers = frozenset(v for v in values if v.__class__ is int or v.__class__ is float)
    if not values:
        return negate(c, c.constant(False), node.negated)
    string_set, number_set = c.global_(strings), c.global_(numbers)
    names = ", ".join((string_set, number_set, c.global_(values)))
    first, use = c.bind(operand)
    cases: list[tuple[str, str]] = []
    if not numbers:
        cases.append((STRING_CHECK, f"{use} in {string_set}"))
    elif not any(to_number(s) is not None for s in strings):
        cases.append((NUMERIC_CHECK, f"{use} in {number_set}"))
    src = select(first, use, cases, lambda x: f"_in_lit({x}, {names})")
    return negate(c, c.make(src, BOOL, operand, *items, strict=operand.nulls), node.negated)


def select(first: str, use: str, cases: list[tuple[str, str]], slow: Callable[[str], str]) -> str:
    """``(fast1 if check1 else (... else slow))``: per value class, an inline fast
    path, else the general helper. The operand is bound (``first``) in the check
    evaluated first; checks are templates over ``{f}`` (first use) and ``{u}``."""
    if not cases:
        return slow(first)
    src = slow(use)
    for position, (check, fast) in enumerate(reversed(cases)):
        outermost = position == len(cases) - 1
        src = f"({fast} if {check.format(f=first if outermost else use, u=use)} else {src})"
    return src


def like(c: Compiler, node: ast.Like) -> Code:
    """``x [NOT] LIKE pattern``, the pattern compiled once."""
    operand = c.emit(node.operand)
    pattern = operators.compile_like(node.pattern, node.raw, text=c.text, position=node.pos)
    name = c.global_(pattern)
    if not c.fast:
        code = c.make(f"{name}.test({operand.src})", BOOL, operand, strict=operand.nulls)
        return negate(c, code, node.negated)
    first, use = c.bind(operand)
    if pattern.plain is not None:
        fast = f"{pattern.plain!r} in {use}"
    else:
        fast = f"{c.global_(pattern.matches)}({use})"
    src = select(first, use, [(STRING_CHECK, fast)], lambda x: f"{name}.test({x})")
    return negate(c, c.make(src, BOOL, operand, strict=operand.nulls), node.negated)


def affix(c: Compiler, node: ast.Affix) -> Code:
    """``x [NOT] BEGINS WITH (...)`` / ``ENDS WITH (...)``."""
    operand = c.emit(node.operand)
    items = [c.emit(item) for item in node.items]
    helper, method = ("_begins", "startswith") if node.kind == "BEGINS" else ("_ends", "endswith")
    first, use = c.bind(operand)
    if not c.fast or not all(item.const for item in items):
        src = f"{helper}({first}, ({''.join(item.src + ', ' for item in items)}))"
        code = c.make(src, BOOL, operand, *items, strict=operand.nulls)
        return negate(c, code, node.negated)
    texts = tuple(t for t in (text_of(item.value) for item in items) if t is not None)
    if not texts:
        return negate(c, c.constant(False), node.negated)
    affixes = repr(texts)
    src = select(
        first,
        use,
        [(STRING_CHECK, f"{use}.{method}({affixes})")],
        lambda x: f"{helper}({x}, {affixes})",
    )
    return negate(c, c.make(src, BOOL, operand, strict=operand.nulls), node.negated)


def is_null(c: Compiler, node: ast.IsNull) -> Code:
    """``x IS [NOT] NULL``."""
    operand = c.emit(node.operand)
    if operand.const:
        return c.constant((operand.value is None) != node.negated)
    test = "is not" if node.negated else "is"
    strict = operand.nulls if node.negated else frozenset()
    return c.make(f"({operand.src} {test} None)", BOOL, operand, strict=strict)


def is_nan(c: Compiler, node: ast.IsNan) -> Code:
    """``x IS [NOT] NAN``."""
    operand = c.emit(node.operand)
    code = c.make(f"_is_nan({operand.src})", BOOL, operand, strict=operand.nulls)
    return negate(c, code, node.negated)
