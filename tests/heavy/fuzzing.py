"""Fault injection for the two parsers of user input: filter expressions and topology files.

Seeded :class:`random.Random` generators (not hypothesis: a million cases must be cheap)
mutate valid inputs taken from the conformance and topology test suites, and a runner
feeds them to the product and records, per case, the exception type (anything but a
:class:`~processor.errors.SowError` is a failure) and the time taken (the slowest case is
reported; a case over the limit is run again once, alone, so that a scheduling pause on a
shared machine is not mistaken for a hang).
"""

from __future__ import annotations

import ast as pyast
import dataclasses
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from processor.errors import SowError
from processor.expr import MessageContext, compile
from processor.expr.budget import budget_ms, set_budget_ms
from processor.topology.loader import load_topology
from tests.unit import test_expr_conformance_functions as functions_rows
from tests.unit import test_expr_conformance_language as language_rows
from tests.unit.test_expr_parser_fuzz import TOKENS
from tests.unit.test_expr_regex import AGREED, LINEAR_ONLY, REFUSED, SEMANTICS

ROOT = Path(__file__).resolve().parents[2]
#: The time one case may take (compile and evaluate, or load one topology file).
LIMIT_S = 1.0
#: Longest mutated expression. Parsing is linear, about 10 microseconds per character of
#: dense syntax (the parser refuses texts over 65,536 characters): longer cases would
#: measure the parser's throughput on a loaded machine, not look for hangs.
MAX_EXPRESSION = 16_384
#: The regex match budget during the expression fuzz (see :func:`fuzz_expressions`).
MATCH_BUDGET_MS = 5


@dataclasses.dataclass
class Report:
    """What a fuzz run saw: cases, typed errors, failures (foreign exceptions), timings."""

    cases: int = 0
    errors: int = 0
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    slow: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    max_s: float = 0.0
    max_case: str = ""
    wall_s: float = 0.0

    def summary(self, what: str) -> str:
        return (
            f"{what}: {self.cases} cases, {self.errors} SowErrors, {len(self.failures)} "
            f"failures, {len(self.slow)} over {LIMIT_S} s, max {self.max_s * 1000:.1f} ms "
            f"({self.max_case[:80]!r}), wall {self.wall_s:.1f} s"
        )


def run(cases: Callable[[int], Any], count: int, check: Callable[[Any], None]) -> Report:
    """Run ``check`` on ``cases(i)`` for i in range(count); see the module docstring."""
    report = Report()
    started = time.perf_counter()
    for index in range(count):
        case = cases(index)
        elapsed, outcome = timed(check, case)
        if elapsed > LIMIT_S:
            elapsed, outcome = timed(check, case)
            if elapsed > LIMIT_S:
                report.slow.append((repr(case)[:300], elapsed))
        report.cases += 1
        if elapsed > report.max_s:
            report.max_s, report.max_case = elapsed, repr(case)
        if isinstance(outcome, SowError):
            report.errors += 1
        elif isinstance(outcome, BaseException) and len(report.failures) < 50:
            report.failures.append((repr(case)[:500], f"{type(outcome).__name__}: {outcome}"))
    report.wall_s = time.perf_counter() - started
    return report


def timed(check: Callable[[Any], None], case: Any) -> tuple[float, BaseException | None]:
    """How long ``check(case)`` took, and what it raised (None: nothing)."""
    started = time.perf_counter()
    try:
        check(case)
    except Exception as exc:
        return time.perf_counter() - started, exc
    return time.perf_counter() - started, None


# -- expressions ---------------------------------------------------------------------------

CONTEXT = MessageContext(sow_key="k1", topic="orders", message_size=120, last_updated=1.5)
MESSAGES: list[dict[str, Any]] = [
    {},
    {"a": 1, "b": "x" * 40, "c": [1, "2", None], "data": "zebra", "x": "abc\n"},
    {"a": "9" * 400, "b": 1e308, "c": float("nan"), "o": {"p": [{"q": -0.0}]}, "x": -(2**70)},
    {"a": ["é", "\ud800", "\x00"], "b": True, "c": {"d": {"e": {"f": [[1], [2, [3]]]}}}},
]
MESSAGES.extend(row[2] for row in language_rows.ROWS[::40])

_WORDS = [
    *TOKENS,
    "ABS", "CEILING", "COALESCE", "CONCAT", "FLOOR", "IF", "INSTR", "LEFT", "LENGTH", "LOWER",
    "MOD", "NOW", "POWER", "REGEXP_REPLACE", "REPLACE", "REVERSE", "RIGHT", "ROUND", "SQRT",
    "SUBSTR", "TRIM", "UNIX_TIMESTAMP", "UPPER", "SUM", "COUNT",
    "1e999", "-1e999", "9" * 5000, "0x10", "1" * 30, "-0", "NaN", "'\\x00'", "/a[999999999999]",
    "r'", "'''", "'\\'", "(?i)", "''.*''", "/" * 50, "[", "((((", "))))",
]  # fmt: skip
_LITERALS = [
    "0", "-1", "1.5", "1e308", "1e999", "9" * 400, "'a'", "'é'", "'\\x00'", "'9' ", "'1e3'",
    "NULL", "TRUE", "NAN_VALUE()", "/a", "/c[1]", "/o/p/q", "'" + "x" * 5000 + "'",
]  # fmt: skip
_REGEXES = [pattern for pattern, _, _ in SEMANTICS] + AGREED + [p for p, _, _ in REFUSED]
_REGEXES += [pattern for pattern, _, _ in LINEAR_ONLY]
_REGEXES += [".*.*.*.*.*.*.*.*yz", "(a+)+$", "(x+x+)+y", "(a|aa)*c", "a{1000}", "[" * 3]
_TOKEN = re.compile(r"\s+|[A-Za-z_]\w*|\d+(?:\.\d+)?|'(?:\\.|[^'\\])*'|\"[^\"]*\"|.", re.S)


def expression_seeds() -> list[str]:
    """Valid filters and value expressions of the conformance suites."""
    seeds = [row[1] for row in language_rows.ROWS + functions_rows.ROWS]
    seeds += [row[1] for row in functions_rows.CONTEXT_ROWS]
    return seeds


def _random_char(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.6:
        return chr(rng.randrange(0x20, 0x7F))
    if roll < 0.8:
        return chr(rng.randrange(0, 0x20))
    return chr(rng.randrange(0x80, 0x110000))


def mutate_expression(rng: random.Random, seeds: list[str]) -> str:
    """One mutated expression: 1 to 4 token or character edits of a seed."""
    text = rng.choice(seeds)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        text = _EDITS[rng.randrange(len(_EDITS))](rng, text, seeds)
    return text[:MAX_EXPRESSION]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text) or [""]


def _delete_token(rng: random.Random, text: str, _: list[str]) -> str:
    tokens = _tokens(text)
    del tokens[rng.randrange(len(tokens))]
    return "".join(tokens)


def _duplicate_token(rng: random.Random, text: str, _: list[str]) -> str:
    tokens = _tokens(text)
    at = rng.randrange(len(tokens))
    tokens.insert(at, tokens[at] * rng.choice((1, 1, 2, 50)))
    return "".join(tokens)


def _replace_token(rng: random.Random, text: str, _: list[str]) -> str:
    tokens = _tokens(text)
    tokens[rng.randrange(len(tokens))] = f" {rng.choice(_WORDS)} "
    return "".join(tokens)


def _replace_literal(rng: random.Random, text: str, _: list[str]) -> str:
    tokens = _tokens(text)
    places = [i for i, token in enumerate(tokens) if token[:1] in "'\"0123456789"]
    if not places:
        return text
    tokens[rng.choice(places)] = rng.choice(_LITERALS)
    return "".join(tokens)


def _swap_tokens(rng: random.Random, text: str, _: list[str]) -> str:
    tokens = _tokens(text)
    i, j = rng.randrange(len(tokens)), rng.randrange(len(tokens))
    tokens[i], tokens[j] = tokens[j], tokens[i]
    return "".join(tokens)


def _bytes(rng: random.Random, text: str, _: list[str]) -> str:
    at = rng.randint(0, len(text))
    junk = "".join(_random_char(rng) for _ in range(rng.randint(1, 6)))
    return text[:at] + junk + text[at + rng.randint(0, 3) :]


def _splice(rng: random.Random, text: str, seeds: list[str]) -> str:
    other = rng.choice(seeds)
    return text[: rng.randint(0, len(text))] + other[rng.randint(0, len(other)) :]


def _combine(rng: random.Random, text: str, seeds: list[str]) -> str:
    glue = rng.choice((" AND ", " OR ", " + ", ", ", " = ", " IN (", " BETWEEN "))
    return f"({text}){glue}({rng.choice(seeds)})"


def _nest(rng: random.Random, text: str, _: list[str]) -> str:
    depth = rng.choice((2, 10, 100, 400, 3000))
    shape = rng.randrange(4)
    if shape == 0:
        return "(" * depth + text + ")" * depth
    if shape == 1:
        return "NOT " * depth + text
    if shape == 2:
        return "ABS(" * depth + text + ")" * depth
    return " + ".join([text] * min(depth, 200))


def _like(rng: random.Random, text: str, _: list[str]) -> str:
    pattern = rng.choice(_REGEXES)
    for _ in range(rng.randint(0, 3)):
        at = rng.randint(0, len(pattern))
        pattern = pattern[:at] + rng.choice("\\.^$*+?()[]{}|-:=!<>#PR1aZz0xEQ ") + pattern[at:]
    quoted = pattern.replace("\\'", "'").replace("'", "\\'")
    if rng.random() < 0.3:
        return f"REGEXP_REPLACE(/b, '{quoted}', 'r') = /x OR ({text})"
    return f"/{rng.choice('abcx')} {rng.choice(('', 'NOT '))}LIKE '{quoted}' AND ({text})"


_EDITS = [
    _delete_token, _duplicate_token, _replace_token, _replace_literal, _replace_literal,
    _replace_literal, _swap_tokens, _bytes, _splice, _combine, _combine, _nest, _like, _like,
]  # fmt: skip


def check_expression(text: str) -> None:
    """Compile ``text`` and evaluate it (value and filter) against every message."""
    expression = compile(text)
    for message in MESSAGES:
        expression(message, CONTEXT)
        expression.matches(message)


def fuzz_expressions(count: int, seed: int) -> Report:
    """``count`` mutated expressions from the generator seeded with ``seed``. A pattern on
    the backtracking engine may take its whole budget on every message, twice (value and
    filter): the budget is cut to MATCH_BUDGET_MS so that a case stays within LIMIT_S
    (the regex fuzz, tests/heavy/regex_fuzzing.py, checks the budget itself)."""
    rng, seeds = random.Random(seed), expression_seeds()
    previous = budget_ms()
    set_budget_ms(MATCH_BUDGET_MS)
    try:
        return run(lambda _: mutate_expression(rng, seeds), count, check_expression)
    finally:
        set_budget_ms(previous)


# -- topologies ----------------------------------------------------------------------------


def topology_seeds() -> list[tuple[str, str]]:
    """(extension, text) of the example topologies and of the topology tests' documents."""
    seeds = [
        (path.suffix, path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "topologies").iterdir())
        if path.suffix in (".yaml", ".xml")
    ]
    source = (ROOT / "tests" / "unit" / "test_topology.py").read_text(encoding="utf-8")
    for node in pyast.walk(pyast.parse(source)):
        if isinstance(node, pyast.Constant) and isinstance(node.value, str):
            if "<AMPSConfig" in node.value:
                seeds.append((".xml", node.value))
            elif node.value.lstrip().startswith(("topics:", "defaults:")):
                seeds.append((".yaml", node.value))
    return seeds


_YAML_VALUES = [
    "", "null", "~", "[]", "{}", "-1", "0", "1e400", "9" * 5000, "'x'", "true", "&a [*a]",
    "!!binary aGk=", "!!timestamp 2024-13-45", "!!python/object:os.system {}", "*undefined",
    "[[[[[[[[", "{a: {b: {c:", "'\\ud800'", "\"\\ud800\"", "2024-01-31T10:00:00Z", "1_000",
    "0o777", ".inf", "-.nan", "json", "avro", "binary", "persistent", "transient", "1s", "-5m",
    "999999999999999999999d", "/a/b", "[/a, /a]", "{factory: x}", "|\n  text", "? [a]\n: b",
]  # fmt: skip
_XML_VALUES = [
    "", "-1", "0", "1e400", "9" * 5000, "${HOME}", "${", "${NOPE_UNSET}", "&amp;", "&bogus;",
    "<![CDATA[x]]>", "<A>", "</Name>", "json", "avro", "binary", "persistent", "1s", "-5m",
    "/a/b", "true", "\x00", "\ud800", "&#0;", "&#x110000;", "<!--", "]]>", "<?pi?>",
]  # fmt: skip
_NAME_RE = re.compile(r"^(\s*-?\s*)([A-Za-z_]+)(:\s*)(.*)$")
_ELEMENT_RE = re.compile(r"<([A-Za-z]+)>([^<]*)</\1>")


def mutate_topology(rng: random.Random, seeds: list[tuple[str, str]]) -> tuple[str, str]:
    """One mutated topology document: 1 to 3 structural or byte edits of a seed."""
    suffix, text = rng.choice(seeds)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.55:
            text = (_mutate_yaml if suffix == ".yaml" else _mutate_xml)(rng, text)
        elif roll < 0.75:
            text = _bytes(rng, text, [])
        elif roll < 0.85:
            text = _deep(rng, suffix, text)
        else:
            lines = text.splitlines(keepends=True) or [""]
            at = rng.randrange(len(lines))
            action = rng.randrange(3)
            if action == 0:
                del lines[at]
            elif action == 1:
                lines.insert(at, lines[at])
            else:
                lines.insert(at, lines.pop(rng.randrange(len(lines))))
            text = "".join(lines)
    return suffix, text


def _mutate_yaml(rng: random.Random, text: str) -> str:
    lines = text.splitlines(keepends=True)
    fields = [i for i, line in enumerate(lines) if _NAME_RE.match(line)]
    if not fields:
        return text
    at = rng.choice(fields)
    match = _NAME_RE.match(lines[at])
    assert match is not None
    action = rng.randrange(4)
    if action == 0:  # retype the value
        lines[at] = f"{match.group(1)}{match.group(2)}{match.group(3)}{rng.choice(_YAML_VALUES)}\n"
    elif action == 1:  # delete the field
        del lines[at]
    elif action == 2:  # duplicate the field
        lines.insert(at, lines[at])
    else:  # rename the field
        other = _NAME_RE.match(lines[rng.choice(fields)])
        assert other is not None
        lines[at] = f"{match.group(1)}{other.group(2)}{match.group(3)}{match.group(4)}\n"
    return "".join(lines)


def _mutate_xml(rng: random.Random, text: str) -> str:
    elements = list(_ELEMENT_RE.finditer(text))
    if not elements:
        return text
    element = rng.choice(elements)
    action = rng.randrange(4)
    if action == 0:
        replacement = f"<{element.group(1)}>{rng.choice(_XML_VALUES)}</{element.group(1)}>"
    elif action == 1:
        replacement = ""
    elif action == 2:
        replacement = element.group(0) * 2
    else:
        other = rng.choice(elements).group(1)
        replacement = f"<{other}>{element.group(2)}</{other}>"
    return text[: element.start()] + replacement + text[element.end() :]


def _deep(rng: random.Random, suffix: str, text: str) -> str:
    depth = rng.choice((50, 1000, 20000))
    if suffix == ".yaml":
        nested = "[" * depth + "1" + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "1"
        return text + f"\nextra: {nested}\n"
    if rng.random() < 0.5:
        entity = '<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa">' + "".join(
            f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(8)
        )
        return text.replace("<AMPSConfig>", entity + "]><AMPSConfig>&i;", 1)
    return text.replace("<SOW>", "<SOW>" + "<X>" * depth + "</X>" * depth, 1)


def fuzz_topologies(count: int, seed: int, directory: Path) -> Report:
    """``count`` mutated topology files written under ``directory`` and loaded."""
    rng, seeds = random.Random(seed), topology_seeds()
    schemas = directory / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    (schemas / "orders.avsc").write_text('{"type": "record", "name": "O", "fields": []}')

    def case(index: int) -> tuple[Path, str]:
        suffix, text = mutate_topology(rng, seeds)
        path = directory / f"case{index % 64}{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        return path, text

    return run(case, count, lambda case: load_topology(case[0]))
