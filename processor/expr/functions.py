"""The registry of AMPS scalar built-in functions (spec section 2), and the generic ones.

Names are case-insensitive (the parser upper-cases them). Every function is called
through :attr:`FunctionSpec.call`, which applies the rules common to all built-ins:

* not array-aware: an array argument contributes its first element (spec 2), except for
  the array reducers (ARRAY_COUNT, ARRAY_MAX, ARRAY_MIN, ARRAY_SUM, ARRAY_TO_STRING);
* a NULL required argument makes the result NULL (the functions that document another
  rule, such as CONCAT and COALESCE, say so with ``nullable_from``);
* a result of ``''`` is NULL, and an error inside the function is NULL: evaluation never
  raises.

IF, COALESCE's laziness and the message-context functions (SOW_KEY(), TOPIC_NAME(), ...)
are compiled specially; they are registered here so arity checks and error messages
treat them like every other function.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from processor.expr import functions_numeric, functions_string, functions_time
from processor.expr.ast import Value
from processor.expr.inputs import CONTEXT_ATTRIBUTES
from processor.expr.values import NAN, amps_less, first, isnan, num, text_of, truth


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One built-in function: its arity, how NULL arguments behave, and its caller.

    ``max_args`` None means any number. ``nullable_from``: arguments from this index on
    may be NULL without making the result NULL. ``context``: for message-context
    functions, the :class:`~processor.expr.ContextInput` name the value comes from."""

    name: str
    impl: Callable[..., Value]
    min_args: int
    max_args: int | None
    nullable_from: int
    array_aware: bool = False
    deterministic: bool = True
    context: str | None = None

    @property
    def call(self) -> Callable[..., Value]:
        """The function as compiled code calls it (see the module docstring)."""
        return _CALLERS[self.name]

    def arity(self) -> str:
        """The accepted argument count, for error messages."""
        if self.max_args is None:
            return f"at least {self.min_args}"
        if self.max_args == self.min_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


def _caller(spec: FunctionSpec) -> Callable[..., Value]:
    impl = spec.impl
    required = spec.nullable_from
    array_aware = spec.array_aware

    def call(*args: Value) -> Value:
        if not array_aware:
            args = tuple(first(a) if a.__class__ is list else a for a in args)
        for argument in args[:required]:
            if argument is None:
                return None
        try:
            result = impl(*args)
        except Exception:
            # AMPS answers NULL when a function cannot compute a value; a query must not
            # fail because one record holds an unusable value.
            return None
        if result.__class__ is str and not result:
            return None
        return result

    return call


# --- generic functions (spec 2.6) ------------------------------------------------------------


def coalesce(*values: Value) -> Value:
    """COALESCE(v1, ...): the first non-NULL argument (first element of an array)."""
    for value in values:
        if value is not None:
            return value
    return None


def true_value() -> Value:
    """TRUE_VALUE()."""
    return True


def false_value() -> Value:
    """FALSE_VALUE()."""
    return False


def nan_value() -> Value:
    """NAN_VALUE()."""
    return NAN


def if_(condition: Value, when_true: Value, when_false: Value) -> Value:
    """IF(c, a, b) for callers that already evaluated every argument (the compiler
    evaluates only the chosen branch)."""
    return when_true if truth(condition) is True else when_false


# --- array reduce functions (spec 2.5) ---------------------------------------------------------


def _elements(value: Value) -> list[Value]:
    """An array's elements; a scalar is a one-element array."""
    return value if value.__class__ is list else [value]


def array_count(value: Value) -> Value:
    """ARRAY_COUNT(arr): the number of elements, NULL elements included."""
    return len(_elements(value))


def _array_extreme(greater: bool) -> Callable[[Value], Value]:
    def extreme(value: Value) -> Value:
        best: Value = None
        for item in _elements(value):
            if item is None or (item.__class__ is float and isnan(item)):
                continue
            if best is None or (amps_less(best, item) if greater else amps_less(item, best)):
                best = item
        return best

    return extreme


def array_sum(value: Value) -> Value:
    """ARRAY_SUM(arr): the sum of the elements, NULL elements ignored; NaN if one is not
    numeric; integers stay integers."""
    total: int | float = 0
    seen = False
    for item in _elements(value):
        if item is None:
            continue
        number = num(item)
        if number is None:
            continue
        total = total + number
        seen = True
    return total if seen else None


def array_to_string(value: Value, delimiter: Value = None, null_text: Value = None) -> Value:
    """ARRAY_TO_STRING(arr, delimiter[, null_replacement]): the elements' string forms
    joined by the delimiter (NULL delimiter: none); NULL elements become
    ``null_replacement``, or are left out without one."""
    joiner = text_of(delimiter) or ""
    replacement = text_of(null_text)
    parts: list[str] = []
    for item in _elements(value):
        rendered = text_of(item)
        if rendered is None:
            rendered = replacement
        if rendered is not None:
            parts.append(rendered)
    return joiner.join(parts)


def _context_placeholder() -> Value:
    """Message-context functions are compiled to inputs; calling one directly is NULL."""
    return None


#: AMPS functions that need a server, client or queue this service does not have.
UNSUPPORTED: dict[str, str] = {
    name: "it needs " + why
    for names, why in (
        (("LAST_READ", "LAST_LEASED", "LEASE_COUNT"), "the AMPS SOW read/lease bookkeeping"),
        (("CLIENT_NAME", "USER", "REMOTE_ADDRESS", "CLIENT_VERSION"), "a client connection"),
        (("AMPS_INSTANCE_NAME", "AMPS_GROUP_NAME"), "an AMPS instance"),
        (("VALUE_LOOKUP",), "the experimental AMPS lookup module"),
        (("TIMEZONEOFFSET", "DATE", "TODAY"), "the server's local time zone (use the UTC forms)"),
    )
    for name in names
}

_GENERIC: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "COALESCE": (coalesce, 1, None),
    "TRUE_VALUE": (true_value, 0, 0),
    "FALSE_VALUE": (false_value, 0, 0),
    "NAN_VALUE": (nan_value, 0, 0),
    "IF": (if_, 3, 3),
    "ARRAY_COUNT": (array_count, 1, 1),
    "ARRAY_MAX": (_array_extreme(greater=True), 1, 1),
    "ARRAY_MIN": (_array_extreme(greater=False), 1, 1),
    "ARRAY_SUM": (array_sum, 1, 1),
    "ARRAY_TO_STRING": (array_to_string, 1, 3),
}
_ARRAY_AWARE = frozenset({"ARRAY_COUNT", "ARRAY_MAX", "ARRAY_MIN", "ARRAY_SUM", "ARRAY_TO_STRING"})
_NULLABLE_FROM: dict[str, int] = {
    "COALESCE": 0,
    "IF": 0,
    "ARRAY_TO_STRING": 1,
    **functions_string.NULLABLE_FROM,
    **functions_numeric.NULLABLE_FROM,
}


def _build() -> dict[str, FunctionSpec]:
    table: dict[str, FunctionSpec] = {}
    sources = (
        _GENERIC,
        functions_string.FUNCTIONS,
        functions_numeric.FUNCTIONS,
        functions_time.FUNCTIONS,
    )
    for source in sources:
        for name, (impl, low, high) in source.items():
            table[name] = FunctionSpec(
                name=name,
                impl=impl,
                min_args=low,
                max_args=high,
                nullable_from=_NULLABLE_FROM.get(name, low),
                array_aware=name in _ARRAY_AWARE,
                deterministic=name not in functions_time.NON_DETERMINISTIC,
            )
    for name, attribute in CONTEXT_ATTRIBUTES.items():
        table[name] = FunctionSpec(name, _context_placeholder, 0, 0, 0, context=attribute)
    return table


FUNCTIONS: dict[str, FunctionSpec] = _build()
_CALLERS: dict[str, Callable[..., Value]] = {name: _caller(s) for name, s in FUNCTIONS.items()}


def lookup(name: str) -> FunctionSpec | None:
    """The built-in function of that name (any case), or None."""
    return FUNCTIONS.get(name.upper())


def suggestions(name: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Known function names close to ``name`` (for "unknown function" messages)."""
    return difflib.get_close_matches(name.upper(), [*FUNCTIONS, *extra], n=3, cutoff=0.6)
