"""A queue over a topic of several partitions is one queue (issue 31 item 2): its priority
order, barriers and backlogs hold across the input's partitions, as a queue over one
partition's do (one ledger, fed through relays: processor/queues/relay.py)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import SowClient
from processor.topology.yaml_loader import parse_yaml
from tests.integration.harness import running_sow
from tests.integration.queue_helpers import Consumer
from tests.unit.test_queue_ledger import expected_order

WAIT_S = 30.0


def _topology(unique: str, options: str) -> Any:
    """Plain topics ``one`` (1 partition) and ``four`` (4), queue Q1 over ``one`` and Q4
    over ``four``, both with ``options``."""
    return parse_yaml(
        "topics:\n"
        f"  - {{name: one, sow: false, kafka_topic: {unique}.one, partitions: 1}}\n"
        f"  - {{name: four, sow: false, kafka_topic: {unique}.four, partitions: 4}}\n"
        "queues:\n"
        f"  - {{name: Q1, message_type: json, underlying: one, {options}}}\n"
        f"  - {{name: Q4, message_type: json, underlying: four, {options}}}\n",
        "queues.yaml",
    )


def _until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _held(client: SowClient, queue: str) -> int:
    records, _, _ = client.query(queue)
    return len(records)


@pytest.mark.parametrize(
    "option", ["priority: /p", "barrier_expression: /barrier = 1"], ids=["priority", "barrier"]
)
def test_a_4_partition_queue_delivers_in_a_1_partition_queues_order(
    backend: str, tmp_path: Path, unique: str, option: str
) -> None:
    """A random stream (priorities with ties and NULLs, or barriers) published one message
    at a time; one consumer acknowledging each lease takes each queue: the same order, the
    model's (tests/unit/test_queue_ledger.py: barriers split the stream, priority within;
    a queue has one or the other, as in AMPS)."""
    chance = random.Random(31)
    barriers = option.startswith("barrier")
    stream = [
        (None, chance.random() < 0.2) if barriers else (chance.choice([None, 0, 1, 2, 3]), False)
        for _ in range(30)
    ]
    with running_sow(backend, _topology(unique, option), tmp_path, unique) as (_, client):
        for n, (priority, barrier) in enumerate(stream):
            message = orjson.dumps({"id": n, "p": priority, "barrier": int(barrier)})
            client.publish("one", message)
            client.publish("four", message)
            # held by both before the next is published: "earlier" is well defined
            _until(lambda n=n: _held(client, "Q1") == n + 1 and _held(client, "Q4") == n + 1)
        expected = [int(b.decode()[1:]) for b in expected_order(stream)]
        for queue in ("Q1", "Q4"):
            consumer = Consumer(client, queue, ack=True)
            _until(lambda c=consumer: len(c.leases) == len(stream))
            assert consumer.quiet() == expected, queue
            consumer.close()
        _until(lambda: _held(client, "Q4") == 0)


def test_backlogs_of_a_4_partition_queue_hold_for_the_whole_queue(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """A subscriber's max_backlog and the queue's MaxBacklog are per queue (they were per
    partition: a subscriber of 4 partitions could hold 4 times its backlog)."""
    topology = _topology(unique, "max_per_subscription_backlog: 10, max_backlog: 3")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        for n in range(12):
            client.publish("four", orjson.dumps({"id": n}))
        _until(lambda: _held(client, "Q4") == 12)
        a = Consumer(client, "Q4", max_backlog=2)
        assert len(a.quiet()) == 2
        b = Consumer(client, "Q4", max_backlog=10)
        assert len(b.quiet()) == 1  # MaxBacklog 3 in all
        a.stream.ack(a.bookmarks())  # two leave: two more go out, 3 outstanding again
        _until(lambda: len(a.leases) + len(b.leases) == 5)
        assert len(a.quiet()) + len(b.quiet()) == 5
        assert len(set(a.ids() + b.ids())) == 5
        assert len(a.leases) <= 4
        for consumer in (a, b):
            consumer.close()
