"""The inline fast paths against the reference form (general helpers only), on random
expressions and random messages: the same value, the same match, and every scan strategy
(per key, driven, aligned) returns the keys the reference matches; compiling raises
nothing but ExpressionError and evaluating raises nothing.

Two generators: filters whose operands are flat (a field, a literal, ``field op
field|literal``) over flat messages, and nested expressions, built as text and fully
parenthesised so that every one parses, whose operands are arbitrary sub-expressions
(predicates used as numbers, arithmetic inside comparisons, function results inside
arithmetic) over messages with nested objects and arrays: where generated code that
evaluates an operand on one branch only, or twice, shows.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from processor.errors import ExpressionError
from processor.expr import Expression, FieldInput, compile, extract, scan
from tests.unit.expr_helpers import identical, reference

# -- filters of flat operands over flat messages -------------------------------------------

_FLAT_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.5, -1.5, 2.0, math.nan, math.inf, 1e300, 10**30]),
    st.sampled_from(["a", "b", "ab", "", "2", "2.0", "-1", "x y", "é", "MSFT"]),
)
_FLAT_VALUES = st.one_of(_FLAT_SCALARS, st.lists(_FLAT_SCALARS, max_size=3))
_FLAT_MESSAGES = st.dictionaries(st.sampled_from(["a", "b", "c"]), _FLAT_VALUES, max_size=3)
_FLAT_FIELDS = st.sampled_from(["/a", "/b", "/c", "/a[0]"])
_FLAT_LITERALS = st.sampled_from(
    ["1", "2", "-1", "0.5", "2.0", "'a'", "'2'", "'2.0'", "''", "NULL", "'ab'", "TRUE", "1e300"]
)
_FLAT_OPERANDS = st.one_of(
    _FLAT_FIELDS,
    _FLAT_LITERALS,
    st.builds(
        lambda a, op, b: f"({a} {op} {b})",
        _FLAT_FIELDS,
        st.sampled_from(["+", "-", "*", "/", "%"]),
        st.one_of(_FLAT_FIELDS, _FLAT_LITERALS),
    ),
)


def _flat_predicates() -> st.SearchStrategy[str]:
    comparison = st.builds(
        lambda a, op, b: f"{a} {op} {b}",
        _FLAT_OPERANDS,
        st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
        _FLAT_OPERANDS,
    )
    membership = st.builds(
        lambda a, n, items: f"{a} {n}IN ({', '.join(items)})",
        _FLAT_OPERANDS,
        st.sampled_from(["", "NOT "]),
        st.lists(st.one_of(_FLAT_LITERALS, _FLAT_LITERALS, _FLAT_FIELDS), min_size=1, max_size=4),
    )
    between = st.builds(
        lambda a, lo, hi: f"{a} BETWEEN {lo} AND {hi}",
        _FLAT_OPERANDS,
        _FLAT_LITERALS,
        _FLAT_LITERALS,
    )
    like = st.builds(
        lambda a, p: f"{a} LIKE {p}",
        _FLAT_FIELDS,
        st.sampled_from(["'a'", "'^a'", "'(?i)A'", "r'a.'", "'2$'", "'.'"]),
    )
    affix = st.builds(
        lambda a, k, items: f"{a} {k} WITH ({', '.join(items)})",
        _FLAT_FIELDS,
        st.sampled_from(["BEGINS", "ENDS", "NOT BEGINS"]),
        st.lists(_FLAT_LITERALS, min_size=1, max_size=2),
    )
    nulls = st.builds(
        lambda a, t: f"{a} {t}",
        _FLAT_OPERANDS,
        st.sampled_from(["IS NULL", "IS NOT NULL", "IS NAN"]),
    )
    bare = st.one_of(_FLAT_FIELDS, st.builds(lambda f: f"COALESCE({f}, 0)", _FLAT_FIELDS))
    return st.one_of(comparison, membership, between, like, affix, nulls, bare)


_FLAT_FILTERS = st.recursive(
    _flat_predicates(),
    lambda inner: st.one_of(
        st.builds(
            lambda a, op, b: f"({a}) {op} ({b})", inner, st.sampled_from(["AND", "OR"]), inner
        ),
        st.builds(lambda a: f"NOT ({a})", inner),
        st.builds(lambda c, a, b: f"IF({c}, {a}, {b})", inner, inner, inner),
    ),
    max_leaves=4,
)


@settings(max_examples=1500, deadline=None, database=None)
@given(text=_FLAT_FILTERS, messages=st.lists(_FLAT_MESSAGES, min_size=1, max_size=12))
def test_scan_equals_reference_matches(text: str, messages: list[dict[str, Any]]) -> None:
    fast = compile(text)
    slow = reference(text)
    keys = list(range(len(messages)))
    expected = [k for k in keys if slow.matches(messages[k])]
    for k in keys:
        value = fast(messages[k])
        wanted = slow(messages[k])
        assert identical(value, wanted), (k, value, wanted)
        assert fast.matches(messages[k]) == (k in expected)
    columns: list[dict[int, Any]] = [{} for _ in fast.inputs]
    for k, message in zip(keys, messages, strict=True):
        for i, item in enumerate(fast.inputs):
            assert isinstance(item, FieldInput)
            value = extract(message, item.steps)
            if value is not None:
                columns[i][k] = value
    assert fast.scan(keys, columns) == expected
    assert fast._scan(keys, columns) == expected
    aligned = [{k: column.get(k) for k in keys} for column in columns]
    assert fast.scan(keys, aligned, aligned=True) == expected
    for driver in fast._drivers:
        assert scan.driven(driver, keys, columns) == expected
    # keys narrowed to a subset, in another order
    subset = keys[::-2]
    assert fast.scan(subset, columns) == [k for k in subset if k in expected]


# -- nested expressions over nested messages: the messages ---------------------------------

_NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**62, -(2**62), 2**63, 2**64 + 1, 10**30, -(10**400)]),
    st.sampled_from([0.0, -0.0, 0.5, -2.5, 2.0, 1e300, -1e300, 5e-324]),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
_TEXTS = st.sampled_from(["", "0", "02", "2", "2.0", "-1", "1e3", " 1", "abc", "a", "é", "nan"])
_SCALARS = st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXTS, st.sampled_from([b"2", b""]))
_OBJECTS = st.dictionaries(
    st.sampled_from(["x", "y"]), st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2)), max_size=2
)
_ARRAYS = st.lists(st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2), _OBJECTS), max_size=3)
_VALUES = st.one_of(_SCALARS, _SCALARS, _ARRAYS, _OBJECTS)
_MESSAGES = st.dictionaries(st.sampled_from(["a", "b", "c", "o", "arr"]), _VALUES, max_size=5)

# -- nested expressions over nested messages: the expressions ------------------------------

_FIELDS = st.sampled_from(
    ["/a", "/b", "/c", "/a[0]", "/b[1]", "/o/x", "/o/y[0]", "/arr", "/arr/x", "/arr[1]"]
)
_BEYOND_FLOAT = "1" + "0" * 400  # an integer literal no float can hold
_LITERALS = st.sampled_from(
    [
        "0", "1", "-1", "2", "7", "4611686018427387904", "-4611686018427387904",
        "18446744073709551617", "0.0", "-0.0", "0.5", "-2.5", "1e300", "1e400",
        "'02'", "'2.0'", "'2'", "'abc'", "''", "'-1'", "'é'",
        "TRUE", "FALSE", "NULL", "NAN_VALUE()", "TRUE_VALUE()", _BEYOND_FLOAT,
    ]
)  # fmt: skip
_PLACES = st.one_of(
    st.sampled_from(["-2", "-1", "0", "1", "2", "0.5", "NULL", "'1'", "'x'", "-500", "500"]),
    _LITERALS,
)
_LIKE_PATTERNS = st.sampled_from(["'a'", "'^a'", "'(?i)A'", "r'a.'", "'2$'", "'.'", "'^$'", "'('"])
_COMPARISONS = st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "==", "<>"])
_ARITHMETIC = st.sampled_from(["+", "-", "*", "/", "%", "MOD"])
_NOT = st.sampled_from(["", "NOT "])


def _joined(items: list[str]) -> str:
    return ", ".join(items)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One operator, function or predicate over arbitrary sub-expressions."""
    some = st.lists(inner, min_size=1, max_size=3)
    bound = st.one_of(_LITERALS, inner)
    arithmetic = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, _ARITHMETIC, inner)
    comparison = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, _COMPARISONS, inner)
    between = st.builds(
        lambda a, n, lo, hi: f"({a} {n}BETWEEN {lo} AND {hi})", inner, _NOT, bound, bound
    )
    membership = st.builds(
        lambda a, n, items: f"({a} {n}IN ({_joined(items)}))",
        inner,
        _NOT,
        st.one_of(
            st.lists(_LITERALS, min_size=1, max_size=4),
            st.lists(st.one_of(_LITERALS, inner), min_size=1, max_size=3),
        ),
    )
    like = st.builds(lambda a, n, p: f"({a} {n}LIKE {p})", inner, _NOT, _LIKE_PATTERNS)
    affix = st.builds(
        lambda a, n, k, items: f"({a} {n}{k} WITH ({_joined(items)}))",
        inner,
        _NOT,
        st.sampled_from(["BEGINS", "ENDS"]),
        st.lists(st.one_of(_LITERALS, inner), min_size=1, max_size=2),
    )
    tests = st.builds(
        lambda a, t: f"({a} {t})",
        inner,
        st.sampled_from(["IS NULL", "IS NOT NULL", "NOT NULL", "IS NAN", "IS NOT NAN"]),
    )
    logic = st.one_of(
        st.builds(lambda a: f"(NOT {a})", inner),
        st.builds(
            lambda items, op: "(" + f" {op} ".join(items) + ")",
            st.lists(inner, min_size=2, max_size=3),
            st.sampled_from(["AND", "OR"]),
        ),
    )
    functions = st.one_of(
        st.builds(lambda c, a, b: f"IF({c}, {a}, {b})", inner, inner, inner),
        st.builds(lambda items: f"COALESCE({_joined(items)})", some),
        st.builds(lambda items: f"GREATEST({_joined(items)})", some),
        st.builds(lambda items: f"CONCAT({_joined(items)})", some),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["ABS", "LENGTH", "UPPER"]), inner),
        st.builds(lambda a: f"ROUND({a})", inner),
        st.builds(lambda a, p: f"ROUND({a}, {p})", inner, _PLACES),
        st.builds(lambda a, s: f"SUBSTR({a}, {s})", inner, inner),
        st.builds(lambda a, s, n: f"SUBSTR({a}, {s}, {n})", inner, inner, inner),
    )
    return st.one_of(
        arithmetic,
        arithmetic,
        st.builds(lambda a: f"(- {a})", inner),
        comparison,
        between,
        membership,
        like,
        affix,
        tests,
        logic,
        functions,
    )


EXPRESSIONS = st.recursive(st.one_of(_FIELDS, _FIELDS, _LITERALS), _extend, max_leaves=8)
#: Top-level AND chains too: their single-input conjuncts drive scans.
FILTERS = st.one_of(EXPRESSIONS, st.lists(EXPRESSIONS, min_size=2, max_size=3).map(" AND ".join))


#: Messages for the shapes of past bugs, run as explicit examples.
_PAST: list[dict[str, Any]] = [
    {},
    {"a": 1, "b": 1},
    {"a": 1, "b": 0, "c": "2"},
    {"a": 0.0, "b": -0.0, "c": None},
    {"a": "3", "b": True, "c": [1, 2]},
    {"a": math.nan, "b": 2**62, "c": 1},
]


def _columns(expression: Expression, messages: list[dict[str, Any]]) -> list[dict[int, Any]]:
    """Memo columns over ``messages`` (keys are positions), NULLs absent."""
    columns: list[dict[int, Any]] = []
    for item in expression.inputs:
        assert isinstance(item, FieldInput)
        column = {}
        for k, message in enumerate(messages):
            value = extract(message, item.steps)
            if value is not None:
                column[k] = value
        columns.append(column)
    return columns


@settings(
    max_examples=1500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(text=FILTERS, messages=st.lists(_MESSAGES, min_size=1, max_size=8))
@example(text="(/a > 0) + (/b > 0) >= 1", messages=_PAST)
@example(text="(/a IS NULL) * (/c IS NULL)", messages=_PAST)
@example(text="/a * 2 + /b * 3", messages=_PAST)
@example(text="-(/a < /b) * (/b BETWEEN 1 AND 2) - (/c IN (1, '2'))", messages=_PAST)
@example(text="ABS(/a - /b) % (LENGTH(/c) + (/a = /b))", messages=_PAST)
@example(text="IF(/a > /b, /a, /b) / COALESCE(/c, 1) > (/a LIKE '2')", messages=_PAST)
def test_random_expressions_agree_with_the_reference(
    text: str, messages: list[dict[str, Any]]
) -> None:
    try:
        fast = compile(text)
    except ExpressionError:
        with pytest.raises(ExpressionError):
            reference(text)
        return
    slow = reference(text)
    keys = list(range(len(messages)))
    expected = [k for k in keys if slow.matches(messages[k])]
    columns = _columns(fast, messages)
    for k, message in enumerate(messages):
        value = fast(message)
        wanted = slow(message)
        assert repr(value) == repr(wanted), (text, message)
        inputs = [column.get(k) for column in columns]
        assert repr(fast.evaluate_inputs(inputs)) == repr(wanted), (text, message)
        assert fast.matches(message) is (k in expected), (text, message)
    assert fast.scan(keys, columns) == expected
    assert fast._scan(keys, columns) == expected
    for driver in fast._drivers:
        assert scan.driven(driver, keys, columns) == expected
    aligned = [{k: column.get(k) for k in keys} for column in columns]
    assert fast.scan(keys, aligned, aligned=True) == expected
    assert fast.scan(keys, aligned) == expected  # a column may also hold NULL as None
    subset = keys[::-2]
    assert fast.scan(subset, columns) == [k for k in subset if k in expected]


# -- regressions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(f"/a * {_BEYOND_FLOAT}", id="times"),
        pytest.param(f"{_BEYOND_FLOAT} - /a", id="minus"),
        pytest.param(f"(/a + {_BEYOND_FLOAT}) IS NAN", id="is-nan-filter"),
    ],
)
def test_float_input_with_an_integer_constant_beyond_float_range(text: str) -> None:
    message = {"a": 1.5}
    assert repr(compile(text)(message)) == repr(reference(text)(message))
    assert compile(text).matches(message) == reference(text).matches(message)
    keys, columns = ["k"], [{"k": 1.5}]
    expected = ["k"] if reference(text).matches(message) else []
    assert compile(text).scan(keys, columns) == expected


def test_round_to_a_huge_negative_number_of_places_terminates() -> None:
    # In a child process: a regression would hold the GIL and could not be interrupted.
    program = (
        "from processor.expr import evaluate\n"
        "assert evaluate('ROUND(/a, -4611686018427387904)', {'a': 5}) == 0\n"
        "assert evaluate('ROUND(1.5, -1e300)', {}) == 0.0\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=10)
