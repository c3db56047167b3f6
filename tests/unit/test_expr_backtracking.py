"""PCRE constructs RE2 cannot run, on the backtracking engine (issue 36): backreferences,
lookaround, possessive quantifiers, atomic groups, recursion...; the meanings the
translator gives RE2 kept on that engine too; every match bounded by the budget
(RegexBudgetError), raised by a query's evaluation and counted as no match by a filter
that must not fail; and the quick regex fuzz (tests/heavy/test_regex_fuzz.py runs 100,000
patterns)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from processor.errors import ExpressionError, RegexBudgetError
from processor.expr import compile, evaluate
from processor.expr.backtrack import Backtracking, compile_backtracking
from processor.expr.budget import budget_ms, overruns, set_budget_ms
from processor.expr.regex import Regex, compile_regex
from processor.observability.metrics import _summed
from tests.heavy.regex_fuzzing import fuzz_regexes
from tests.unit.test_expr_regex import AGREED, ALPHABET, SEMANTICS

BACKTRACKING: list[tuple[str, Any, bool]] = [
    # backreferences, numbered and named in every PCRE spelling
    (r"(.)\1", "hello", True),
    (r"(.)\1", "helo", False),
    (r"^(\w+) \1$", "bye bye", True),
    (r"(.)\g1", "xx", True),
    (r"(.)\g{1}", "xx", True),
    (r"(.)(.)\g{-2}", "xyx", True),
    (r"(?<n>.)\k<n>", "xx", True),
    (r"(?'n'.)\k'n'", "xx", True),
    (r"(?<n>.)\k{n}", "xx", True),
    (r"(?P<n>.)(?P=n)", "xx", True),
    (r"(?<n>.)\g{n}", "xy", False),
    (r"(?i)(a)\1", "aA", True),  # caseless: ASCII letters only
    (r"(?i)(é)\1", "éÉ", False),
    (r"(a)|b\1", "b", False),  # a group that did not take part matches nothing
    # lookahead and lookbehind
    ("a(?=b)", "ab", True),
    ("a(?=b)", "ac", False),
    ("a(?!b)", "ab", False),
    ("(?<=a)b", "ab", True),
    ("(?<!a)b", "ab", False),
    ("(?<=^|,)x", "a,x", True),
    # possessive quantifiers and atomic groups give nothing back
    ("a*+a", "aaa", False),
    ("a++b", "aab", True),
    ("a?+a", "a", False),
    ("a{1,3}+a", "aaa", False),
    ("(?>a*)a", "aaa", False),
    ("(?>ab|a)c", "abc", True),
    # recursion, subroutines, conditionals, branch reset, \G \K and verbs
    (r"^(\((?:[^()]|(?1))*\))$", "(a(b)c)", True),
    (r"^(\((?:[^()]|(?1))*\))$", "(a(b c)", False),
    (r"(?<d>[0-9])(?&d)", "42", True),
    (r"(a)(?-1)", "aa", True),
    (r"(?+1)(b)", "bb", True),
    (r"^(x)?(?(1)a|b)$", "b", True),
    (r"^(x)?(?(1)a|b)$", "xb", False),
    (r"(?(?=\d)\d{2}|[a-z]{3})$", "abc", True),
    (r"(?|(a)|(b))\1", "bb", True),
    (r"\Ga", "ba", False),
    (r"a\Kb", "ab", True),
    ("a(*FAIL)|b", "a", False),
    # what RE2 refuses for its size
    ("a{1001}", "a" * 1001, True),
    (".{300}", "x" * 299, False),
    (r"\p{L}{3}(?=!)", "αβγ!", True),
    # the translator's meanings, kept with a construct that sends the pattern here
    (r"c$(?<=c)", "abc\n", True),
    (r"c\z(?<=c)", "abc\n", False),
    (r"\s(?=x)", "\x0bx", True),
    (r"(?i)k(?=x)", "\u212ax", False),
    (r"^\w(?=x)", "éx", False),
    (r"[\p{L}](?=x)", "éx", True),
    (r"[^\p{L}\d](?=x)", "éx", False),
    (r"[^\p{L}\d](?=x)", "-x", True),
    (r"\x{e9}(?=x)", "éx", True),
    (r"(?m)^b(?=$)", "a\nb\nc", True),
]


@pytest.mark.parametrize(("pattern", "subject", "expected"), BACKTRACKING)
def test_backtracking_constructs(pattern: str, subject: str, expected: bool) -> None:
    assert isinstance(compile_regex(pattern), Backtracking)
    assert compile_regex(pattern).search(subject) is expected
    quoted = pattern.replace("'", "\\'")
    assert evaluate(f"/x LIKE '{quoted}'", {"x": subject}) is expected


@pytest.mark.parametrize(("pattern", "subject", "expected"), SEMANTICS)
def test_the_backtracking_engine_means_what_re2_means(
    pattern: str, subject: str, expected: bool
) -> None:
    assert isinstance(compile_regex(pattern), Regex)
    translated = compile_backtracking(pattern, what="LIKE pattern", text="", position=-1)
    assert translated.search(subject) is expected


def test_search_and_replace_agree_with_python_re() -> None:
    texts = ["", "\n", "abcxAB1 .\n\t\\", "aab", "b\na\n", "x" * 7, ALPHABET * 2]
    for pattern in AGREED:
        ours = compile_backtracking(pattern, what="LIKE pattern", text="", position=-1)
        theirs = re.compile(pattern, re.ASCII)
        for text in texts:
            assert ours.search(text) is (theirs.search(text) is not None), (pattern, text)
            assert ours.replace(text, "<>") == theirs.sub(lambda _: "<>", text), (pattern, text)


def test_regexp_replace_with_a_backreference_keeps_the_replacement_literal() -> None:
    # Its string arguments decode escapes (unlike LIKE's pattern): '\\1' is '\1'.
    assert evaluate(r"REGEXP_REPLACE(/a, '(o)\\1', '\\1')", {"a": "foo"}) == "f\\1"
    assert evaluate("REGEXP_REPLACE(/a, 'a(?=b)', 'X')", {"a": "abac"}) == "Xbac"
    assert evaluate("REGEXP_REPLACE(/a, '(?<=a)b', 'X')", {"a": "abb"}) == "aXb"


@pytest.fixture
def budget() -> Iterator[int]:
    """A 20 ms budget for the test."""
    previous = budget_ms()
    set_budget_ms(20)
    yield 20
    set_budget_ms(previous)


CATASTROPHIC = [r"(a+)+\1b", r"(a|aa)+\1c", r"((a+)+)+(?1)b"]
#: The budget and a slack for a loaded machine (the budget is CPU time).
SLACK_S = 1.0


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_pattern_on_100_kb_stops_at_the_budget(budget: int, pattern: str) -> None:
    regex = compile_regex(pattern)
    for run in (regex.search, lambda text: regex.replace(text, "x")):
        started = time.perf_counter()
        with pytest.raises(RegexBudgetError) as caught:
            run("a" * 100_000)
        assert time.perf_counter() - started < budget / 1000 + SLACK_S
        message = str(caught.value)
        assert repr(pattern) in message
        assert f"budget of {budget} ms" in message
        assert "SOW_REGEX_MATCH_BUDGET_MS" in message
        assert caught.value.failure == "exhausted"
        assert isinstance(caught.value, ExpressionError)


def test_a_query_fails_and_a_filter_counts_no_match(budget: int) -> None:
    del budget
    expression = compile(r"/s LIKE '(a+)+\1b' OR /n = 1")
    long = {"s": "a" * 100_000, "n": 2}
    assert expression.matches({"s": "xaab", "n": 2}) is True
    with pytest.raises(RegexBudgetError):
        expression.matches(long)
    with pytest.raises(RegexBudgetError):  # the query's scan, not a record silently skipped
        expression.scan(["k1", "k2"], [{"k1": "a" * 100_000, "k2": "aab"}, {}])
    before = overruns()
    assert expression.matches(long, overrun="subscription") is False
    assert expression.matches({"s": "x", "n": 1}, overrun="subscription") is True
    after = overruns()
    assert after["subscription"] == before["subscription"] + 1
    assert after["view"] == before["view"]


def test_regexp_replace_over_its_budget_is_null_and_counted(budget: int) -> None:
    del budget
    before = overruns()["function"]
    text = r"REGEXP_REPLACE(/s, '(a+)+\\1b', 'x')"
    assert evaluate(text, {"s": "a" * 100_000}) is None
    assert evaluate(text, {"s": "aab"}) == "x"
    assert overruns()["function"] == before + 1


def test_topic_patterns_stay_on_re2() -> None:
    with pytest.raises(ExpressionError, match="linear time"):
        compile_regex(r"(.)\1", what="topic pattern", backtracking=False)
    assert isinstance(compile_regex("orders.*", backtracking=False), Regex)


def test_the_processor_childs_counts_are_added_to_the_parents() -> None:
    own = (
        b'# HELP sow_regex_budget_exceeded_total x\nsow_regex_budget_exceeded_total{where="view"}'
        b' 1.0\nsow_regex_budget_exceeded_total{where="query"} 2.0\n'
    )
    child = b'sow_regex_budget_exceeded_total{where="view"} 3.0\n'
    summed = _summed(own, [child], b"sow_regex_budget_exceeded_total")
    assert b'{where="view"} 4.0\n' in summed
    assert b'{where="query"} 2.0\n' in summed


def test_fuzzed_patterns_fail_cleanly_within_the_budget() -> None:
    report = fuzz_regexes(2_000, seed=3, budget=20, long_share=0.03)
    print(report.summary())
    assert report.patterns == 2_000
    assert not report.failures, report.failures
    assert not report.slow, report.slow
    assert report.outcomes["compile ExpressionError"] > 0
    assert report.backtracking > 100
