"""A fuzz of regular expressions (LIKE, REGEXP_REPLACE): mutated PCRE patterns, many of
them catastrophic for a backtracking engine, matched against short texts and long ones
(up to 100 KB). Every pattern must compile or fail with an ExpressionError, and every
match must answer or fail with a RegexBudgetError (an ExpressionError) within the match
budget, plus a slack for a loaded machine: a match over it is timed once more, alone (as
tests/heavy/fuzzing.py does), before it counts as slow.

The budget is the engine's clock (CPU time, processor/expr/backtrack.py); the slack covers
the difference from wall time when other processes share the cores. Patterns RE2 runs have
no budget (their time is linear in the text): a match is held to RE2_LIMIT_S plus
RE2_PER_CHARACTER_S per character of the text (a replacement walks its matches in
Python: ``x*`` on 100 KB makes 100,001 empty matches, about a second on a loaded machine).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable

from processor.errors import ExpressionError
from processor.expr.backtrack import Backtracking
from processor.expr.budget import budget_ms, set_budget_ms
from processor.expr.regex import Matcher, compile_regex
from tests.unit.test_expr_regex import AGREED, LINEAR_ONLY, REFUSED, SEMANTICS

#: Patterns that take a backtracking engine exponential (or high polynomial) time.
CATASTROPHIC = [
    r"(a+)+\1b",
    r"(?=(a+))+b",
    r"(a|aa)+\1c",
    r"((a+)+)+(?1)b",
    r"(.*?,){30}\1z",
    r"(?:a*)*(?<=a)b",
    r"(\w+\s?)+\1$",
    r"(a*)*+b\1",
    r"(?>a|aa)+(a+)+\1c",
    r"^(a+)+$(?<=b)",
    r"(x+x+)+y\1",
    r"(?i)(A+)+\1B",
    r"(?:(a)|b)*\1{2,}c",
    r"(a|a?)+\1b",
    r"(?=a*(a+)+b)\1",
]
#: Inserted into patterns: the constructs of both engines, and broken pieces.
PIECES = [
    *r"\.^$*+?()[]{}|-:=!<>#PR1aZz0xEQ ",
    r"\1", r"\2", r"\g{-1}", r"\k<n>", "(?P=n)", "(?<n>", "(?=", "(?!", "(?<=", "(?<!",
    "(?>", "++", "*+", "?+", "{2,}+", "(?1)", "(?R)", "(?&n)", "(?(1)", "(?|", r"\G", r"\K",
    "(*FAIL)", "(*SKIP)", "(*COMMIT)", "(?i)", "(?x)", "(?s)", "(?m)", "(?U)", r"\p{L}",
    "[[:alpha:]]", r"\s", r"\w+", "(a+)+", "{1000}", "{65535}", "(?C1)", r"\Q", r"\E",
]  # fmt: skip
SEEDS = [pattern for pattern, _, _ in SEMANTICS] + AGREED
SEEDS += [pattern for pattern, _, _ in LINEAR_ONLY + REFUSED] + CATASTROPHIC
ALPHABET = "aaab,xyzA1 .\n\t\\é"
#: The time a match on RE2 may take (as a case of tests/heavy/fuzzing.py), and more per
#: character of the text.
RE2_LIMIT_S = 1.0
RE2_PER_CHARACTER_S = 25e-6
#: The lengths of the long texts a pattern is matched against (100 KB at most).
LONG = (1_000, 10_000, 100_000)


def long_text(rng: random.Random) -> str:
    """A long text of the shapes the catastrophic patterns choke on."""
    size = rng.choice(LONG)
    unit = rng.choice(["a", "a,", "ab", "x", "A", "a a "])
    text = unit * (size // len(unit))
    return text + rng.choice(["", "!", "b"[: rng.random() < 0.1]])


def pattern_case(rng: random.Random) -> str:
    """A seed pattern, mutated by up to four insertions half of the time."""
    pattern = rng.choice(SEEDS)
    if rng.random() < 0.5:
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(pattern))
            pattern = pattern[:at] + rng.choice(PIECES) + pattern[at:]
    return pattern


@dataclasses.dataclass
class RegexReport:
    """Patterns, matches, outcomes by kind, failures (not an ExpressionError) and the
    slowest match (wall and CPU time)."""

    patterns: int = 0
    matches: int = 0
    long_matches: int = 0
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    slow: list[tuple[str, int, float]] = dataclasses.field(default_factory=list)
    max_wall_s: float = 0.0
    max_cpu_s: float = 0.0
    max_case: str = ""
    max_re2_s: float = 0.0
    max_compile_s: float = 0.0
    wall_s: float = 0.0
    budget_ms: int = 0
    backtracking: int = 0

    def summary(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.outcomes.items()))
        return (
            f"regex fuzz: {self.patterns} patterns, {self.matches} matches ({self.long_matches} "
            f"on texts of 1-100 KB); outcomes: {kinds}; {len(self.failures)} failures, "
            f"{len(self.slow)} slow; {self.backtracking} patterns on the backtracking engine, "
            f"its slowest match {self.max_wall_s * 1000:.1f} ms wall, "
            f"{self.max_cpu_s * 1000:.1f} ms CPU ({self.max_case[:60]!r}), budget "
            f"{self.budget_ms} ms; slowest RE2 match {self.max_re2_s * 1000:.1f} ms; slowest "
            f"compile {self.max_compile_s * 1000:.1f} ms; total {self.wall_s:.1f} s"
        )


def _timed(call: Callable[[], object]) -> tuple[float, float, BaseException | None]:
    """Wall and CPU time of ``call()``, and what it raised (None: nothing)."""
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        call()
    except Exception as exc:
        return time.perf_counter() - wall, time.process_time() - cpu, exc
    return time.perf_counter() - wall, time.process_time() - cpu, None


def _record(report: RegexReport, step: str, case: str, outcome: BaseException | None) -> None:
    """Count ``outcome`` of ``step`` (compile, match); keep a foreign exception."""
    if outcome is None:
        report.outcomes[f"{step} ok"] += 1
    elif isinstance(outcome, ExpressionError):
        report.outcomes[f"{step} {type(outcome).__name__}"] += 1
    elif len(report.failures) < 50:
        report.failures.append((case[:300], f"{type(outcome).__name__}: {outcome}"))


def _match(report: RegexReport, regex: Matcher, text: str, limit_s: float) -> None:
    """One search or replacement, timed (again, alone, when over ``limit_s``)."""
    if random.random() < 0.3:
        call: Callable[[], object] = lambda: regex.replace(text, "r")  # noqa: E731
    else:
        call = lambda: regex.search(text)  # noqa: E731
    wall, cpu, outcome = _timed(call)
    if wall > limit_s:
        wall, cpu, outcome = _timed(call)
        if wall > limit_s:
            report.slow.append((regex.pattern, len(text), wall))
    report.matches += 1
    report.long_matches += len(text) >= LONG[0]
    if not isinstance(regex, Backtracking):
        report.max_re2_s = max(report.max_re2_s, wall)
    elif wall > report.max_wall_s:
        report.max_wall_s, report.max_case = wall, f"{regex.pattern} on {len(text)} chars"
    if isinstance(regex, Backtracking):
        report.max_cpu_s = max(report.max_cpu_s, cpu)
    _record(report, "match", regex.pattern, outcome)


def fuzz_regexes(
    count: int, seed: int, *, budget: int = 25, slack_s: float = 0.25, long_share: float = 0.1
) -> RegexReport:
    """``count`` patterns from the generator seeded with ``seed``, each matched against
    two short texts and, for ``long_share`` of them, a long one; matches run with a budget
    of ``budget`` ms and may take ``slack_s`` more."""
    rng, report, previous = random.Random(seed), RegexReport(budget_ms=budget), budget_ms()
    random.seed(seed)
    set_budget_ms(budget)
    started = time.perf_counter()
    try:
        for _ in range(count):
            pattern = pattern_case(rng)
            report.patterns += 1
            began = time.perf_counter()
            try:
                regex = compile_regex(pattern)
            except Exception as exc:
                _record(report, "compile", pattern, exc)
                continue
            finally:
                report.max_compile_s = max(report.max_compile_s, time.perf_counter() - began)
            _record(report, "compile", pattern, None)
            texts = ["".join(rng.choices(ALPHABET, k=rng.randint(0, 40))) for _ in range(2)]
            if rng.random() < long_share:
                texts.append(long_text(rng))
            bounded = isinstance(regex, Backtracking)
            report.backtracking += bounded
            for text in texts:
                linear_s = RE2_LIMIT_S + RE2_PER_CHARACTER_S * len(text)
                _match(report, regex, text, budget / 1000 + slack_s if bounded else linear_s)
    finally:
        set_budget_ms(previous)
    report.wall_s = time.perf_counter() - started
    return report
