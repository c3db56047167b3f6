"""The queue partition's decision logic alone (processor/queues/ledger.py, issue 22): how
many messages per second one ledger leases and takes acknowledgements for, with 1, 4 and
16 subscribers (backlog 10 each), draining a queue that holds ``--depth`` messages while
new ones arrive at the tail. No broker, no store: the ceiling the queue engine's CPU
leaves for everything else on the path (the Kafka transactions, the gRPC streams).

Each round: the queue holds ``--depth`` messages; then, ``--messages`` times, one message
is enqueued at the tail and the subscribers acknowledge everything they hold whenever
every one of them is full (as clients acking in batches do). ``messages/s`` = messages
leased and acknowledged / seconds.

    PYTHONPATH=. python bench/queue_ledger.py --json-out bench/results/queue_ledger.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from processor.queues.ledger import Change, Ledger, QueueMessage, QueueRules
from processor.topology.queue_spec import FairnessModel

STARTED = time.perf_counter()


def say(text: str) -> None:
    sys.stderr.write(f"[queue_ledger {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def one_round(subscribers: int, depth: int, messages: int, fairness: FairnessModel) -> float:
    """Messages leased and acknowledged per second in one round."""
    ledger = Ledger(
        QueueRules(fairness=fairness, lease_period_ms=30_000, max_per_subscription_backlog=10)
    )
    for n in range(depth):
        ledger.enqueue(QueueMessage(b"%d" % n, n), 0)
    names = [f"s{i}" for i in range(subscribers)]
    done = 0
    started = time.perf_counter()
    for name in names:
        ledger.subscribe(name, 0, max_backlog=10)
    for n in range(depth, depth + messages):
        ledger.enqueue(QueueMessage(b"%d" % n, n), n)
        if all(ledger.subscription(s).free <= 0 for s in names):  # type: ignore[union-attr]
            for name in names:
                held = list(ledger.subscription(name).held)  # type: ignore[union-attr]
                acked = ledger.acknowledge(held, name, n)
                done += sum(1 for outcome in acked if outcome.change is Change.ACKED)
    seconds = time.perf_counter() - started
    return done / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for fairness in (FairnessModel.PROPORTIONAL, FairnessModel.ROUND_ROBIN):
        for subscribers in (1, 4, 16):
            rates = [
                one_round(subscribers, args.depth, args.messages, fairness)
                for _ in range(args.rounds)
            ]
            row = {
                "fairness": fairness.value,
                "subscribers": subscribers,
                "depth": args.depth,
                "messages_per_s": round(statistics.median(rates)),
                "rounds": [round(rate) for rate in rates],
            }
            say(f"{row}")
            rows.append(row)
    print(
        "| fairness | subscribers | queue depth | leased and acknowledged msgs/s (median) "
        "| rounds |"
    )
    print("|---|---:|---:|---:|---|")
    for row in rows:
        rounds = ", ".join(f"{rate:,}" for rate in row["rounds"])
        print(
            f"| {row['fairness']} | {row['subscribers']} | {row['depth']:,} | "
            f"{row['messages_per_s']:,} | {rounds} |"
        )
    wall = time.perf_counter() - STARTED
    say(f"wall time from process start {wall:.1f}s")
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"rows": rows, "wall_seconds": wall}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
