"""The AMPS operators over values: comparison, predicates, arithmetic, logic, LIKE.

These are the general (slow-path) implementations the compiled code falls back to when a
value is not of the class its inline fast path expects; the fast paths must agree with
them exactly. All are total: they never raise for any value.

Comparisons and predicates return ``bool`` (a NULL operand makes them FALSE, never NULL:
spec section 9 item 1) and are existential over arrays (spec 1.14). Arithmetic returns a
number, NaN or NULL (spec 1.9).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from processor.expr.ast import Value
from processor.expr.regex import compile_regex
from processor.expr.values import NAN, compare, isnan, num, text_of, to_number

# --- comparison ------------------------------------------------------------------------


def eq(left: Value, right: Value) -> bool:
    """AMPS ``=``."""
    return compare(left, right, operator.eq)


def ne(left: Value, right: Value) -> bool:
    """AMPS ``!=``: existential too (TRUE if some element differs)."""
    return compare(left, right, operator.ne)


def lt(left: Value, right: Value) -> bool:
    """AMPS ``<``."""
    return compare(left, right, operator.lt)


def le(left: Value, right: Value) -> bool:
    """AMPS ``<=``."""
    return compare(left, right, operator.le)


def gt(left: Value, right: Value) -> bool:
    """AMPS ``>``."""
    return compare(left, right, operator.gt)


def ge(left: Value, right: Value) -> bool:
    """AMPS ``>=``."""
    return compare(left, right, operator.ge)


def between(value: Value, low: Value, high: Value) -> bool:
    """``value BETWEEN low AND high`` (inclusive), existential: some element of an array
    operand lies within the bounds."""
    if value.__class__ is list:
        return any(between(item, low, high) for item in value)
    return compare(value, low, operator.ge) and compare(value, high, operator.le)


def in_list(value: Value, items: tuple[Value, ...]) -> bool:
    """``value IN (items)``: an OR of ``=`` (NULL entries never match)."""
    return any(compare(value, item, operator.eq) for item in items)


def in_literals(
    value: Value, strings: frozenset[str], numbers: frozenset[int | float], items: tuple[Value, ...]
) -> bool:
    """``value IN (literal, ...)`` with the literal list pre-split: ``strings`` are the
    string items, ``numbers`` the numeric items, ``items`` all of them."""
    cls = value.__class__
    if cls is str:
        if value in strings:
            return True
        if not numbers:
            return False
        number = to_number(value)
        return number is not None and number in numbers
    if (cls is int or cls is float) and value in numbers:
        return True
    if value is None:
        return False
    return in_list(value, items)


def _affix(value: Value, affixes: tuple[Value, ...], test: Callable[[str, Any], bool]) -> bool:
    if value.__class__ is list:
        return any(_affix(item, affixes, test) for item in value)
    text = text_of(value)
    if text is None:
        return False
    for affix in affixes:
        if affix.__class__ is list:
            if _affix(value, tuple(affix), test):
                return True
            continue
        rendered = text_of(affix)
        if rendered is not None and test(text, rendered):
            return True
    return False


def begins_with(value: Value, prefixes: tuple[Value, ...]) -> bool:
    """``value BEGINS WITH (prefix, ...)``: case-sensitive literal prefix of the value's
    string form; existential over arrays."""
    return _affix(value, prefixes, str.startswith)


def ends_with(value: Value, suffixes: tuple[Value, ...]) -> bool:
    """``value ENDS WITH (suffix, ...)``."""
    return _affix(value, suffixes, str.endswith)


def is_nan(value: Value) -> bool:
    """``value IS NAN`` (scalar: an array is tested by its first element)."""
    if value.__class__ is list:
        value = value[0] if value else None
    return value.__class__ is float and isnan(value)


# --- logic (spec 1.6 tables, applied left to right) ----------------------------------------


def not_(value: bool | None) -> bool | None:
    """``NOT``: NULL stays NULL."""
    return None if value is None else not value


# --- arithmetic ----------------------------------------------------------------------------


def _operands(left: Value, right: Value) -> tuple[Any, Any] | None:
    a = num(left)
    if a is None:
        return None
    b = num(right)
    if b is None:
        return None
    return a, b


def add(left: Value, right: Value) -> Value:
    """``+``: NULL if either side is NULL, NaN propagates, int+int stays int."""
    pair = _operands(left, right)
    if pair is None:
        return None
    try:
        return pair[0] + pair[1]
    except OverflowError:
        return NAN


def sub(left: Value, right: Value) -> Value:
    """``-``."""
    pair = _operands(left, right)
    if pair is None:
        return None
    try:
        return pair[0] - pair[1]
    except OverflowError:
        return NAN


def mul(left: Value, right: Value) -> Value:
    """``*``."""
    pair = _operands(left, right)
    if pair is None:
        return None
    try:
        return pair[0] * pair[1]
    except OverflowError:
        return NAN


def div(left: Value, right: Value) -> Value:
    """``/``: integer division truncates toward zero (``1 / 5`` = 0, ``-7 / 2`` = -3);
    division by zero is NaN (spec section 9 item 8)."""
    pair = _operands(left, right)
    if pair is None:
        return None
    a, b = pair
    if b == 0 or isnan(b):
        return NAN
    if a.__class__ is int and b.__class__ is int:
        quotient = abs(a) // abs(b)
        return quotient if (a < 0) == (b < 0) else -quotient
    try:
        return a / b
    except (OverflowError, ZeroDivisionError):
        return NAN


def mod(left: Value, right: Value) -> Value:
    """``%`` / ``MOD``: the remainder keeps the left operand's sign (C ``fmod``:
    ``-5 % 3`` = -2, ``5 % -3`` = 2); modulo zero is NaN."""
    pair = _operands(left, right)
    if pair is None:
        return None
    a, b = pair
    if b == 0 or isnan(b):
        return NAN
    if a.__class__ is int and b.__class__ is int:
        remainder = abs(a) % abs(b)
        return -remainder if a < 0 else remainder
    try:
        return math.fmod(a, b)
    except (OverflowError, ValueError):
        return NAN


def neg(value: Value) -> Value:
    """Unary ``-``."""
    number = num(value)
    return None if number is None else -number


def pos(value: Value) -> Value:
    """Unary ``+``: the value as a number."""
    return num(value)


ARITHMETIC: dict[str, Callable[[Value, Value], Value]] = {
    "+": add,
    "-": sub,
    "*": mul,
    "/": div,
    "%": mod,
}


# --- LIKE (spec 1.11) ------------------------------------------------------------------------

_META = frozenset("\\.^$*+?()[]{}|")


class LikePattern:
    """A compiled LIKE pattern: ``matches(text)`` is True when the PCRE-style pattern
    matches anywhere in the text (anchored at the start for ``(?A)``), in time linear in
    the text (see :mod:`processor.expr.regex`).

    ``plain`` is the pattern itself when it has no regular-expression metacharacters and
    no flags, so a substring test (``plain in text``) is equivalent."""

    __slots__ = ("matches", "plain", "source")

    def __init__(self, source: str, matches: Callable[[str], bool], plain: str | None) -> None:
        self.source = source
        self.matches = matches
        self.plain = plain

    def test(self, value: Value) -> bool:
        """``value LIKE pattern``: non-strings match by their string form; existential
        over arrays; NULL never matches."""
        if value.__class__ is list:
            return any(self.test(item) for item in value)
        text = text_of(value)
        if text is None:
            return False
        if self.plain is not None:
            return self.plain in text
        return self.matches(text)


def compile_like(pattern: str, raw: bool, *, text: str = "", position: int = -1) -> LikePattern:
    """Compile a LIKE pattern once: raw patterns (``r'...'``) match literally, others are
    PCRE (see :func:`processor.expr.regex.compile_regex`; ExpressionError for an invalid
    pattern; one that needs backtracking may raise RegexBudgetError when it is matched); a
    pattern without metacharacters or flags
    becomes a substring test."""
    if raw or not (_META & set(pattern)):
        return LikePattern(pattern, lambda subject: pattern in subject, pattern)
    regex = compile_regex(pattern, text=text, position=position)
    return LikePattern(pattern, regex.search, None)


def like(value: Value, pattern: LikePattern) -> bool:
    """``value LIKE pattern`` (see :meth:`LikePattern.test`)."""
    return pattern.test(value)
