"""Subscription fan-out in one query-service process, without broker or gRPC.

A read replica is fed changelog units by hand (the applier's path: ``Replica.apply``) at a
target rate while N subscriptions are registered with the subscription hub; a drain
thread empties the subscriptions' queues as a session's gRPC sender does (one
SharedSender: it is told which subscriptions have news). Reported per row:

* the rate the hub kept up with (changes dispatched per second against the rate fed);
* apply -> queued latency (the change is in every matching subscription's queue),
  p50/p99/max, sampled per unit;
* the applier's time per unit (``Replica.apply`` including its listeners), which is what
  matching inline on the applier thread would cost the live path.

Rows (issue 9): 10,000 subscriptions ``/symbol = 'S<i>' AND /price > <x>`` at 20,000
msg/s; 1,000 non-indexable ``/price * /qty > <x>`` at 5,000 msg/s; each with the
dispatcher thread and inline.

    PYTHONPATH=. python bench/subscribe.py --json-out bench/results/subscribe.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from processor import changelog
from processor.query.sow import QueryEngine
from processor.replica.replica import Replica
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import SubscribeRequest
from processor.subscriptions.subscription import SharedSender
from processor.topology.model import SowTopic, Topology
from tests.unit.log_records import LogRecord

QUOTES = SowTopic("QUOTES", keys=("/id",))
TOPOLOGY = Topology({"QUOTES": QUOTES})
UNIT = 100  # changes per unit (one processor transaction)


@dataclass
class Row:
    name: str
    subscriptions: int
    rate: int
    inline: bool
    fed_per_s: float = 0.0
    dispatched_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    apply_us_per_unit: float = 0.0
    dispatch_cpu_us_per_change: float = 0.0
    #: The whole process's CPU (feeding, applying, dispatching, draining) per change.
    process_cpu_us_per_change: float = 0.0
    load_average: float = 0.0
    delivered: int = 0
    undispatched: int = 0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(row: Row, seconds: float, filters: list[str] | list[SubscribeRequest], symbols: int) -> Row:
    """One row: the subscriptions of ``filters`` (filter texts, or whole requests)
    registered, then changes fed at the row's rate."""
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(
        TOPOLOGY,
        replica,
        QueryEngine(TOPOLOGY, replica),
        max_subscriptions=len(filters) + 1,
        inline=row.inline,
    )
    sender = SharedSender()
    for f in filters:
        request = f if isinstance(f, SubscribeRequest) else SubscribeRequest("QUOTES", filter=f)
        hub.subscribe(replace(request, max_backlog=1_000_000), sender)
    cpu_started = time.process_time()
    stop = threading.Event()
    delivered = [0]

    def drain() -> None:
        # As a session's sender does: wait for news, take from the subscriptions named.
        woken = sender.woken
        while not stop.is_set():
            with sender.ready:
                if not woken:
                    sender.ready.wait(0.05)
                named = list(woken)
                woken.clear()
            for sub in named:
                delivered[0] += len(sub.take(10_000, 0))
                if sub.has_backlog():
                    with sender.ready:
                        woken.append(sub)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    writer = changelog.EnvelopeWriter("QUOTES", "json", QUOTES.kafka_topic, 0)
    rng = random.Random(1)
    interval = UNIT / row.rate
    offset = 0
    latencies: list[float] = []
    apply_s: list[float] = []
    pending: list[tuple[int, float]] = []  # (dispatched count to reach, applied at)
    started = time.perf_counter()
    next_at = started
    units = int(seconds * row.rate / UNIT)
    for _ in range(units):
        if time.perf_counter() - started > 2 * seconds:
            break  # far behind its rate: the row did not keep up, stop feeding
        records = []
        for _ in range(UNIT):
            key = rng.randrange(100_000)
            message = {
                "id": key,
                "symbol": f"S{rng.randrange(symbols)}",
                "price": rng.uniform(0, 100),
                "qty": rng.randrange(1, 100),
                "bucket": key % 10,
            }
            raw = str(key).encode()
            value = writer.encode(offset, raw, orjson.dumps(message), 1, 1)
            records.append(LogRecord(QUOTES.changelog_topic, 0, offset, raw, value))
            offset += 1
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        before = time.perf_counter()
        replica.apply(records)
        after = time.perf_counter()
        apply_s.append(after - before)
        pending.append((offset, after))
        # Sample latency: how long until the hub had dispatched this unit.
        while pending and hub.dispatched >= pending[0][0]:
            latencies.append(time.perf_counter() - pending.pop(0)[1])
    fed = time.perf_counter() - started
    deadline = time.perf_counter() + 2 * seconds
    while pending and time.perf_counter() < deadline:
        while pending and hub.dispatched >= pending[0][0]:
            latencies.append(time.perf_counter() - pending.pop(0)[1])
        time.sleep(0.0005)
    total = time.perf_counter() - started
    row.process_cpu_us_per_change = (time.process_time() - cpu_started) / max(1, offset) * 1e6
    stop.set()
    drainer.join(5)
    hub.close()
    row.fed_per_s = offset / fed
    row.dispatched_per_s = hub.dispatched / total
    row.undispatched = offset - hub.dispatched
    # Units never dispatched count with the time they had waited at the end.
    latencies += [total - (applied_at - started) for _, applied_at in pending]
    row.p50_ms = _percentile(latencies, 0.5) * 1000
    row.p99_ms = _percentile(latencies, 0.99) * 1000
    row.max_ms = max(latencies) * 1000
    row.apply_us_per_unit = statistics.mean(apply_s) * 1e6
    row.dispatch_cpu_us_per_change = hub.dispatch_cpu_s / max(1, hub.dispatched) * 1e6
    row.load_average = round(os.getloadavg()[0], 2)
    row.delivered = delivered[0]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    indexed = [f"/symbol = 'S{i}' AND /price > {i % 100}" for i in range(10_000)]
    # /price * /qty spans 0..9900: each change matches about a quarter of these.
    scans = [f"/price * /qty > {i * 10}" for i in range(1_000)]
    rows = []
    for inline in (False, True):
        rows.append(run(Row("10k indexed", 10_000, 20_000, inline), args.seconds, indexed, 10_000))
        rows.append(run(Row("1k non-indexable", 1_000, 5_000, inline), args.seconds, scans, 10_000))
    header = (
        f"{'row':18} {'mode':10} {'fed/s':>8} {'disp/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} {'apply us/unit':>13} {'cpu us/chg':>10} {'delivered':>9} {'behind':>7} "
        f"{'load':>5}"
    )
    print(header)
    for r in rows:
        print(
            f"{r.name:18} {'inline' if r.inline else 'dispatcher':10} {r.fed_per_s:8.0f} "
            f"{r.dispatched_per_s:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f} {r.max_ms:7.2f} "
            f"{r.apply_us_per_unit:13.0f} {r.dispatch_cpu_us_per_change:10.1f} {r.delivered:9d} "
            f"{r.undispatched:7d} {r.load_average:5.2f}"
        )
    if args.json_out is not None:
        out: list[dict[str, Any]] = [r.__dict__ for r in rows]
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
