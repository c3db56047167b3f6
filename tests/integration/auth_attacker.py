"""Bad logons against a secured service, from a process of their own (test_auth_fuzz.py):
``python -m tests.integration.auth_attacker ADDRESS CA_PEM COUNT EXPIRED_TOKEN``.

Cycles through kinds of bad credentials (wrong passwords of many users, a known user's
wrong password, garbage bearer tokens, an expired token, tokens signed by another key,
none at all) on a few threads, each a 1-record query; prints one JSON line: how many calls
got each status code, and how long the calls took."""

from __future__ import annotations

import base64
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import jwt
import orjson
from cryptography.hazmat.primitives.asymmetric import ec

from processor.wire import sow_pb2, sow_pb2_grpc

THREADS = 4


def _basic(user: str, password: str) -> tuple[tuple[str, str], ...]:
    text = base64.b64encode(f"{user}:{password}".encode()).decode()
    return (("authorization", f"Basic {text}"),)


def _credentials(
    n: int, expired: str, forged: str, rng: random.Random
) -> tuple[tuple[str, str], ...]:
    kind = n % 6
    if kind == 0:
        return _basic(f"user{rng.randrange(500)}", f"guess{n}")
    if kind == 1:
        return _basic("alice", f"guess{n}")
    if kind == 2:
        garbage = base64.urlsafe_b64encode(rng.randbytes(rng.randrange(1, 300))).decode()
        return (("authorization", f"Bearer {garbage}.{garbage}.{garbage}"),)
    if kind == 3:
        return (("authorization", f"Bearer {expired}"),)
    if kind == 4:
        return (("authorization", f"Bearer {forged}"),)
    return ()


def main() -> None:
    address, ca, count, expired = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    forged = jwt.encode(
        {"sub": "alice", "aud": "kafka-sow", "exp": int(time.time()) + 600},
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
    )
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    codes: Counter[str] = Counter()
    lock = threading.Lock()
    began = time.monotonic()

    def attack(offset: int) -> None:
        rng = random.Random(offset)
        with grpc.secure_channel(address, credentials) as channel:
            stub = sow_pb2_grpc.SowStub(channel)  # type: ignore[no-untyped-call]
            request = sow_pb2.SowQueryRequest(topic="orders", filter="/orderId = 1")
            for n in range(offset, count, THREADS):
                metadata = _credentials(n, expired, forged, rng)
                try:
                    records = sum(
                        len(r.batch.records)
                        for r in stub.SowQuery(request, metadata=metadata, timeout=30)
                    )
                    code = "OK" if not records else "OK-WITH-RECORDS"
                except grpc.RpcError as exc:
                    code = exc.code().name
                with lock:
                    codes[code] += 1

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    sys.stdout.write(orjson.dumps({"codes": codes, "seconds": elapsed}).decode() + "\n")


if __name__ == "__main__":
    main()
