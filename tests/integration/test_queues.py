"""Queues through gRPC on both backends (issue 22): one test per feature of seed 002's
Queue and ../shared/spec/amps-semantics.md section 6 (fairness models, strict and sublet
leasing, priority, barrier messages, each backlog limit, lease expiry, MaxDeliveries,
MaxCancels, RecoveryPoint, a queue over a regular expression), each driving real
consumers through the Queues service."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.app import start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.errors import ServiceError
from processor.queues.commands import Command, CommandKind
from processor.queues.services import SERVICE_TIMEOUT_MS
from processor.replica.snapshot import FILE_NAME
from processor.topology.yaml_loader import parse_yaml
from tests.conftest import MEMORY
from tests.integration.harness import read_topic, running_sow
from tests.integration.queue_helpers import Consumer

WAIT_S = 30.0


def _topology(unique: str, queue: str, topics: str = "") -> Any:
    """A plain topic ``orders`` (unique Kafka topic) and the queue ``Q`` over it, with
    ``queue``'s options (YAML flow mapping entries)."""
    topics = topics or f"  - {{name: orders, sow: false, kafka_topic: {unique}.orders}}\n"
    text = (
        f"topics:\n{topics}"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: orders{', ' + queue if queue else ''}}}\n"
    )
    return parse_yaml(text, "queues.yaml")


def _until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _publish(client: SowClient, *messages: dict[str, Any], topic: str = "orders") -> None:
    for message in messages:
        client.publish(topic, orjson.dumps(message))


def _queued(client: SowClient) -> list[int]:
    """The ids of the messages the queue holds (a sow query over the queue)."""
    records, _, _ = client.query("Q")
    return sorted(orjson.loads(r.data)["id"] for r in records)


def _states(client: SowClient) -> dict[int, tuple[bool, int]]:
    """Each queued message's id: whether it is leased, and how often it was delivered."""
    records, _, _ = client.query("Q")
    return {
        orjson.loads(r.data)["id"]: (r.queue_state.leased, r.queue_state.deliveries)
        for r in records
    }


def _quiet(consumers: list[Consumer], seconds: float = 0.5) -> None:
    """Wait until no consumer has received anything for ``seconds``."""
    counts = [-1]
    while True:
        now = [len(c.leases) for c in consumers]
        if now == counts:
            return
        counts = now
        time.sleep(seconds)


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.close()


def test_leases_flow_within_the_backlog_and_acks_remove_messages(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 100")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        _publish(client, *({"id": i} for i in range(5)))
        consumers.append(a := Consumer(client, max_backlog=3))
        _until(lambda: len(a.leases) == 3)
        _quiet([a])
        assert a.ids() == [0, 1, 2]  # oldest first, three: its backlog
        assert [lease.deliveries for lease in a.leases] == [1, 1, 1]
        assert _queued(client) == [0, 1, 2, 3, 4]  # a sow query browses the queue
        _until(
            lambda: (
                _states(client)
                == {0: (True, 1), 1: (True, 1), 2: (True, 1), 3: (False, 0), 4: (False, 0)}
            )
        )
        # An aggregated row is no one message: it has no queue state.
        rows, _, _ = client.query("Q", grouping="/id", projection="/id, COUNT(/id) AS /n")
        assert len(rows) == 5
        assert not any(row.HasField("queue_state") for row in rows)
        a.stream.ack(a.bookmarks()[:2])
        _until(lambda: len(a.leases) == 5)
        assert a.ids() == [0, 1, 2, 3, 4]
        _until(lambda: _queued(client) == [2, 3, 4])
        # sow_delete on the queue by bookmark is an acknowledgement too
        deleted = client.delete("Q", sow_keys=a.bookmarks()[2:])
        assert deleted.records_deleted == 3
        _until(lambda: _queued(client) == [])


def test_a_closed_consumer_returns_its_leases_to_the_others(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=10))
        _publish(client, *({"id": i} for i in range(3)))
        _until(lambda: len(a.leases) == 3)
        consumers.append(b := Consumer(client, max_backlog=10))
        a.close()
        _until(lambda: len(b.leases) == 3)
        assert b.ids() == [0, 1, 2]
        assert [lease.deliveries for lease in b.leases] == [2, 2, 2]


@pytest.mark.parametrize(
    ("fairness", "expected"),
    [
        ("fast", ["a", "a", "a", "b"]),  # the first subscription with room
        ("round-robin", ["a", "b", "a", "b"]),  # the next after the last chosen
        ("proportional", ["a", "b", "b", "a"]),  # the lowest held/backlog ratio
    ],
)
def test_each_fairness_model_chooses_as_amps_describes(
    backend: str,
    tmp_path: Path,
    unique: str,
    consumers: list[Consumer],
    fairness: str,
    expected: list[str],
) -> None:
    topology = _topology(unique, f"fairness_model: {fairness}, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=3))
        consumers.append(b := Consumer(client, max_backlog=4))
        _publish(client, *({"id": i} for i in range(4)))
        _until(lambda: len(a.leases) + len(b.leases) == 4)
        _quiet([a, b])
        owner = {i: "a" for i in a.ids()} | {i: "b" for i in b.ids()}
        assert [owner[i] for i in range(4)] == expected


@pytest.mark.parametrize("leasing", ["strict", "sublet"])
def test_strict_leasing_lets_only_the_holder_acknowledge(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer], leasing: str
) -> None:
    topology = _topology(unique, f"leasing: {leasing}, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=1))
        consumers.append(b := Consumer(client, max_backlog=1))
        _publish(client, {"id": 0})
        _until(lambda: len(a.leases) == 1)
        b.stream.ack(a.bookmarks())  # another subscription acknowledges a's lease
        client.queue_act("Q", "ack", bookmarks=a.bookmarks())  # and a client without one
        if leasing == "sublet":
            _until(lambda: _queued(client) == [])
            return
        time.sleep(1.0)
        assert _queued(client) == [0]  # refused: only its holder may
        a.stream.ack(a.bookmarks())
        _until(lambda: _queued(client) == [])


def test_priority_orders_the_queue_highest_first(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "priority: /p, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        _publish(
            client,
            {"id": 0, "p": 1},
            {"id": 1},
            {"id": 2, "p": 9},
            {"id": 3, "p": 5},
            {"id": 4, "p": 9},
        )
        _until(lambda: len(_queued(client)) == 5)
        consumers.append(a := Consumer(client, max_backlog=10))
        _until(lambda: len(a.leases) == 5)
        assert a.ids() == [2, 4, 3, 0, 1]  # by priority, ties by age, NULL last


def test_a_barrier_waits_for_earlier_messages_and_goes_to_every_subscriber(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(
        unique, "barrier_expression: /barrier = 1, max_per_subscription_backlog: 10"
    )
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=10))
        consumers.append(b := Consumer(client, max_backlog=10))
        _publish(client, {"id": 0}, {"id": 1, "barrier": 1}, {"id": 2})
        _until(lambda: len(a.leases) + len(b.leases) == 1)
        _quiet([a, b])
        holder = a if a.leases else b
        assert holder.ids() == [0]  # the barrier and what follows wait
        holder.stream.ack(holder.bookmarks())
        _until(lambda: 1 in a.ids() and 1 in b.ids() and 2 in a.ids() + b.ids())
        barriers = [lease for c in (a, b) for lease in c.leases if lease.barrier]
        assert [orjson.loads(lease.record.data)["id"] for lease in barriers] == [1, 1]
        _until(lambda: _queued(client) == [2])  # the barrier left the queue


def test_each_backlog_limit_holds(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 2, max_backlog: 3")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=5))  # capped by the queue's 2
        consumers.append(b := Consumer(client))  # max_backlog unset: 1
        consumers.append(c := Consumer(client, max_backlog=2))
        _publish(client, *({"id": i} for i in range(10)))
        _until(lambda: len(a.leases) + len(b.leases) + len(c.leases) == 3)
        _quiet([a, b, c])
        assert len(a.leases) <= 2
        assert len(b.leases) <= 1
        assert len(c.leases) <= 2
        assert len(a.leases) + len(b.leases) + len(c.leases) == 3  # MaxBacklog in all
        acked = a.bookmarks()
        a.stream.ack(acked)  # frees room in all: as many more are leased
        _until(lambda: len(a.leases) + len(b.leases) + len(c.leases) == 3 + len(acked))
        _quiet([a, b, c])
        assert len(a.leases) + len(b.leases) + len(c.leases) == 3 + len(acked)


def test_an_expired_lease_returns_its_message(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "lease_period: 1s, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=1))
        _publish(client, {"id": 0})
        _until(lambda: len(a.leases) == 1)
        first = a.leases[0]
        assert first.lease_deadline_ms > 0
        _until(lambda: len(a.leases) == 2, timeout_s=10)  # leased again after the deadline
        again = a.leases[1]
        assert (again.bookmark, again.deliveries) == (first.bookmark, 2)
        assert again.lease_deadline_ms >= first.lease_deadline_ms + 1000


def _dead_letter(backend: str, unique: str) -> dict[str, str]:
    [letter] = read_topic(backend, f"{unique}.dead-letter", expect=1, timeout_s=30)
    return {name: value.decode() for name, value in letter.headers()}  # type: ignore[attr-defined]


def test_a_publish_with_a_malformed_expiration_is_dead_lettered(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    """A queue reads its plain topic's publish headers as a SOW topic does: an expiration
    that is not a number of seconds is the record's failure, said on the dead letter."""
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        assert app.log_writer is not None
        expiring = [("sow.expiration", b"soon")]
        written = app.log_writer.submit([(f"{unique}.orders", None, b'{"id": 0}', 0, expiring)])
        assert written.wait(10)
        _until(lambda: app.processor is not None and app.processor.dead_lettered == 1)
        consumers.append(a := Consumer(client, max_backlog=10))
        _publish(client, {"id": 1})
        _until(lambda: a.ids() == [1])  # the queue goes on; the bad one was not enqueued
        if backend == MEMORY:
            return
        headers = _dead_letter(backend, unique)
        assert headers["sow.error.message"].startswith("header sow.expiration=b'soon' is not")


def test_max_deliveries_expires_a_message_to_the_dead_letter_topic(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    options = "lease_period: 500ms, max_deliveries: 2, max_per_subscription_backlog: 10"
    with running_sow(backend, _topology(unique, options), tmp_path, unique) as (app, client):
        consumers.append(a := Consumer(client, max_backlog=1))
        _publish(client, {"id": 0})
        _until(lambda: len(a.leases) == 2, timeout_s=10)
        _until(lambda: _queued(client) == [], timeout_s=10)
        time.sleep(1.0)
        assert len(a.leases) == 2  # not a third time
        assert app.processor is not None
        assert app.processor.dead_lettered == 1
        if backend == MEMORY:
            return
        headers = _dead_letter(backend, unique)
        assert headers["sow.error.reason"] == "queue-expired"
        assert "delivered 2 times (MaxDeliveries)" in headers["sow.error.message"]


def test_max_cancels_expires_a_message_to_the_dead_letter_topic(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    options = "max_cancels: 2, max_per_subscription_backlog: 10"
    with running_sow(backend, _topology(unique, options), tmp_path, unique) as (app, client):
        consumers.append(a := Consumer(client, max_backlog=1))
        _publish(client, {"id": 0})
        _until(lambda: len(a.leases) == 1)
        a.stream.cancel(a.bookmarks()[-1:])
        _until(lambda: len(a.leases) == 2)  # returned, and leased again
        assert a.leases[1].deliveries == 2
        a.stream.cancel(a.bookmarks()[-1:])
        _until(lambda: _queued(client) == [])
        assert app.processor is not None
        _until(lambda: app.processor is not None and app.processor.dead_lettered == 1)
        if backend == MEMORY:
            return
        headers = _dead_letter(backend, unique)
        assert "cancelled 2 times (MaxCancels)" in headers["sow.error.message"]


@pytest.mark.parametrize("point", ["epoch", "now"])
def test_the_recovery_point_decides_what_a_new_queue_takes(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer], point: str
) -> None:
    plain_only = parse_yaml(
        f"topics:\n  - {{name: orders, sow: false, kafka_topic: {unique}.orders}}\n", "t.yaml"
    )
    with running_sow(backend, plain_only, tmp_path / "before", unique) as (_, client):
        _publish(client, {"id": 0}, {"id": 1})
    topology = _topology(unique, f"recovery_point: {point}, max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path / "after", unique) as (_, client):
        _publish(client, {"id": 2})
        expected = [0, 1, 2] if point == "epoch" else [2]
        _until(lambda: _queued(client) == expected)
        consumers.append(a := Consumer(client, max_backlog=10))
        _until(lambda: len(a.leases) == len(expected))
        assert a.ids() == expected


def test_a_queue_over_a_regular_expression_takes_every_matching_topic(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topics = (
        f"  - {{name: orders_a, key: /id, kafka_topic: {unique}.orders_a}}\n"
        f"  - {{name: orders_b, key: /id, kafka_topic: {unique}.orders_b}}\n"
        f"  - {{name: other, key: /id, kafka_topic: {unique}.other}}\n"
    )
    text = (
        f"topics:\n{topics}queues:\n"
        "  - {name: Q, message_type: json, underlying: 'orders_.*', "
        "default_publish_target: orders_a, max_per_subscription_backlog: 10}\n"
    )
    topology = parse_yaml(text, "queues.yaml")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=10))
        _publish(client, {"id": 0}, topic="orders_a")
        _publish(client, {"id": 1}, topic="orders_b")
        _publish(client, {"id": 2}, topic="other")
        _publish(client, {"id": 3}, topic="Q")  # a publish to the queue: its target
        _until(lambda: len(a.leases) == 3)
        _quiet([a])
        assert sorted(zip(a.ids(), (lease.record.topic for lease in a.leases), strict=False)) == [
            (0, "orders_a"),
            (1, "orders_b"),
            (3, "orders_a"),
        ]


def test_leases_survive_a_processor_restart_and_a_stopped_service_returns_them(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    service = running_sow(backend, topology, tmp_path / "service", unique, processor=False)
    with service as (_, client):
        processing = running_sow(backend, topology, tmp_path / "p", unique, service=False)
        with processing as (app, _):
            consumers.append(a := Consumer(client, max_backlog=2))
            _publish(client, *({"id": i} for i in range(5)))
            _until(lambda: len(a.leases) == 2)
            a.stream.ack(a.bookmarks()[:1])
            _until(lambda: _queued(client) == [1, 2, 3, 4])
            _until(lambda: len(a.leases) == 3)  # its freed slot took the next
            assert app.processor is not None
            queue = app.processor.derived["Q"]
            figures = queue.figures()  # type: ignore[attr-defined]
            assert (figures.messages, figures.leased, figures.acked) == (4, 2, 1)
            assert list(figures.backlogs.values()) == [2]
        # Stopped, its partitions are closed: their counts stay, what they held goes.
        figures = queue.figures()  # type: ignore[attr-defined]
        assert (figures.messages, figures.leased, figures.subscriptions) == (0, 0, 0)
        assert (figures.delivered, figures.acked, figures.backlogs) == (3, 1, {})
        # The processor restarts: the subscription, its leases and the counts are kept.
        with running_sow(backend, topology, tmp_path / "p", unique, service=False) as (app, _):
            _quiet([a], 1.0)
            assert a.ids() == [0, 1, 2]  # nothing leased again
            a.stream.ack(a.bookmarks()[1:])
            _until(lambda: len(a.leases) == 5)
            assert a.ids() == [0, 1, 2, 3, 4]
            a.close()  # its two leases return at once
            consumers.append(b := Consumer(client, max_backlog=10))
            _until(lambda: len(b.leases) == 2)
            assert b.ids() == [3, 4]
            assert [lease.deliveries for lease in b.leases] == [2, 2]


def test_a_restarted_service_shows_the_message_states_it_had(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    """The replica's snapshot keeps the queue's message states: a restarted query service
    reads the changelogs from its snapshot's positions, after the state records."""
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    states = {0: (True, 1), 1: (True, 1), 2: (False, 0)}
    with running_sow(backend, topology, tmp_path / "p", unique, service=False):
        # Leased through another service, so they stay leased across the restart.
        other = running_sow(backend, topology, tmp_path / "other", unique, processor=False)
        with other as (_, consuming):
            consumers.append(a := Consumer(consuming, max_backlog=2))
            browsing = running_sow(backend, topology, tmp_path / "s", unique, processor=False)
            with browsing as (_, client):
                _publish(client, *({"id": i} for i in range(3)))
                _until(lambda: len(a.leases) == 2)
                _until(lambda: _states(client) == states)
            assert (tmp_path / "s" / "replica" / FILE_NAME).exists()
            again = running_sow(backend, topology, tmp_path / "s", unique, processor=False)
            with again as (_, client):
                assert _states(client) == states  # at once: from the snapshot


def _sow(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", *args, "--server", address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_sow_cli_consumes_and_acknowledges(backend: str, tmp_path: Path, unique: str) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        _publish(client, *({"id": i} for i in range(4)))
        done = _sow(app.grpc_address, "consume", "Q", "--max-backlog", "2", "--count", "2")
        assert done.returncode == 0, done.stderr
        lines = [orjson.loads(line) for line in done.stdout.splitlines()]
        assert lines[0] == {"registered": {"queue": "Q"}}
        assert [(line["kind"], line["data"], line["deliveries"]) for line in lines[1:]] == [
            ("lease", {"id": 0}, 1),
            ("lease", {"id": 1}, 1),
        ]
        # Not acknowledged: they return when it ends; acknowledged by the next one.
        done = _sow(app.grpc_address, "consume", "Q", "--ack", "--count", "2")
        assert done.returncode == 0, done.stderr
        leases = [orjson.loads(line) for line in done.stdout.splitlines()[1:]]
        assert [(lease["data"]["id"], lease["deliveries"]) for lease in leases] == [(0, 2), (1, 2)]
        _until(lambda: _queued(client) == [2, 3])
        bookmark = client.query("Q", filter="/id = 3")[0][0].sow_key
        done = _sow(app.grpc_address, "queue-ack", "Q", bookmark)
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout) == {"ack": 1, "commands": 1, "removed": 1}
        _until(lambda: _queued(client) == [2])
        done = _sow(app.grpc_address, "queue-ack", "Q", "--filter", "/id = 2")
        assert done.returncode == 0, done.stderr
        _until(lambda: _queued(client) == [])
        done = _sow(app.grpc_address, "queue-cancel", "Q", "not-a-bookmark")
        assert done.returncode != 0
        assert "is not a bookmark of queue Q" in done.stderr


def test_a_dead_services_subscriptions_are_disconnected_and_their_leases_return(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        # A subscription of a service that never sends a heartbeat (it died).
        queue = topology.topic("Q")
        command = Command(CommandKind.SUBSCRIBE, "gone/1", "gone", max_backlog=10)
        value, headers = command.encode()
        assert app.log_writer is not None
        written = app.log_writer.submit([(queue.repartition_topic, None, value, 0, headers)])
        assert written.wait(10)
        _publish(client, {"id": 0}, {"id": 1})
        _until(lambda: _queued(client) == [0, 1])
        consumers.append(a := Consumer(client, max_backlog=10))
        time.sleep(2.0)
        assert a.leases == []  # the dead service's subscription holds both
        began = time.monotonic()
        _until(lambda: len(a.leases) == 2, timeout_s=SERVICE_TIMEOUT_MS / 1000 + 15)
        assert time.monotonic() - began >= SERVICE_TIMEOUT_MS / 1000 - 5
        assert [lease.deliveries for lease in a.leases] == [2, 2]


def test_subscribing_to_a_queue_points_to_consume(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topics = f"  - {{name: orders, sow: false, kafka_topic: {unique}.orders}}\n"
    text = f"topics:\n{topics}queues:\n  - {{name: Q, message_type: json, underlying: orders}}\n"
    with running_sow(backend, parse_yaml(text, "q.yaml"), tmp_path, unique) as (_, client):
        with pytest.raises(ServiceError, match="Q is a queue: consume it"):
            list(client.subscribe("Q"))
        with client.subscribe("orders") as stream:  # its topic: every message, live
            first = next(iter(stream))
            assert first.WhichOneof("part") == "registered"


def test_messages_expire_by_the_queues_expiration_and_their_own(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    options = "expiration: 1s, max_per_subscription_backlog: 10"  # ExpirationModel default
    with running_sow(backend, _topology(unique, options), tmp_path, unique) as (app, client):
        client.publish("orders", b'{"id": 0}')  # the queue's: 1 s
        client.publish("orders", b'{"id": 1}', expiration=30)  # its own wins: 30 s
        _until(lambda: _queued(client) == [0, 1])
        _until(lambda: _queued(client) == [1], timeout_s=10)
        _until(lambda: app.processor is not None and app.processor.dead_lettered == 1)
        consumers.append(a := Consumer(client, max_backlog=10))
        _until(lambda: len(a.leases) == 1)
        assert a.ids() == [1]
        assert a.leases[0].record.expiration_ms > 0
        if backend == MEMORY:
            return
        headers = _dead_letter(backend, unique)
        assert "message expired" in headers["sow.error.message"]


def test_bad_input_is_dead_lettered_and_the_queue_goes_on(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        commands = topology.topic("Q").repartition_topic
        bad_filter, headers = Command(CommandKind.SUBSCRIBE, "x/1", "x", filter="/a >").encode()
        assert app.log_writer is not None
        written = app.log_writer.submit(
            [
                (commands, None, b"{}", 0, None),  # no command header
                (commands, None, bad_filter, 0, headers),
                (f"{unique}.orders", None, b"not json", 0, None),  # not a json message
            ]
        )
        assert written.wait(10)
        _until(lambda: app.processor is not None and app.processor.dead_lettered == 3)
        consumers.append(a := Consumer(client, max_backlog=10))
        _publish(client, {"id": 0})
        _until(lambda: a.ids() == [0])
        if backend == MEMORY:
            return
        letters = read_topic(backend, f"{unique}.dead-letter", expect=3, timeout_s=30)
        reasons = sorted(
            dict(letter.headers())["sow.error.message"].decode()[:40]  # type: ignore[attr-defined]
            for letter in letters
        )
        assert any(r.startswith("a record of a queue's command topic") for r in reasons)
        assert any(r.startswith("queue command filter '/a >'") for r in reasons)
        assert len(reasons) == 3


def test_queue_metrics_and_sow_status(bootstrap: str, tmp_path: Path, unique: str) -> None:
    from tests.integration.test_metrics import _samples

    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path,
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
        metrics_address="127.0.0.1:0",
    )
    app = start(settings, topology=_topology(unique, "max_per_subscription_backlog: 10"))
    client = SowClient(app.grpc_address)
    consumer: Consumer | None = None
    try:
        assert app.observer is not None
        address = app.observer.address
        consumer = Consumer(client, max_backlog=2)
        _publish(client, *({"id": i} for i in range(3)))
        _until(lambda: len(consumer.leases) == 2)  # type: ignore[union-attr]
        consumer.stream.ack(consumer.bookmarks()[:1])
        _until(lambda: _samples(address).get(("sow_queue_acked_total", (("queue", "Q"),))) == 1)
        samples = _samples(address)
        figures = {
            name: samples[(name, (("queue", "Q"),))]
            for name in ("sow_queue_messages", "sow_queue_leased", "sow_queue_delivered_total")
        }
        assert figures == {
            "sow_queue_messages": 2,
            "sow_queue_leased": 2,
            "sow_queue_delivered_total": 3,
        }
        backlogs = [v for (n, _), v in samples.items() if n == "sow_queue_subscriber_backlog"]
        assert backlogs == [2]
        status = subprocess.run(
            [sys.executable, "-m", "processor.cli", "status", "--metrics-address", address],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "queue messages {queue=Q}" in status.stdout
        assert "queue acknowledgements {queue=Q}" in status.stdout
    finally:
        if consumer is not None:
            consumer.close()
        client.close()
        app.stop()


def test_target_queue_depth_keeps_only_the_oldest_messages_active(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    options = "target_queue_depth: 1000, max_per_subscription_backlog: 2000"
    with running_sow(backend, _topology(unique, options), tmp_path, unique) as (_, client):
        for reply in client.publish_stream(
            "orders", (orjson.dumps({"id": i}) for i in range(1005)), batch_size=200
        ):
            assert not reply.error_code, reply.error
        consumers.append(a := Consumer(client, max_backlog=2000))
        _until(lambda: len(a.leases) == 1000)
        _quiet([a])
        assert a.ids() == list(range(1000))  # the oldest 1000 only
        a.stream.ack(a.bookmarks()[:5])
        _until(lambda: len(a.leases) == 1005)
        assert a.ids()[1000:] == [1000, 1001, 1002, 1003, 1004]


def test_a_live_service_taken_for_dead_subscribes_again(
    backend: str,
    tmp_path: Path,
    unique: str,
    consumers: list[Consumer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The service sends one heartbeat, at start, then none: its partitions take it for
    # dead (as after a broker outage) while its consumer is alive.
    monkeypatch.setattr("processor.subscriptions.queues.HEARTBEAT_S", 3600.0)
    topology = _topology(unique, "max_per_subscription_backlog: 10")
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        consumers.append(a := Consumer(client, max_backlog=10))
        _publish(client, {"id": 0})
        _until(lambda: a.ids() == [0])
        time.sleep(SERVICE_TIMEOUT_MS / 1000 + 3)  # ended, and subscribed again
        _publish(client, {"id": 1})
        _until(lambda: 1 in a.ids(), timeout_s=15)
        assert a.ids()[-1] == 1


def test_at_least_once_leases_are_handed_over_before_their_commit_and_come_once(
    backend: str, tmp_path: Path, unique: str, consumers: list[Consumer]
) -> None:
    """By default the processor hands a queue's at-least-once leases to the service beside
    it before their commit (issue 34; SOW_QUEUE_HANDOVER, with SOW_LIVE_DELIVERY off);
    their committed copies are dropped, so each message comes once."""
    topology = _topology(unique, "max_per_subscription_backlog: 40")
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        consumers.append(a := Consumer(client, ack=True, max_backlog=40))
        _publish(client, *({"id": i} for i in range(200)))
        _until(lambda: len(a.leases) >= 200)
        _until(lambda: _queued(client) == [])
        _quiet([a])
        assert sorted(a.ids()) == list(range(200))  # each once: no twin delivered
        assert app.processor is not None
        assert app.processor.live is not None
        assert app.processor.live.handed > 0  # they went over before their commits
        assert app.processor.live.topics == []  # and no SOW topic's changes
        assert app.queues is not None
        _until(lambda: app.queues is not None and app.queues.twins_awaited == 0)
