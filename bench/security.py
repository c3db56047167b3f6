"""What security costs a user (issue 32): streaming publish and 1-record query latency
with TLS + bearer-token logon + an entitlement filter (read and write), against the same
service in plaintext without logon, in one run.

The secured client's channel is the product's (``ClientSecurity``: TLS, and the token
added to each call's metadata). Both services run in this process on the memory log (no
broker: what is measured is the service's own path, where TLS, the token check and the
filters are; a broker adds the same latency to both). The entitlement filter matches
every record (``/desk IN (...)`` over every desk), so both services return the same
records and the difference is the cost of evaluating it. Each service:

1. is filled with ``--records`` orders through PublishStream (columns form, batches of
   ``--batch``, up to 16 unacknowledged): messages per second and each batch's ack
   latency (p50/p99), from sending the batch to its ack;
2. answers ``--queries`` 1-record queries (``/orderId = n``, the key index) one after
   another: p50/p99 latency.

Run: ``PYTHONPATH=. python bench/security.py [--records 50000] [--queries 3000]
[--json-out bench/results/security.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from processor.app import Application
from processor.client.credentials import ClientSecurity
from processor.testing import start_memory
from processor.topology.yaml_loader import parse_yaml
from processor.wire import sow_pb2, sow_pb2_grpc
from tests.pki import issue, make_ca

TOPOLOGY = "topics:\n  - {name: orders, key: [/orderId], partitions: 2}\n"
DESKS = ("FX", "RATES", "EQ", "CREDIT")
EVERY_DESK = "/desk IN ('FX', 'RATES', 'EQ', 'CREDIT')"
ENTITLEMENTS = f"""\
principals:
  trader:
    logon: true
    read: [{{topic: orders, filter: "{EVERY_DESK}"}}]
    write: [{{topic: orders, filter: "{EVERY_DESK}"}}]
"""
WINDOW = 16


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def _figures(values_s: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values_s) * 1000, 3),
        "p99_ms": round(_percentile(values_s, 0.99) * 1000, 3),
    }


class Secured:
    """A CA, the service's certificate, a token key and the entitlements, in a folder."""

    def __init__(self, directory: Path) -> None:
        ca = make_ca("bench-ca", directory / "pki")
        self.ca = ca.cert
        self.server = issue(ca, "query-service", server=True, ips=["127.0.0.1"], dns=["localhost"])
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.public = directory / "issuer.pem"
        self.public.write_bytes(
            self.key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        self.entitlements = directory / "entitlements.yaml"
        self.entitlements.write_text(ENTITLEMENTS)

    def settings(self) -> dict[str, Any]:
        return {
            "grpc_tls_cert": self.server.chain,
            "grpc_tls_key": self.server.key,
            "auth": "token",
            "jwt_key": self.public,
            "jwt_audience": "kafka-sow",
            "entitlements": self.entitlements,
        }

    def channel(self, address: str) -> grpc.Channel:
        token = jwt.encode(
            {"sub": "trader", "aud": "kafka-sow", "exp": int(time.time()) + 3600},
            self.key,
            algorithm="ES256",
        )
        # The product's client channel (what SowClient and the sow commands use).
        return ClientSecurity(ca=self.ca, token=token).channel(address)


def _started(state_dir: Path, **settings: Any) -> Application:
    app = start_memory(parse_yaml(TOPOLOGY, "bench.yaml"), state_dir, **settings)
    deadline = time.monotonic() + 60
    while app.readiness() is not None:
        if time.monotonic() > deadline:
            raise SystemExit(f"not ready: {app.readiness()}")
        time.sleep(0.02)
    return app


def publish(stub: Any, records: int, batch: int) -> dict[str, Any]:
    """Stream ``records`` orders in batches; msgs/s and per-batch ack latency."""
    sent: dict[int, float] = {}
    slots = threading.Semaphore(WINDOW)
    rng = random.Random(7)

    def batches() -> Iterator[Any]:
        for number, start in enumerate(range(0, records, batch)):
            slots.acquire()
            data = [
                orjson.dumps({"orderId": n, "desk": rng.choice(DESKS), "qty": n % 100})
                for n in range(start, min(start + batch, records))
            ]
            sent[number] = time.perf_counter()
            last = start + batch >= records  # its ack waits until every order is applied
            ack = sow_pb2.PROCESSED if last else sow_pb2.PERSISTED
            yield sow_pb2.PublishBatch(batch_id=number, topic="orders", data=data, ack=ack)

    latencies: list[float] = []
    refused = 0
    started = time.perf_counter()
    for ack in stub.PublishStream(batches(), timeout=600):
        latencies.append(time.perf_counter() - sent[ack.batch_id])
        refused += len(ack.refused)
        slots.release()
    elapsed = time.perf_counter() - started
    if refused:
        raise SystemExit(f"{refused} messages refused: the bench's entitlement is wrong")
    return {"msgs_per_s": round(records / elapsed), "batch_ack": _figures(latencies)}


def query(stub: Any, records: int, queries: int) -> dict[str, Any]:
    """``queries`` 1-record queries by key, one after another: p50/p99."""
    rng = random.Random(11)
    latencies: list[float] = []
    for _ in range(queries):
        wanted = rng.randrange(records)
        request = sow_pb2.SowQueryRequest(topic="orders", filter=f"/orderId = {wanted}")
        began = time.perf_counter()
        found = sum(
            len(reply.batch.records)
            for reply in stub.SowQuery(request, timeout=30)
            if reply.HasField("batch")
        )
        latencies.append(time.perf_counter() - began)
        if found != 1:
            raise SystemExit(f"query for order {wanted} found {found} records")
    return _figures(latencies)


def measure(name: str, app: Application, channel: grpc.Channel, args: Any) -> dict[str, Any]:
    stub = sow_pb2_grpc.SowStub(channel)
    for _ in range(50):  # warm up: connection, handshake, token cache, code paths
        list(stub.SowQuery(sow_pb2.SowQueryRequest(topic="orders", filter="1=0"), timeout=30))
    figures = {"publish": publish(stub, args.records, args.batch)}
    query(stub, args.records, min(200, args.queries))  # warm the index path
    figures["query_1_record"] = query(stub, args.records, args.queries)
    print(f"{name}: {json.dumps(figures)}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--queries", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"plaintext": [], "secured": []}
    with tempfile.TemporaryDirectory(prefix="sow-bench-security-") as folder:
        root = Path(folder)
        secured = Secured(root)
        for round_ in range(args.rounds):
            for name in ("plaintext", "secured"):
                state = root / f"{name}-{round_}"
                if name == "plaintext":
                    app = _started(state)
                    channel = grpc.insecure_channel(app.grpc_address)
                else:
                    app = _started(state, **secured.settings())
                    channel = secured.channel(app.grpc_address)
                try:
                    results[name].append(
                        measure(f"{name} (round {round_ + 1})", app, channel, args)
                    )
                finally:
                    channel.close()
                    app.stop()
    summary = {}
    for name, runs in results.items():
        summary[name] = {
            "publish_msgs_per_s": statistics.median(r["publish"]["msgs_per_s"] for r in runs),
            "publish_batch_ack_p99_ms": statistics.median(
                r["publish"]["batch_ack"]["p99_ms"] for r in runs
            ),
            "query_p50_ms": statistics.median(r["query_1_record"]["p50_ms"] for r in runs),
            "query_p99_ms": statistics.median(r["query_1_record"]["p99_ms"] for r in runs),
        }
    plain, safe = summary["plaintext"], summary["secured"]
    summary["ratios"] = {key: round(safe[key] / plain[key], 2) for key in plain if plain[key]}
    print(json.dumps(summary, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": results, "summary": summary}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
