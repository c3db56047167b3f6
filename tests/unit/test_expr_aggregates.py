"""Aggregate functions (spec 2.7) and aggregated queries (spec 3.17).

Rows marked ``impl`` in their ids pin choices AMPS does not document (spec section 9).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from processor.errors import ExpressionError
from processor.expr import FieldInput, compile_aggregation
from processor.expr.aggregates import (
    AGGREGATES,
    Aggregate,
    AnyValue,
    Avg,
    Count,
    CountDistinct,
    GroupConcat,
    Max,
    Min,
    StddevPop,
    StddevSamp,
    Sum,
)

MIXED = [24, 20, "cat", 75, 1.3, 200, "75", "42"]  # spec 2.7: 24, 020, 'cat', 75, 1.3, ...


def fold(aggregate: Aggregate, values: list[Any]) -> Any:
    for value in values:
        aggregate.add(value)
    return aggregate.result()


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


# --- accumulators ---------------------------------------------------------------------------


def test_sum_of_integers_stays_integer() -> None:
    result = fold(Sum(), [1, 2, None, 3])
    assert result == 6
    assert type(result) is int


def test_sum_with_a_float_is_float() -> None:
    assert fold(Sum(), [1, 2.5]) == 3.5


def test_sum_converts_numeric_strings_and_booleans() -> None:
    assert fold(Sum(), ["42", 1, True]) == 44


def test_non_numeric_value_makes_numeric_aggregates_nan() -> None:
    assert is_nan(fold(Sum(), [1, "abc"]))
    assert is_nan(fold(Avg(), [1, "abc"]))
    assert is_nan(fold(StddevPop(), [1, 2, "abc"]))


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        pytest.param(Sum, None, id="impl14-sum"),
        pytest.param(Avg, None, id="impl14-avg"),
        pytest.param(Min, None, id="impl14-min"),
        pytest.param(Max, None, id="impl14-max"),
        pytest.param(StddevPop, None, id="impl14-stddev-pop"),
        pytest.param(StddevSamp, None, id="impl14-stddev-samp"),
        pytest.param(AnyValue, None, id="impl14-any"),
        pytest.param(GroupConcat, None, id="impl14-group-concat"),
        pytest.param(Count, 0, id="impl14-count"),
        pytest.param(CountDistinct, 0, id="impl14-count-distinct"),
    ],
)
def test_all_null_group(factory: Any, expected: Any) -> None:
    assert fold(factory(), [None, None]) == expected
    assert factory().result() == expected


def test_count_counts_non_null() -> None:
    assert fold(Count(), [1, None, "x", 0, [5]]) == 4


def test_avg() -> None:
    assert fold(Avg(), [1, 2, None, 4]) == pytest.approx(7 / 3)


def test_min_max_mixed_types_documented_example() -> None:
    assert fold(Min(), MIXED) == 1.3
    assert fold(Max(), MIXED) == "cat"


def test_min_max_strings_by_code_point() -> None:
    assert fold(Min(), ["b", "B", "a"]) == "B"
    assert fold(Max(), ["b", "B", "a"]) == "b"


def test_impl_min_max_skip_nan() -> None:
    assert fold(Min(), [3, math.nan, 1]) == 1


def test_impl15_count_distinct_collapses_equal_values() -> None:
    assert fold(CountDistinct(), [1, "1", 1.0, "1.0", 2, None, "a", "a"]) == 3


def test_stddev_matches_statistics_module() -> None:
    values = [150.34, 149.76, 149.32, 151.10]
    assert fold(StddevPop(), values) == pytest.approx(statistics.pstdev(values), rel=1e-9)
    assert fold(StddevSamp(), values) == pytest.approx(statistics.stdev(values), rel=1e-9)


def test_stddev_far_from_zero_is_accurate() -> None:
    values = [1e9 + x for x in (0.1, 0.2, 0.3, 0.4)]
    assert fold(StddevPop(), values) == pytest.approx(statistics.pstdev(values), rel=1e-6)


def test_stddev_samp_needs_two_values() -> None:
    assert fold(StddevSamp(), [5]) is None
    assert fold(StddevPop(), [5]) == 0.0


def test_impl13_any_is_last_value() -> None:
    assert fold(AnyValue(), ["a", "b", None]) == "b"


def test_impl13_group_concat_distinct_first_seen() -> None:
    assert fold(GroupConcat(), ["b", "a", "b", None, 1]) == "b,a,1"
    assert fold(GroupConcat(" | "), ["x", "y"]) == "x | y"


def test_arrays_contribute_their_first_element() -> None:
    assert fold(Sum(), [[1, 100], 2]) == 3
    assert fold(Max(), [["z", "a"], "b"]) == "z"


@pytest.mark.parametrize("name", sorted(AGGREGATES))
def test_remove_retracts_an_added_value(name: str) -> None:
    factory, _low, _high = AGGREGATES[name]
    values = [5, 3, "7", 3, 9.5, None]
    expected = fold(factory(), [5, 3, 9.5, None])
    aggregate = factory()
    for value in values:
        aggregate.add(value)
    aggregate.remove("7")
    aggregate.remove(3)
    result = aggregate.result()
    if isinstance(expected, float):
        assert result == pytest.approx(expected)
    elif name != "ANY":  # ANY answers one of the values, not necessarily the same one
        assert result == expected


def test_min_max_after_removing_the_extreme() -> None:
    aggregate = Max()
    for value in [1, 9, 5]:
        aggregate.add(value)
    aggregate.remove(9)
    assert aggregate.result() == 5


# --- aggregated queries -------------------------------------------------------------------------


def run(projection: str, grouping: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The aggregated query over records in processing order, groups in first-seen order
    (as the query service drives it)."""
    from processor.expr import extract

    aggregation = compile_aggregation(projection, grouping)
    groups: dict[tuple[Any, ...], Any] = {}
    for record in records:
        values = []
        for item in aggregation.inputs:
            assert isinstance(item, FieldInput)
            values.append(extract(record, item.steps))
        key = aggregation.group_key(values)
        if key not in groups:
            groups[key] = aggregation.accumulator()
        groups[key].add(values)
    return [accumulator.result() for accumulator in groups.values()]


def test_documented_aggregated_query_example() -> None:
    records = [
        {"id": 1, "tickerId": "IBM", "price": 150.34},
        {"id": 2, "tickerId": "IBM", "price": 149.76},
        {"id": 3, "tickerId": "IBM", "price": 149.32},
        {"id": 4, "tickerId": "IBM", "price": 151.10},
    ]
    result = run("MAX(/price) AS /max, /tickerId as /ticker", "/tickerId", records)
    assert result == [{"ticker": "IBM", "max": 151.10}]


def test_groups_and_aggregates() -> None:
    records = [
        {"sym": "A", "qty": 10, "price": 2.0},
        {"sym": "B", "qty": 5, "price": 1.0},
        {"sym": "A", "qty": 30, "price": 4.0},
    ]
    result = run(
        "/sym, SUM(/qty) AS /total/qty, COUNT(/qty) AS /total/n, AVG(/price) AS /avg, "
        "SUM(/qty * /price) AS /notional, SUM(/qty) / COUNT(/qty) AS /mean",
        "/sym",
        records,
    )
    assert result == [
        {"sym": "A", "total": {"qty": 40, "n": 2}, "avg": 3.0, "notional": 140.0, "mean": 20},
        {"sym": "B", "total": {"qty": 5, "n": 1}, "avg": 1.0, "notional": 5.0, "mean": 5},
    ]


def test_non_aggregated_fields_take_the_last_record() -> None:
    records = [{"g": 1, "x": "first"}, {"g": 1, "x": "second"}, {"g": 1}]
    assert run("/x AS /last, COUNT(/g) AS /n", "/g", records) == [{"last": None, "n": 3}]


def test_hint_optional_omits_null() -> None:
    records = [{"g": 1, "x": "a"}, {"g": 2}]
    result = run("/g, IF(/x IN ('a', 'e'), /x, NULL) AS /x HINT OPTIONAL", "/g", records)
    assert result == [{"g": 1, "x": "a"}, {"g": 2}]


def test_nan_is_written_as_null() -> None:
    assert run("/g, SUM(/v) AS /s", "/g", [{"g": 1, "v": "abc"}]) == [{"g": 1, "s": None}]


def test_aggregates_inside_expressions() -> None:
    records = [{"g": "x", "v": 150}, {"g": "x", "v": 50}]
    result = run(
        "IF(MAX(/v) > 100, 'high', 'low') AS /level, CONCAT(/g, '-', COUNT(/v)) AS /k",
        "/g",
        records,
    )
    assert result == [{"level": "high", "k": "x-2"}]


def test_group_concat_with_delimiter_in_query() -> None:
    records = [{"g": 1, "s": "a"}, {"g": 1, "s": "b"}, {"g": 1, "s": "a"}]
    assert run("GROUP_CONCAT(/s, ';') AS /all", "/g", records) == [{"all": "a;b"}]


def test_grouping_by_text_form_and_null_group() -> None:
    records = [{"g": 1, "v": 1}, {"g": "1", "v": 2}, {"v": 4}, {"g": 2, "v": 8}]
    result = run("SUM(/v) AS /s", "/g", records)
    assert result == [{"s": 3}, {"s": 4}, {"s": 8}]


def test_multiple_grouping_fields_and_inputs() -> None:
    aggregation = compile_aggregation("/a, /b, SUM(/c) AS /s", "/a, /b")
    assert aggregation.inputs == (
        FieldInput("/a", ("a",)),
        FieldInput("/b", ("b",)),
        FieldInput("/c", ("c",)),
    )
    assert aggregation.group_key(["x", 1, 5]) == ("x", "1")
    accumulator = aggregation.accumulator()
    accumulator.add(["x", 1, 5])
    accumulator.add(["x", 1, 6])
    assert accumulator.result() == {"a": "x", "b": 1, "s": 11}


def test_empty_accumulator_result() -> None:
    aggregation = compile_aggregation("/g, COUNT(/v) AS /n, SUM(/v) AS /s", "/g")
    assert aggregation.accumulator().result() == {"g": None, "n": 0, "s": None}


def test_array_projects_as_first_element() -> None:
    assert run("/arr AS /first, COUNT(/g) AS /n", "/g", [{"g": 1, "arr": [7, 8]}]) == [
        {"first": 7, "n": 1}
    ]


@pytest.mark.parametrize(
    ("projection", "grouping", "fragment"),
    [
        pytest.param("SUM(MAX(/a)) AS /x", "/g", "cannot be nested", id="nested"),
        pytest.param("SUM(/a) AS /x", "", "needs a grouping", id="empty-grouping"),
        pytest.param("", "/g", "needs a projection", id="empty-projection"),
        pytest.param(
            "GROUP_CONCAT(/a, /b) AS /x", "/g", "must be a constant", id="non-constant-delimiter"
        ),
        pytest.param(
            "SUM(UNIX_TIMESTAMP()) AS /x", "/g", "non-deterministic", id="non-deterministic-inside"
        ),
        pytest.param("SUM(/a, /b) AS /x", "/g", "SUM() takes 1 argument", id="arity"),
        pytest.param("SUM(/a) AS /x[0]", "/g", "plain field path", id="subscript-target"),
        pytest.param("FOO(/a) AS /x", "/g", "unknown function FOO()", id="unknown-function"),
    ],
)
def test_aggregation_errors(projection: str, grouping: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_aggregation(projection, grouping)
    assert fragment in str(caught.value)
