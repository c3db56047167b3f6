"""A queue's leases handed over before their commit (issue 34), under SIGKILLs of the
whole `sow serve` restarted at once: at-least-once leases reach the consumer before the
transaction that makes them commits (``SOW_QUEUE_HANDOVER``, the default), so a kill can
take a transaction whose leases were already delivered. What must hold: every published
message is received and acknowledged (the queue ends empty, nothing dead-lettered); a
message is received twice only if it was leased when a kill came (bounded by the
consumer's backlog per kill); nothing is received that was not published.

The heavy test kills `sow serve` 20 times under a publish stream; CI runs it once.
``python -m pytest -m heavy tests/integration/test_queue_handover_kills.py -s`` prints
the figures.
"""

from __future__ import annotations

import collections
import random
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from processor.client.sow_client import SowClient
from tests.integration.queue_helpers import Consumer
from tests.integration.serve_helpers import Serve

BACKLOG = 20
WAIT_S = 120.0


def _publisher(bootstrap: str, topic: str, count: int, done: threading.Event) -> None:
    """Publish ``count`` messages to the 4 partitions, ~2,000 a second."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for n in range(count):
        producer.produce(topic, orjson.dumps({"id": n}), partition=n % 4)
        if n % 100 == 99:
            producer.poll(0)
            time.sleep(0.05)
    assert producer.flush(60) == 0
    done.set()


def _run(bootstrap: str, unique: str, tmp_path: Path, kills: int, messages: int) -> None:
    (tmp_path / "topology.yaml").write_text(
        "topics:\n"
        f"  - {{name: jobs, sow: false, kafka_topic: {unique}.jobs, partitions: 4}}\n"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: jobs, "
        f"max_per_subscription_backlog: {BACKLOG}}}\n"
    )
    env = {"SOW_QUEUE_HANDOVER": "true"}  # the default, said outright
    received: list[int] = []
    published = threading.Event()
    publisher = None
    serve = Serve(tmp_path, bootstrap, unique, env)
    began = time.monotonic()
    try:
        for kill in range(kills + 1):
            serve.until_ready()
            client = SowClient(serve.address)
            consumer = Consumer(client, ack=True, max_backlog=BACKLOG)
            if publisher is None:
                publisher = threading.Thread(
                    target=_publisher,
                    args=(bootstrap, f"{unique}.jobs", messages, published),
                    daemon=True,
                )
                publisher.start()
            if kill < kills:
                time.sleep(random.uniform(0.5, 2.0))  # mid-stream: leases in flight
                serve.process.send_signal(signal.SIGKILL)  # the parent: its child follows
                serve.process.wait(timeout=30)
                received += consumer.ids()
                client.close()
                serve = Serve(tmp_path, bootstrap, unique, env)  # at once
                continue
            assert published.wait(WAIT_S), "the publisher did not finish"
            deadline = time.monotonic() + WAIT_S
            while len(set(received) | set(consumer.ids())) < messages:
                assert time.monotonic() < deadline, (
                    f"{messages - len(set(received) | set(consumer.ids()))} never received"
                )
                time.sleep(0.1)
            # every acknowledgement applied (once the restarted replica caught up)
            while client.query("Q", wait_for_catch_up=True)[0]:
                assert time.monotonic() < deadline, "the queue did not empty"
                time.sleep(0.1)
            consumer.quiet()
            received += consumer.ids()
            client.close()
    finally:
        serve.process.send_signal(signal.SIGINT)
        try:
            serve.process.wait(timeout=30)
        except Exception:
            serve.process.kill()
    counts = collections.Counter(received)
    twice = sum(n - 1 for n in counts.values() if n > 1)
    print(
        f"\nhand-over under {kills} SIGKILLs of sow serve: {messages:,} messages in "
        f"{time.monotonic() - began:.0f} s, {len(counts):,} received, {twice} twice "
        f"(bound {BACKLOG * kills})"
    )
    assert set(counts) == set(range(messages)), "a message lost, or one never published"
    assert twice <= BACKLOG * kills, f"{twice} received twice, more than the leases killed"


def test_handed_over_leases_survive_a_sigkill_of_sow_serve(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    _run(bootstrap, unique, tmp_path, kills=1, messages=2_000)


@pytest.mark.heavy
def test_handed_over_leases_survive_20_sigkills_of_sow_serve(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    _run(bootstrap, unique, tmp_path, kills=20, messages=40_000)
