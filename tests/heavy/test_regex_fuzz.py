"""The regex fuzz (heavy, issue 36): 100,000 mutated PCRE patterns, catastrophic ones
among them, matched against short texts and, one pattern in ten, a text of 1 to 100 KB.
Every failure must be an ExpressionError (an invalid pattern, or RegexBudgetError for a
match stopped at its budget) and no match on the backtracking engine may take longer than
the budget plus a slack for a loaded machine. Run with::

    python -m pytest -m heavy -s tests/heavy/test_regex_fuzz.py

It prints the patterns, the outcomes by kind, the slowest match and the total time (a few
minutes on a 2-core machine).
"""

from __future__ import annotations

import pytest

from tests.heavy.regex_fuzzing import fuzz_regexes

PATTERNS = 100_000
BUDGET_MS = 25


@pytest.mark.heavy
@pytest.mark.timeout(3600)
def test_fuzzed_patterns_fail_cleanly_within_the_budget() -> None:
    report = fuzz_regexes(PATTERNS, seed=36, budget=BUDGET_MS, long_share=0.1)
    print(report.summary())
    assert report.patterns == PATTERNS
    assert not report.failures, "\n".join(
        f"{case}\n  -> {error}" for case, error in report.failures
    )
    assert not report.slow, report.slow
    assert report.outcomes["match RegexBudgetError"] > 0  # catastrophic cases were met
