"""What the metrics interceptor adds to each unary gRPC call: one counter increment and
one histogram observation (processor/observability/metrics.py RequestMetrics), timed in a loop.

    PYTHONPATH=. python bench/metrics_overhead.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import time

from prometheus_client import CollectorRegistry

from processor.observability.metrics import RequestMetrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    metrics = RequestMetrics(CollectorRegistry())
    began = time.perf_counter()
    for _ in range(args.calls):
        metrics.requests.labels("Sow/Publish", "OK").inc()
        metrics.latency.labels("Sow/Publish").observe(0.001)
    per_call_us = (time.perf_counter() - began) / args.calls * 1e6
    print(f"{per_call_us:.2f} µs per unary call ({args.calls:,} calls)")


if __name__ == "__main__":
    main()
