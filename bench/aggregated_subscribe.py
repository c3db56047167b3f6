"""Aggregated subscriptions (issue 36): 1,000 subscribers sharing 10 aggregations at
5,000 msg/s, in one query-service process, without broker or gRPC.

The harness is bench/subscribe.py's (a read replica fed changelog units by hand at a
target rate, a drain thread emptying the subscriptions' queues as a session's sender
does). Rows, each run in this process one after the other:

* ``aggregated``: 1,000 subscribers, 100 per aggregation; the 10 aggregations differ in
  their filter (``/bucket = <i>``: each change concerns one of them) and group by
  ``/symbol`` (100 symbols) with COUNT, SUM, AVG, MIN and MAX;
* ``plain, same filters``: the peer a user has without aggregated subscriptions: the same
  1,000 subscribers as ordinary subscriptions to the same filters, every change sent to
  100 of them (to aggregate in the client).

Reported: the rate kept up with, apply -> dispatched latency, the dispatcher's CPU per
change and the whole process's CPU per change (feeding and draining included), and the
messages delivered.

    PYTHONPATH=. python bench/aggregated_subscribe.py \
        --json-out bench/results/aggregated_subscribe.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from bench.subscribe import Row, run
from processor.subscriptions.model import SubscribeRequest

PROJECTION = (
    "/symbol, COUNT(/id) AS /n, SUM(/qty) AS /qty, AVG(/price) AS /avg, "
    "MIN(/price) AS /lo, MAX(/price) AS /hi"
)
AGGREGATIONS = 10
SUBSCRIBERS = 1_000
RATE = 5_000
SYMBOLS = 100


def requests(aggregated: bool) -> list[SubscribeRequest]:
    out = []
    for i in range(SUBSCRIBERS):
        bucket = i % AGGREGATIONS
        if aggregated:
            out.append(
                SubscribeRequest(
                    "QUOTES",
                    filter=f"/bucket = {bucket}",
                    projection=PROJECTION,
                    grouping="/symbol",
                    oof=True,
                )
            )
        else:
            out.append(SubscribeRequest("QUOTES", filter=f"/bucket = {bucket}"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    rows = [
        run(Row("aggregated", SUBSCRIBERS, RATE, False), args.seconds, requests(True), SYMBOLS),
        run(
            Row("plain, same filters", SUBSCRIBERS, RATE, False),
            args.seconds,
            requests(False),
            SYMBOLS,
        ),
    ]
    print(
        f"{'row':20} {'fed/s':>8} {'disp/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'disp us/chg':>11} {'proc us/chg':>11} {'delivered':>10} {'behind':>7} {'load':>5}"
    )
    for r in rows:
        print(
            f"{r.name:20} {r.fed_per_s:8.0f} {r.dispatched_per_s:8.0f} {r.p50_ms:7.2f} "
            f"{r.p99_ms:7.2f} {r.max_ms:7.2f} {r.dispatch_cpu_us_per_change:11.1f} "
            f"{r.process_cpu_us_per_change:11.1f} {r.delivered:10d} {r.undispatched:7d} "
            f"{r.load_average:5.2f}"
        )
    if args.json_out is not None:
        out: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
            "broker": "none (replica fed in process)",
            "seconds": args.seconds,
            "rows": {r.name: r.__dict__ for r in rows},
        }
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
