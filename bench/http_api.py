"""The console's HTTP API beside gRPC, on one service (issue 35): what a user of each
transport pays for the same answers.

* query latency: the same ``sow`` query (10 records of 10,000 by filter; all 10,000)
  over ``POST /api/query`` and over gRPC (``SowClient.query``, text form), p50/p99;
* subscription throughput: a sow_and_subscribe over Server-Sent Events
  (``GET /api/subscribe``) and over gRPC, each receiving the same burst of updates
  (changes/s from the first publish to the last change received);
* the wall time from process start to the service answering.

Runs on the broker-free driver (``processor.testing``: the memory log), since neither
transport touches the log for these. Usage:

    PYTHONPATH=. python bench/http_api.py --json-out bench/results/http_api.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

STARTED = time.monotonic()

from processor.client.sow_client import SowClient  # noqa: E402  (timed from the start)
from processor.testing import start_memory  # noqa: E402
from processor.topology.model import SowTopic, Topology  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed(calls: int, call: Any) -> dict[str, float]:
    spent = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        spent.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": round(percentile(spent, 0.5), 3),
        "p99_ms": round(percentile(spent, 0.99), 3),
        "mean_ms": round(statistics.fmean(spent), 3),
    }


def http_query(base: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(base + "/api/query", json.dumps(body).encode(), method="POST")
    answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    return len(answer["records"])


def sse_changes(
    base: str, topic: str, wanted: int, ready: threading.Event, done: list[float]
) -> None:
    url = f"{base}/api/subscribe?topic={topic}&sow=1"
    seen = 0
    with urllib.request.urlopen(url, timeout=120) as stream:
        kind = ""
        for raw in stream:
            line = raw.decode()
            if line.startswith("event: "):
                kind = line[7:].strip()
                if kind == "group_end":
                    ready.set()
            elif line.startswith("data: ") and kind == "changes":
                seen += len(json.loads(line[6:]))
                if seen >= wanted:
                    done.append(time.perf_counter())
                    return


def grpc_changes(
    client: SowClient, topic: str, wanted: int, ready: threading.Event, done: list[float]
) -> None:
    seen = 0
    with client.sow_and_subscribe(topic, text_form=True) as stream:
        for message in stream:
            part = message.WhichOneof("part")
            if part == "group_end":
                ready.set()
            elif part == "change":
                seen += 1
            elif part == "changes":
                seen += len(message.changes.changes)
            if seen >= wanted:
                done.append(time.perf_counter())
                return


def burst(client: SowClient, topic: str, count: int, receive: Any) -> float:
    """Changes/s a subscriber of ``receive`` gets for a burst of ``count`` updates."""
    ready, done = threading.Event(), []
    listener = threading.Thread(target=receive, args=(topic, count, ready, done), daemon=True)
    listener.start()
    assert ready.wait(30), "the subscription did not open"
    started = time.perf_counter()
    batch = [json.dumps({"id": i % 1000, "n": i}).encode() for i in range(count)]
    for _acked in client.publish_stream(topic, batch):
        pass
    listener.join(120)
    assert done, "the subscriber did not receive every change"
    return count / (done[0] - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    topology = Topology(
        {
            "ITEMS": SowTopic("ITEMS", keys=("/id",), partitions=2),
            "TICKS": SowTopic("TICKS", keys=("/id",), partitions=2),
        }
    )
    with tempfile.TemporaryDirectory() as state:
        app = start_memory(topology, Path(state), metrics_address="127.0.0.1:0")
        while app.readiness() is not None:
            time.sleep(0.01)
        ready_s = time.monotonic() - STARTED
        assert app.observer is not None
        base = f"http://{app.observer.address}"
        client = SowClient(app.grpc_address)
        items = [
            json.dumps({"id": i, "group": i % 1000, "price": i * 0.5}).encode()
            for i in range(args.records)
        ]
        for _ in client.publish_stream("ITEMS", items, ack="processed"):
            pass
        few = {"filter": "/group = 7"}
        results: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d"),
            "broker": "memory log (processor.testing)",
            "records": args.records,
            "ready_from_process_start_s": round(ready_s, 2),
        }
        queries: dict[str, Any] = {}
        for name, body in (("10 of 10,000 by filter", few), ("all 10,000", {})):
            assert http_query(base, {"topic": "ITEMS", **body}) == client_count(client, body)
            queries[name] = {
                "http": timed(
                    args.queries if body else 30,
                    lambda b=body: http_query(base, {"topic": "ITEMS", **b}),
                ),
                "grpc": timed(
                    args.queries if body else 30,
                    lambda b=body: client.query("ITEMS", text_form=True, **b),
                ),
            }
        results["queries"] = queries
        results["subscription_changes_per_s"] = {
            "http_sse": round(
                burst(client, "TICKS", args.changes, lambda *a: sse_changes(base, *a))
            ),
            "grpc": round(
                burst(client, "TICKS", args.changes, lambda *a: grpc_changes(client, *a))
            ),
        }
        client.close()
        app.stop()
    print(json.dumps(results, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")


def client_count(client: SowClient, body: dict[str, Any]) -> int:
    return len(client.query("ITEMS", text_form=True, **body)[0])


if __name__ == "__main__":
    main()
