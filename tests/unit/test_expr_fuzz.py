"""The fast fault suite for filters (the heavy one, tests/heavy/test_fuzz.py, runs a
million): fuzzed filters fail only with SowError subclasses, within a second each."""

from __future__ import annotations

import pytest

from processor.errors import ExpressionError
from processor.expr import compile
from tests.heavy.fuzzing import LIMIT_S, MESSAGES, fuzz_expressions


def test_fuzzed_filters_fail_only_with_sow_errors() -> None:
    report = fuzz_expressions(20_000, seed=7)
    print(report.summary("filters"))
    assert report.cases == 20_000
    assert report.errors > 0  # the mutations do reach the error paths
    assert report.errors < report.cases  # and many still compile and evaluate
    assert not report.failures, report.failures
    assert not report.slow, f"over {LIMIT_S} s: {report.slow}"


def test_refused_like_inside_a_fuzzed_filter_is_an_expression_error() -> None:
    # A shape the fuzzer produces: a refused pattern deep inside a valid filter.
    with pytest.raises(ExpressionError, match="lookbehind"):
        compile("(/a > 1) OR ((/b LIKE '(?<=x)y' AND /c IS NULL))")
    assert compile("(/a > 1) OR /b LIKE '(x+x+)+y'").matches(MESSAGES[1]) is False
