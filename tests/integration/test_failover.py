"""The failover client and its bookmark stores, against real query services.

Query services and subscribing clients that are killed run as their own OS processes
(SIGKILL); the processor and a second query service run in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from processor.client.bookmark_store import SowBookmarkStore, parse_vector
from processor.client.failover import FailoverClient
from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/id",))
BOOKMARKS = SowTopic("BOOKMARKS", keys=("/clientName", "/subId"))

#: A subscriber that prints each change, discards it, and says so.
SUBSCRIBER = """
import json, sys
from processor.client.bookmark_store import SowBookmarkStore
from processor.client.sow_client import SowClient
from processor.client.failover import FailoverClient
address, store_topic, topic = sys.argv[1:4]
store = SowBookmarkStore(SowClient(address), store_topic, "tracked")
with FailoverClient([address], "tracked", store) as client:
    print("bookmark", store.most_recent("sub-1"), flush=True)
    for message in client.subscribe(topic, "sub-1"):
        if message.WhichOneof("part") != "change":
            continue
        position = message.change.changelog_position
        print("got", position.offset, message.change.record.data.decode(), flush=True)
        client.discard(message)
        print("done", position.offset, flush=True)
"""


def _write_topology(path: Path, *topics: SowTopic) -> Path:
    lines = ["topics:"]
    for topic in topics:
        keys = ", ".join(topic.keys)
        lines += [
            f"  - name: {topic.name}",
            f"    key: [{keys}]",
            f"    kafka_topic: {topic.kafka_topic}",
            f"    partitions: {topic.partitions}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _line(stream: IO[str], timeout_s: float) -> str:
    """The next line of a child's output (fails the test if none comes in time)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert lines, f"the child printed nothing within {timeout_s:g}s"
    assert lines[0], "the child ended its output (it exited)"
    return lines[0].rstrip("\n")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def _publisher(
    client: SowClient, keys: int, count: int, rate: float
) -> tuple[threading.Thread, dict[int, int]]:
    """Publish ``count`` updates round robin over ``keys`` ids, each with the next
    per-key sequence number, at about ``rate``/s (in a thread)."""
    sent: dict[int, int] = defaultdict(int)

    def run() -> None:
        start = time.monotonic()
        for n in range(count):
            key = n % keys
            sent[key] += 1
            client.publish("ORDERS", json.dumps({"id": key, "seq": sent[key]}).encode())
            time.sleep(max(0.0, start + (n + 1) / rate - time.monotonic()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, sent


def test_a_subscription_fails_over_to_another_query_service_with_no_gap_and_no_duplicate(
    bootstrap: str, tmp_path: Path, unique: str, children: list[subprocess.Popen[str]]
) -> None:
    topology = namespaced(unique, ORDERS)
    topology_file = _write_topology(tmp_path / "topology.yaml", *topology.topics.values())
    with running_sow(bootstrap, topology, tmp_path / "main", unique) as (app, publisher):
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "query-service",
                "--bootstrap-servers",
                bootstrap,
                "--topology",
                str(topology_file),
                "--state-dir",
                str(tmp_path / "doomed"),
                "--grpc-address",
                "127.0.0.1:0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(doomed)
        assert doomed.stderr is not None
        banner = ""
        while "gRPC:" not in banner:
            banner = _line(doomed.stderr, 60)
        doomed_address = banner.split()[1]
        received: dict[int, list[int]] = defaultdict(list)
        with FailoverClient(
            [doomed_address, app.grpc_address], "failover-test", pause_s=0.1
        ) as client:
            subscription = client.subscribe("ORDERS", "orders-1", bookmark="")
            messages = iter(subscription)
            assert next(messages).WhichOneof("part") == "registered"
            thread, sent = _publisher(publisher, keys=10, count=1500, rate=500)
            total = 0
            for message in messages:
                if message.WhichOneof("part") != "change":
                    continue
                record = json.loads(message.change.record.data)
                received[record["id"]].append(record["seq"])
                client.discard(message)
                total += 1
                if total == 400:
                    doomed.send_signal(signal.SIGKILL)
                if total == 1500:
                    break
            thread.join(30)
            assert client.failovers >= 1
            assert client.address == app.grpc_address
            subscription.cancel()
    assert {key: seqs for key, seqs in received.items()} == {
        key: list(range(1, count + 1)) for key, count in sent.items()
    }


def test_a_killed_subscriber_resumes_right_after_its_last_discarded_message(
    bootstrap: str, tmp_path: Path, unique: str, children: list[subprocess.Popen[str]]
) -> None:
    topology = namespaced(unique, ORDERS, BOOKMARKS)
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, publisher):
        for n in range(300):
            publisher.publish("ORDERS", json.dumps({"id": n % 7, "seq": n}).encode())
        args = (app.grpc_address, "BOOKMARKS", "ORDERS")
        first = _spawn(SUBSCRIBER, *args)
        children.append(first)
        assert first.stdout is not None
        assert _line(first.stdout, 60) == "bookmark 0"  # a new sub_id replays the whole log
        done: list[int] = []
        got: list[tuple[int, int]] = []
        while len(done) < 120:
            kind, offset, *rest = _line(first.stdout, 30).split(" ", 2)
            if kind == "done":
                done.append(int(offset))
            else:
                got.append((int(offset), json.loads(rest[0])["seq"]))
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # What it printed before it died (it went on while the lines above were read).
        for line in first.stdout.read().splitlines():
            kind, offset, *rest = line.split(" ", 2)
            if kind == "got":
                got.append((int(offset), json.loads(rest[0])["seq"]))
            elif kind == "done":
                done.append(int(offset))
        for n in range(300, 450):
            publisher.publish("ORDERS", json.dumps({"id": n % 7, "seq": n}).encode())

        second = _spawn(SUBSCRIBER, *args)
        children.append(second)
        assert second.stdout is not None
        kind, bookmark = _line(second.stdout, 60).split(" ", 1)
        assert kind == "bookmark"
        last_discarded = max(parse_vector(bookmark).values())
        # The kill may land between a discard and its "done" line: the store is the truth.
        assert last_discarded in (done[-1], *(offset for offset, _ in got if offset > done[-1]))
        resumed: list[tuple[int, int]] = []
        while not resumed or resumed[-1][1] < 449:
            kind, offset, *rest = _line(second.stdout, 30).split(" ", 2)
            if kind == "got":
                resumed.append((int(offset), json.loads(rest[0])["seq"]))
    discarded = [seq for offset, seq in got if offset <= last_discarded]
    # The first process's discards (in order, so every message up to the last one), then
    # the second process's messages: every publish once, in order; the restart starts
    # right after the last discarded message.
    assert resumed[0][0] > last_discarded
    assert discarded + [seq for _, seq in resumed] == list(range(450))


def test_a_sow_bookmark_store_loads_what_it_saved(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, BOOKMARKS)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        store = SowBookmarkStore(client, "BOOKMARKS", "it's-me")
        store.discard("a", "t", 0, 5)
        store.discard("a", "t", 1, 2)
        store.discard("b", "u", 0, 9)
        other = SowBookmarkStore(client, "BOOKMARKS", "someone-else")
        other.discard("a", "t", 0, 1)
        deadline = time.monotonic() + 20
        while True:
            again = SowBookmarkStore(client, "BOOKMARKS", "it's-me")
            if again.most_recent("b") != "0" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert parse_vector(again.most_recent("a")) == {("t", 0): 5, ("t", 1): 2}
        assert parse_vector(again.most_recent("b")) == {("u", 0): 9}
        assert again.most_recent("c") == "0"


def test_an_explicit_bookmark_is_not_overridden_by_what_the_store_had(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """A store that already holds a later position for the sub_id (an earlier run) must
    not make a subscription from the whole log skip what it asked for."""
    from processor.client.bookmark_store import MemoryBookmarkStore

    topology = namespaced(unique, ORDERS)
    changelog = topology.topic("ORDERS").changelog_topic
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, publisher):
        for n in range(3):
            reply = publisher.publish("ORDERS", json.dumps({"id": n, "seq": 1}).encode())
        publisher.query("ORDERS", min_position=[reply.position])
        store = MemoryBookmarkStore()
        for partition in range(topology.topic("ORDERS").partitions):
            store.discard("again", changelog, partition, 1_000)  # stale, far ahead
        with FailoverClient([app.grpc_address], "stale", store) as client:
            subscription = client.subscribe("ORDERS", "again", bookmark="0")
            ids = []
            for message in subscription:
                if message.WhichOneof("part") == "change":
                    ids.append(json.loads(message.change.record.data)["id"])
                    client.discard(message)
                if message.WhichOneof("part") == "completed" or len(ids) == 3:
                    break
            subscription.cancel()
    assert sorted(ids) == [0, 1, 2]
    assert max(parse_vector(store.most_recent("again")).values()) < 1_000
