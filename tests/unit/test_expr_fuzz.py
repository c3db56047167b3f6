"""The fast fault suite for filters (the heavy one, tests/heavy/test_fuzz.py, runs a
million): fuzzed filters fail only with SowError subclasses, within a second each."""

from __future__ import annotations

import time

import pytest

from processor.errors import ExpressionError, ParseError
from processor.expr import compile
from tests.heavy.fuzzing import LIMIT_S, MESSAGES, fuzz_expressions


def test_fuzzed_filters_fail_only_with_sow_errors() -> None:
    # 10,000 here (CI's time budget; patterns that now compile for the backtracking engine
    # made a case dearer); the heavy run, tests/heavy/test_fuzz.py, takes 100,000.
    report = fuzz_expressions(10_000, seed=7)
    print(report.summary("filters"))
    assert report.cases == 10_000
    assert report.errors > 0  # the mutations do reach the error paths
    assert report.errors < report.cases  # and many still compile and evaluate
    assert not report.failures, report.failures
    assert not report.slow, f"over {LIMIT_S} s: {report.slow}"


def test_refused_like_inside_a_fuzzed_filter_is_an_expression_error() -> None:
    # A shape the fuzzer produces: a refused pattern deep inside a valid filter.
    with pytest.raises(ExpressionError, match="callout"):
        compile("(/a > 1) OR ((/b LIKE '(?C1)y' AND /c IS NULL))")
    assert compile("(/a > 1) OR /b LIKE '(x+x+)+y'").matches(MESSAGES[1]) is False


def test_a_filter_of_many_drivable_conjuncts_builds_quickly() -> None:
    # Found by the fault suite: every conjunct that can drive a scan got a driver whose
    # code inlines all the others, so 100 conjuncts generated 10,000 tests (1 s to build).
    text = " AND ".join(f"/f{i} > {i}" for i in range(120))
    started = time.perf_counter()
    expression = compile(text)
    matching = {f"f{i}": i + 1 for i in range(120)}
    assert expression.matches(matching) is True
    assert expression.matches({**matching, "f119": 0}) is False
    assert time.perf_counter() - started < 1.0
    keys = ["yes", "no"]
    columns = [{"yes": i + 1, "no": i + (i != 60)} for i in range(120)]
    assert expression.scan(keys, columns) == ["yes"]
    assert expression.scan(keys, columns, aligned=True) == ["yes"]


def test_an_overlong_expression_is_refused_before_parsing() -> None:
    # Found by the fault suite: a 124 KB chain took over a second to parse before failing.
    text = "/a = 1" + " + 1" * 20_000
    started = time.perf_counter()
    with pytest.raises(ParseError, match="expression too long: 80,006 characters"):
        compile(text)
    assert time.perf_counter() - started < 0.1
    long_in_list = f"/a IN ({', '.join(str(i) for i in range(10_000))})"
    assert 50_000 < len(long_in_list) < 65_536
    assert compile(long_in_list).matches({"a": 9_999}) is True
