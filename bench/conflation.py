"""Conflated subscriptions under a fast stream, in one query-service process.

A read replica is fed changelog units by hand (``Replica.apply``, the applier's path; no
broker or gRPC) at a target rate over K keys while subscriptions with a conflation
interval are registered with the hub; a drain thread empties their queues as a
session's sender does, noting when each delivery was taken. Reported per row:

* the rate fed and the rate the hub dispatched;
* deliveries, and deliveries per key per interval (the most in any one key's run, and
  the shortest gap between two deliveries of one key, which must not be below the
  interval);
* whether the last delivery of every key is its last published value;
* the dispatcher's CPU per change and the load average.

Acceptance row (issue 10): a 1 s interval under 20,000 msg/s.

    PYTHONPATH=. python bench/conflation.py --json-out bench/results/conflation.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
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
    rate: int
    keys: int
    interval: str
    subscriptions: int
    fed_per_s: float = 0.0
    dispatched_per_s: float = 0.0
    delivered: int = 0
    most_per_key_per_interval: float = 0.0
    shortest_gap_s: float = 0.0
    last_values_latest: bool = False
    dispatch_cpu_us_per_change: float = 0.0
    load_average: float = 0.0


def run(row: Row, seconds: float) -> Row:
    replica = Replica(TOPOLOGY, tail=lambda: None)  # type: ignore[arg-type, return-value]
    hub = SubscriptionHub(TOPOLOGY, replica, QueryEngine(TOPOLOGY, replica))
    sender = SharedSender()
    subscriptions = [
        hub.subscribe(
            SubscribeRequest("QUOTES", conflation=row.interval, max_backlog=1_000_000), sender
        )
        for _ in range(row.subscriptions)
    ]
    stop = threading.Event()
    #: subscription number -> key -> [(taken at, n)]
    seen: dict[int, dict[bytes, list[tuple[float, int]]]] = {s.number: {} for s in subscriptions}

    def drain() -> None:
        woken = sender.woken
        while not stop.is_set():
            with sender.ready:
                if not woken:
                    sender.ready.wait(0.05)
                named = list(woken)
                woken.clear()
            for sub in named:
                now = time.perf_counter()
                for delivery in sub.take(10_000, 0):
                    n = orjson.loads(changelog.data_of(delivery.envelope))["n"]
                    seen[sub.number].setdefault(delivery.sow_key, []).append((now, n))
                if sub.has_backlog():
                    with sender.ready:
                        woken.append(sub)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    writer = changelog.EnvelopeWriter("QUOTES", "json", QUOTES.kafka_topic, 0)
    rng = random.Random(1)
    latest: dict[bytes, int] = {}
    offset = 0
    started = time.perf_counter()
    next_at = started
    for _ in range(int(seconds * row.rate / UNIT)):
        if time.perf_counter() - started > 2 * seconds:
            break  # far behind its rate: stop feeding
        records = []
        for _ in range(UNIT):
            raw = str(rng.randrange(row.keys)).encode()
            message = {"id": raw.decode(), "n": offset, "price": rng.uniform(0, 100)}
            value = writer.encode(offset, raw, orjson.dumps(message), 1, 1)
            records.append(LogRecord(QUOTES.changelog_topic, 0, offset, raw, value))
            latest[raw] = offset
            offset += 1
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += UNIT / row.rate
        replica.apply(records)
    fed = time.perf_counter() - started
    interval_s = _seconds(row.interval)
    deadline = time.perf_counter() + 2 * seconds + 2 * interval_s
    while hub.dispatched < offset and time.perf_counter() < deadline:
        time.sleep(0.01)
    time.sleep(interval_s + 0.5)  # the last held values are released
    total = time.perf_counter() - started
    stop.set()
    drainer.join(5)
    hub.close()
    row.fed_per_s = round(offset / fed)
    row.dispatched_per_s = round(hub.dispatched / total)
    runs = [deliveries for by_key in seen.values() for deliveries in by_key.values()]
    row.delivered = sum(len(r) for r in runs)
    gaps = [b[0] - a[0] for r in runs for a, b in itertools.pairwise(r)]
    row.shortest_gap_s = round(min(gaps), 3) if gaps else 0.0
    row.most_per_key_per_interval = round(
        max(len(r) / max(1.0, (r[-1][0] - r[0][0]) / interval_s + 1) for r in runs), 2
    )
    row.last_values_latest = all(
        by_key.get(key, [(0, -1)])[-1][1] == n
        for by_key in seen.values()
        for key, n in latest.items()
    )
    row.dispatch_cpu_us_per_change = round(hub.dispatch_cpu_s / max(1, hub.dispatched) * 1e6, 1)
    row.load_average = round(os.getloadavg()[0], 2)
    return row


def _seconds(interval: str) -> float:
    from processor.subscriptions.conflation import parse_interval

    value = parse_interval(interval)
    assert value is not None
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    rows = [
        Row("1 s interval, 20k msg/s, 1,000 keys", 20_000, 1_000, "1s", 1),
        Row("1 s interval, 20k msg/s, 1,000 keys, 10 subscriptions", 20_000, 1_000, "1s", 10),
        Row("250 ms interval, 20k msg/s, 100 keys", 20_000, 100, "250ms", 1),
    ]
    results: list[dict[str, Any]] = []
    for row in rows:
        print(f"{row.name}...", file=sys.stderr)
        results.append(asdict(run(row, args.seconds)))
        print(json.dumps(results[-1]), file=sys.stderr)
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
