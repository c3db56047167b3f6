"""LIKE and REGEXP_REPLACE on RE2: linear time on patterns that make a backtracking engine
hang, PCRE semantics kept where RE2's own differ, refused constructs named with their
offset, and agreement with Python's ``re`` (a backtracking PCRE-like engine) on the
syntax both accept. What RE2 cannot run goes to the backtracking engine:
tests/unit/test_expr_backtracking.py."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest

from processor.errors import ExpressionError
from processor.expr import compile, evaluate
from processor.expr.regex import compile_regex

BACKTRACKING = "/b LIKE '.*.*.*.*.*.*.*.*yz'"


@pytest.mark.parametrize("size", [33, 10_000])
def test_backtracking_pattern_runs_in_linear_time(size: int) -> None:
    # Python's re took 1.4 s at 33 characters and 2.5x more per 4 more characters.
    expression = compile(BACKTRACKING)
    miss, hit = {"b": "x" * size}, {"b": "x" * size + "yz"}
    started = time.perf_counter()
    assert expression.matches(miss) is False
    assert expression.matches(hit) is True
    assert expression.scan(["miss", "hit"], [{"miss": miss["b"], "hit": hit["b"]}]) == ["hit"]
    assert time.perf_counter() - started < 0.5


def test_the_largest_accepted_patterns_stay_fast_on_long_text() -> None:
    # Near the program-size cap RE2 may fall back from its DFA to its NFA, whose time per
    # character grows with the program: the cap keeps 100 KB within a loose bound.
    text = "ab " * 33_333 + "1"
    for pattern in (r"(\w+\s?){285}!", r"(?s)(.?){249}x", r"(\s*\w*\W*){100}!"):
        regex = compile_regex(pattern)
        started = time.perf_counter()
        assert regex.search(text) is False
        assert time.perf_counter() - started < 0.5


def test_backtracking_regexp_replace_runs_in_linear_time() -> None:
    started = time.perf_counter()
    result = evaluate("REGEXP_REPLACE(/b, '(x+x+)+y', 'z')", {"b": "x" * 5_000})
    assert result == "x" * 5_000
    assert time.perf_counter() - started < 0.5


#: What RE2 cannot run: LIKE and REGEXP_REPLACE run it on the backtracking engine
#: (tests/unit/test_expr_backtracking.py); a topic pattern, matched where no budget can be
#: spent, refuses it, naming the construct and its offset.
LINEAR_ONLY = [
    (r"(.)\1", "the backreference '\\1'", 3),
    (r"(?P<a>.)(?P=a)", "the backreference", 8),
    (r"(a)\g1", "the reference '\\g1'", 3),
    (r"(?<a>.)\k<a>", "the reference '\\k<a>'", 7),
    ("a(?=b)", "the lookahead '(?='", 1),
    ("a(?!b)", "the negative lookahead '(?!'", 1),
    ("(?<=a)b", "the lookbehind assertion '(?<='", 0),
    ("(?<!a)b", "the lookbehind assertion '(?<!'", 0),
    ("(?>a+)b", "the atomic group", 0),
    ("a*+b", "possessive quantifier '*+'", 1),
    ("a++b", "possessive quantifier '++'", 1),
    ("a?+b", "possessive quantifier '?+'", 1),
    ("a{2,3}+b", "possessive quantifier '{2,3}+'", 1),
    ("(a|(?R))", "subroutine call", 3),
    ("(a)(?1)", "subroutine call", 3),
    ("(?<n>a)(?&n)", "subroutine call", 7),
    ("(?(1)a|b)", "conditional group", 0),
    ("(?|(a)|(b))", "the branch reset", 0),
    ("(*SKIP)a", "the control verb '(*SKIP)'", 0),
    (r"\Ga", "'\\G'", 0),
    (r"a\Kb", "'\\K'", 1),
    ("a{1001}", "repetition count 1001", 1),
]


@pytest.mark.parametrize(("pattern", "construct", "offset"), LINEAR_ONLY)
def test_topic_patterns_refuse_what_needs_backtracking(
    pattern: str, construct: str, offset: int
) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_regex(pattern, what="topic pattern", backtracking=False)
    message = str(caught.value)
    assert construct in message
    assert f"at offset {offset} of the pattern" in message
    assert "not supported here" in message
    assert "linear time" in message
    assert message.startswith(f"topic pattern {pattern!r}")


REFUSED = [
    ("(?C1)a", "callout", 0),
    (r"\X", "grapheme cluster", 0),
    (r"\C", "single code unit", 0),
    ("[[=a=]]", "POSIX collating element", 1),
    ("(*COMMIT)a", "the verb or option '(*COMMIT)'", 0),
    ("(*UTF8)a", "the verb or option '(*UTF8)'", 0),
    ("(?(R)a|b)", "the condition", 0),
]


@pytest.mark.parametrize(("pattern", "construct", "offset"), REFUSED)
def test_refused_constructs_name_what_and_where(pattern: str, construct: str, offset: int) -> None:
    text = "/a LIKE '" + pattern.replace("'", "\\'") + "'"
    with pytest.raises(ExpressionError) as caught:
        compile(text)
    message = str(caught.value)
    assert construct in message
    assert f"at offset {offset} of the pattern" in message
    assert "not supported" in message
    assert caught.value.text == text


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("(", "a group is not closed"),
        (")", "')' closes no group"),
        ("[a", "character class is not closed"),
        ("[z-a]", "out of order"),
        ("a\\", "ends with a backslash"),
        (r"\u0041", "escape '\\u' is unknown"),
        (r"[\B]", "not allowed in a character class"),
        ("(?a)x", "the flag 'a' is not supported"),
        ("x(?A)", "the flag 'A' is not supported here"),
        ("[[:word2:]]", "unknown POSIX class"),
        (r"\p{Nope}", "invalid regular expression"),
        ("*a", "no argument for repetition operator"),
        ("(a{1000}){1000}", "repeat an item 1,000,000 times"),
        ("a{65536}", "the repetition count 65536 is above 65535"),
        (r"(a)\g{-2}", "the relative reference -2 names no group"),
        (r"\k<", "the reference '\\k<' is invalid"),
        (r"(a)\2", "invalid group reference"),
    ],
)
def test_invalid_patterns_are_expression_errors(pattern: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_regex(pattern)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("(a{1000}){1000}", "invalid repetition size"),
        (".{300}", "compiling to 2404 RE2 instructions (above 2000)"),
        ("\\p{L}{3}", "RE2 instructions (above 2000)"),
    ],
)
def test_patterns_too_large_for_re2_are_refused_where_linear(pattern: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_regex(pattern, backtracking=False)
    assert fragment in str(caught.value)


SEMANTICS: list[tuple[str, Any, bool]] = [
    # $ and \Z: the end, or before a final newline (PCRE); \z: the very end.
    ("c$", "abc\n", True),
    ("c$", "abc\nd", False),
    ("c$", "a\nbc\n", True),
    ("c$\n", "abc\n", True),
    ("c\\Z\\s", "abc\n", True),
    ("^$", "\n", True),
    ("$\\A", "\n", True),
    (r"c\Z", "abc\n", True),
    (r"c\z", "abc\n", False),
    (r"c\z", "abc", True),
    ("(?m)c$", "abc\nd", True),
    ("(?m)^d", "abc\nd", True),
    ("^d", "abc\nd", False),
    # white space as PCRE: \s includes the vertical tab; \h \v \R \N
    (r"a\sb", "a\x0bb", True),
    (r"a\Sb", "a\x0bb", False),
    (r"[\s]", "\x0b", True),
    (r"[^\s]", "\x0b", False),
    (r"a\hb", "a\tb", True),
    (r"a\hb", "a\nb", False),
    (r"a\vb", "a\nb", True),
    (r"a\Rb", "a\r\nb", True),
    (r"a\Nb", "a\nb", False),
    # case folding is ASCII only (AMPS strings are bytes)
    ("(?i)abc", "xABCx", True),
    ("(?i)É", "é", False),
    ("(?i)é", "é", True),
    ("(?i)[a-c]+$", "AbC", True),
    ("(?i)[^a]", "A", False),
    ("(?i)[[:upper:]]", "a", True),
    ("(?i)k", "\u212a", False),
    ("a(?i)b", "aB", True),
    ("a(?i)b", "AB", False),
    ("(?i:a)b", "AB", False),
    ("(?i)a(?-i)b", "Ab", True),
    ("(?i)a(?-i)b", "AB", False),
    ("(a(?i)b)c", "aBC", False),
    # \w \d \b are ASCII; . is one character
    (r"^\w$", "é", False),
    (r"^\d$", "\u0663", False),
    ("^.$", "é", True),
    ("a.b", "a\nb", False),
    ("(?s)a.b", "a\nb", True),
    # extended, ungreedy, anchored
    ("(?x) a b  # comment", "ab", True),
    ("(?x) a [ ] b", "a b", True),
    (r"(?x) a\ b", "a b", True),
    ("(?x:a b)c d", "abc d", True),
    ("(?U)^a+b", "aab", True),
    ("(?A)b", "ab", False),
    ("(?A)a", "ab", True),
    ("(?A)(?i)A", "ab", True),
    # escapes and literals
    (r"\Qa.b\E", "axb", False),
    (r"\Qa.b\E", "a.b", True),
    (r"\x41\101\x{42}", "AAB", True),
    (r"\cA", "\x01", True),
    (r"\e", "\x1b", True),
    (r"\o{101}", "A", True),
    (r"[\x41-\x43]+$", "ABC", True),
    (r"[\b]", "\x08", True),
    ("a{,3}", "a{,3}", True),
    ("a{2,3}$", "aaa", True),
    ("x{2}", "x", False),
    ("[]a]", "]", True),
    ("[^]a]", "]", False),
    ("[a-]", "-", True),
    ("[[:digit:]]+", "a12", True),
    (r"\p{Greek}", "\u03b1", True),
    (r"\p{Lu}", "abc", False),
    # groups: named in every PCRE spelling, comments
    ("(?<n>a)b", "ab", True),
    ("(?P<n>a)b", "ab", True),
    ("(?'n'a)b", "ab", True),
    ("a(?#comment)b", "ab", True),
    # a lone surrogate in a decoded string does not stop matching
    ("a", "\ud800a", True),
    ("^.a", "\ud800a", True),
]


@pytest.mark.parametrize(("pattern", "subject", "expected"), SEMANTICS)
def test_pcre_semantics(pattern: str, subject: str, expected: bool) -> None:
    assert compile_regex(pattern).search(subject) is expected
    quoted = pattern.replace("'", "\\'")
    assert evaluate(f"/x LIKE '{quoted}'", {"x": subject}) is expected


def test_like_keeps_its_value_rules() -> None:
    assert evaluate("/x LIKE '^3[0-9]$'", {"x": 34}) is True
    assert evaluate("/x LIKE '^tr'", {"x": True}) is True
    assert evaluate("/x LIKE '^b.$'", {"x": ["ab", "bc"]}) is True
    assert evaluate("/x LIKE '^b.$'", {"x": None}) is False
    assert evaluate("/x NOT LIKE '^b.$'", {"x": ["ab"]}) is True
    assert evaluate("/x LIKE r'.*'", {"x": "a.*b"}) is True
    assert evaluate("/x LIKE r'.*'", {"x": "ab"}) is False


# -- agreement with Python's re on the syntax both accept --------------------------------

AGREED = [
    "a",
    "ab|ba",
    "^a",
    "b$",
    "^$",
    "a*b",
    "a+?b",
    "(ab)+",
    "(?:a|b){2,3}",
    "a{2}",
    "a{1,}",
    "[abc]",
    "[^ab]",
    "[a-c]+",
    r"\d+",
    r"\w+\b",
    r"\bx",
    r"\Bb",
    r"\s",
    r"\S+",
    ".",
    "a.b",
    "(?s)a.b",
    "(?m)^b",
    "(?m)a$",
    "(?i)AB",
    "(?i)[A-B]",
    "(?i)[^B]",
    "(?x) a | b ",
    r"\.",
    r"\\",
    r"a\nb",
    r"\t",
    "[.]",
    r"[\]]",
    "[a^]",
    "a|",
    "(|a)b",
    "(a|ab)(c|bcd)",
    "x*",
    r"\Ax",
    "b?a?b?",
    "(?i:a)b",
    "a(?i:b)",
    r"[\w.]+",
    r"[^\d\s]",
    "(a*)*b",
    "((a|b)*c)+",
]
ALPHABET = "abcxAB1 .\n\t\\"


def test_search_agrees_with_python_re() -> None:
    rng = random.Random(7)
    texts = ["", "\n"] + ["".join(rng.choices(ALPHABET, k=rng.randint(1, 12))) for _ in range(300)]
    for pattern in AGREED:
        ours, theirs = compile_regex(pattern), re.compile(pattern, re.ASCII)
        for text in texts:
            assert ours.search(text) is (theirs.search(text) is not None), (pattern, text)


def test_replace_agrees_with_python_re() -> None:
    rng = random.Random(11)
    texts = ["", "\n"] + ["".join(rng.choices(ALPHABET, k=rng.randint(1, 12))) for _ in range(200)]
    for pattern in AGREED:
        ours, theirs = compile_regex(pattern), re.compile(pattern, re.ASCII)
        for text in texts:
            expected = theirs.sub(lambda _match: "<>", text)
            assert ours.replace(text, "<>") == expected, (pattern, text)


def test_regexp_replace_keeps_the_final_newline_before_dollar() -> None:
    assert compile_regex("c$").replace("abc\n", "X") == "abX\n"
    assert compile_regex("c$").replace("c\nabc\n", "X") == "c\nabX\n"
    assert compile_regex("$").replace("a\n", "X") == "aX\nX"
    assert compile_regex("$").replace("a\nb\n", "X") == "a\nbX\nX"
    assert compile_regex(r"c\Z").replace("abc\n", "X") == "abX\n"
    assert evaluate("REGEXP_REPLACE(/a, 'c$', 'X')", {"a": "abc\n"}) == "abX\n"
    assert compile_regex("é+").replace("aééb", "-") == "a-b"
    assert compile_regex("x*").replace("aé", "-") == "-a-é-"


def test_regexp_replace_with_a_refused_runtime_pattern_is_null() -> None:
    assert evaluate("REGEXP_REPLACE(/a, /p, 'x')", {"a": "aa", "p": r"(?C1)a"}) is None
    assert evaluate("REGEXP_REPLACE(/a, /p, 'x')", {"a": "aab", "p": r"(a)\1"}) == "xb"
    assert evaluate("REGEXP_REPLACE(/a, /p, 'x')", {"a": "aa", "p": "a"}) == "xx"
