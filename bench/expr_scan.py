"""Expression.scan throughput: the SOW query filter hot path.

Builds N records {price, qty, symbol} as memo-index columns (key -> value dicts, the shape
the query service passes) and times ``Expression.scan`` for typical selective filters,
against a naive baseline that decodes each JSON record and runs a Python predicate.

    python bench/expr_scan.py [--records 1000000] [--rounds 3]

Prints records/s (best of the rounds) per filter.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from processor.expr import FieldInput, compile

SYMBOLS = ["MSFT", "IBM", "AAPL", "GOOG", "AMZN", "ORCL", "INTC", "CSCO", "NVDA", "META"]

#: filter text -> the same predicate in plain Python (for the baseline and a check)
FILTERS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "/price > 990": lambda r: r["price"] > 990,
    "/symbol = 'MSFT'": lambda r: r["symbol"] == "MSFT",
    "/qty = 1 AND /price > 2": lambda r: r["qty"] == 1 and r["price"] > 2,
    "/symbol IN ('IBM', 'ORCL') AND /price BETWEEN 100 AND 200": (
        lambda r: r["symbol"] in ("IBM", "ORCL") and 100 <= r["price"] <= 200
    ),
}


def best_of(rounds: int, run: Callable[[], Any]) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--records", type=int, default=1_000_000)
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    rng = random.Random(7)
    n = args.records
    keys = [f"key-{i}".encode() for i in range(n)]
    records = [
        {"price": round(rng.uniform(0, 1000), 2), "qty": rng.randint(1, 100),
         "symbol": rng.choice(SYMBOLS)}
        for _ in range(n)
    ]
    columns = {name: {k: r[name] for k, r in zip(keys, records, strict=True)}
               for name in ("price", "qty", "symbol")}
    payloads = [orjson.dumps(r) for r in records]
    print(f"{n:,} records; best of {args.rounds} rounds")
    print(f"{'filter':58} {'matches':>9} {'scan rec/s':>14} {'baseline rec/s':>15} {'x':>6}")
    for text, check in FILTERS.items():
        expression = compile(text)
        inputs = [columns[str(i.steps[0])] for i in expression.inputs
                  if isinstance(i, FieldInput)]
        scan_s, matched = best_of(args.rounds, lambda e=expression, c=inputs: e.scan(keys, c))

        def baseline(check: Callable[[dict[str, Any]], bool] = check) -> list[bytes]:
            loads = orjson.loads
            return [k for k, p in zip(keys, payloads, strict=True) if check(loads(p))]

        base_s, expected = best_of(args.rounds, baseline)
        assert matched == expected, f"{text}: scan disagrees with the baseline"
        print(f"{text:58} {len(matched):>9,} {n / scan_s:>14,.0f} {n / base_s:>15,.0f} "
              f"{base_s / scan_s:>6.1f}")


if __name__ == "__main__":
    main()
