"""LIKE on RE2 against LIKE on the backtracking engine (issue 36).

What RE2 can run stays on RE2 (time linear in the text); the rest (backreferences,
lookaround, atomic groups, possessive quantifiers...) runs on the ``regex`` package with a
time budget per match (processor/expr/backtrack.py). This measures, for pairs of patterns
that match the same texts, one on each engine:

* **search**: matches per second of ``Regex.search`` / ``Backtracking.search`` on short
  values (an order id, 10 characters) and on 1 KB values;
* **filter scan**: records per second of ``Expression.scan`` (the SOW query hot path) for
  ``/id LIKE ...`` over 100,000 records;
* **a stopped match**: the time a catastrophic pattern takes on 100 KB (the budget).

Run: ``PYTHONPATH=. python bench/regex_engines.py [--records N] [--json-out FILE]`` (under
``flock /tmp/bench.lock``; about half a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from processor.errors import RegexBudgetError
from processor.expr import compile
from processor.expr.backtrack import Backtracking
from processor.expr.budget import budget_ms
from processor.expr.regex import Matcher, Regex, compile_regex

#: (name, RE2 pattern, a backtracking pattern matching the same texts)
PAIRS = [
    ("anchored id", r"^ORD-[0-9]{6}$", r"^ORD-(?=[0-9])[0-9]{6}$"),
    ("two sevens", r"7[7]", r"7(?=7)"),
    ("alternation", r"(?:buy|sell)-[A-Z]+", r"(?>buy|sell)-[A-Z]++"),
    ("repeated character", r"00|11|22|33|44|55|66|77|88|99", r"([0-9])\1"),
]
CATASTROPHIC = r"(a+)+\1b"


def _rate(regex: Matcher, texts: list[str], seconds: float = 1.0) -> float:
    """Searches per second over ``texts``, repeated for about ``seconds``."""
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for text in texts:
            regex.search(text)
        count += len(texts)
    return count / (time.perf_counter() - started)


def _scan_rate(pattern: str, ids: dict[int, str], rounds: int = 3) -> tuple[float, int]:
    """Records per second of a LIKE filter scan, and how many matched."""
    expression = compile(f"/id LIKE '{pattern}'")
    keys = list(ids)
    best, matched = 0.0, 0
    for _ in range(rounds):
        started = time.perf_counter()
        matched = len(expression.scan(keys, [ids]))
        best = max(best, len(keys) / (time.perf_counter() - started))
    return best, matched


def run(records: int) -> dict[str, Any]:
    rng = random.Random(36)
    short = [f"ORD-{rng.randrange(10**6):06d}" for _ in range(1000)]
    short += [f"{rng.choice(['buy', 'sell', 'hold'])}-XYZ" for _ in range(200)]
    long = ["".join(rng.choices("abcdef0123456789 -", k=1024)) for _ in range(50)]
    ids = {i: f"ORD-{rng.randrange(10**6):06d}" for i in range(records)}
    rows = []
    for name, linear, backtracking in PAIRS:
        on_re2, on_bt = compile_regex(linear), compile_regex(backtracking)
        assert isinstance(on_re2, Regex), name
        assert isinstance(on_bt, Backtracking), name
        for text in short + long:
            assert on_re2.search(text) is on_bt.search(text), (name, text)
        re2_scan, re2_matched = _scan_rate(linear, ids)
        bt_scan, bt_matched = _scan_rate(backtracking, ids)
        assert re2_matched == bt_matched, name
        row = {
            "pattern": name,
            "re2": linear,
            "backtracking": backtracking,
            "short_re2_per_s": _rate(on_re2, short),
            "short_backtracking_per_s": _rate(on_bt, short),
            "long_re2_per_s": _rate(on_re2, long),
            "long_backtracking_per_s": _rate(on_bt, long),
            "scan_re2_records_per_s": re2_scan,
            "scan_backtracking_records_per_s": bt_scan,
            "scan_matched": re2_matched,
        }
        rows.append(row)
        print(
            f"{name:20} short {row['short_re2_per_s']:>11,.0f}/s"
            f" vs {row['short_backtracking_per_s']:>11,.0f}/s"
            f"  1KB {row['long_re2_per_s']:>9,.0f}/s vs {row['long_backtracking_per_s']:>9,.0f}/s"
            f"  scan {re2_scan:>11,.0f} vs {bt_scan:>11,.0f} records/s",
            flush=True,
        )
    stopped = compile_regex(CATASTROPHIC)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        with contextlib.suppress(RegexBudgetError):
            stopped.search("a" * 100_000)
        times.append(time.perf_counter() - started)
    print(
        f"{CATASTROPHIC} on 100 KB: stopped after {min(times) * 1000:.1f}-{max(times) * 1000:.1f} "
        f"ms (budget {budget_ms()} ms)"
    )
    return {
        "records": records,
        "pairs": rows,
        "stopped_ms": [t * 1000 for t in times],
        "budget_ms": budget_ms(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    result = run(args.records)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
