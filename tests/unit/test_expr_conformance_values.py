"""The value model as the engine reads it: field extraction (``extract`` and the
specialised ``field_getter``), the string form of values, and OrderBy sort keys."""

from __future__ import annotations

import math
from typing import Any

import pytest

from processor.expr import extract, field_getter, order_key, text_of

EXTRACTIONS: list[tuple[str, Any, tuple[Any, ...], Any]] = [
    ("flat", {"a": 1}, ("a",), 1),
    ("nested", {"a": {"b": 2.5}}, ("a", "b"), 2.5),
    ("missing", {"a": {}}, ("a", "b"), None),
    ("through-scalar", {"a": 5}, ("a", "b"), None),
    ("through-string", {"a": "xyz"}, ("a", "b"), None),
    ("array-leaf", {"a": [1, [2, 3], []]}, ("a",), [1, 2, 3]),
    ("array-of-objects", {"a": [{"b": 1}, {"c": 2}, {"b": 3}]}, ("a", "b"), [1, 3]),
    ("subscript-into-objects", {"a": [{"b": 1}, {"b": 2}]}, ("a", 1, "b"), 2),
    ("negative-subscript", {"a": [1, 2]}, ("a", -1), None),
    ("scalar-subscript-0", {"a": 5}, ("a", 0), 5),
    ("scalar-subscript-1", {"a": 5}, ("a", 1), None),
    ("non-mapping-message", None, ("a",), None),
    ("list-message", [{"a": 1}], ("a",), [1]),
    ("bytes", {"a": b"\xffx"}, ("a",), "\ufffdx"),
    ("empty-bytes", {"a": b""}, ("a",), None),
    ("bool", {"a": False}, ("a",), False),
    ("object-leaf", {"a": {"b": 1}}, ("a",), None),
    ("empty-string-in-array", {"a": ["", "x"]}, ("a",), [None, "x"]),
]


@pytest.mark.parametrize(
    ("message", "steps", "expected"), [pytest.param(m, s, e, id=i) for i, m, s, e in EXTRACTIONS]
)
def test_extract_and_field_getter(message: Any, steps: tuple[Any, ...], expected: Any) -> None:
    assert extract(message, steps) == expected
    assert field_getter(steps)(message) == expected


def test_text_of() -> None:
    assert text_of(None) is None
    assert text_of(12) == "12"
    assert text_of(1.5) == "1.5"
    assert text_of(100.0) == "100.0"
    assert text_of(True) == "true"
    assert text_of([3, 4]) == "3"
    assert text_of("x") == "x"


def test_order_key_mixed_sort() -> None:
    values = [3, "b", 1.5, "a", None, "2", math.nan, True, [0.5, 9]]
    ordered = sorted(values, key=order_key)
    assert ordered[:6] == [[0.5, 9], True, 1.5, "2", 3, "a"]
    assert ordered[6] == "b"
    assert all(v is None or (isinstance(v, float) and math.isnan(v)) for v in ordered[7:])


def test_order_key_numeric_strings_sort_as_numbers() -> None:
    assert sorted(["10", "9", "100"], key=order_key) == ["9", "10", "100"]
    assert sorted(["10", "9", "100"], key=lambda v: order_key(v, True)) == ["10", "100", "9"]


def test_order_key_nulls_last_ascending_first_descending() -> None:
    values = [2, None, 1]
    assert sorted(values, key=order_key) == [1, 2, None]
    assert sorted(values, key=order_key, reverse=True) == [None, 2, 1]
    assert sorted(["b", None, "a"], key=lambda v: order_key(v, True)) == ["a", "b", None]
