"""A query service killed under many subscribers (issue 12, acceptance point 3).

One processor (in this process, through the harness; its own gRPC service takes the
publishes and serves no subscriber) and two query services as separate OS processes
(``python -m processor.cli query-service``) on the session's broker. Every subscriber
has its own :class:`FailoverClient` over both query services, most of them with the
doomed one first. A publisher writes updates carrying per-key sequence numbers; the
doomed query service is SIGKILLed mid-stream; every subscriber must see, per key,
exactly 1..N in order: no gap and no duplicate across the failover.

A subscription delivers every change (no conflation: no ``conflation`` option is set),
so the sequence numbers a subscriber sees are the publishes, not a sample of them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from processor.service.failover import FailoverClient
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)

#: Keys the publisher updates round robin, each with sequence numbers 1..N.
KEYS = 20


@dataclass
class Subscriber:
    """One subscriber: its client, what it received and how it ended."""

    number: int
    client: FailoverClient
    bookmark: str
    seqs: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    received: int = 0
    error: BaseException | None = None
    registered: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def _query_service(bootstrap: str, topology: Path, state_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "query-service",
            "--bootstrap-servers",
            bootstrap,
            "--topology",
            str(topology),
            "--state-dir",
            str(state_dir),
            "--grpc-address",
            "127.0.0.1:0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _grpc_address(service: subprocess.Popen[str], timeout_s: float = 90) -> str:
    """The address a query service prints once it is ready (its ``gRPC:`` line)."""
    assert service.stderr is not None
    lines: list[str] = []
    found: list[str] = []

    def read() -> None:
        assert service.stderr is not None
        for line in service.stderr:
            lines.append(line)
            if "gRPC:" in line:
                found.append(line.split()[1])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert found, f"the query service printed no gRPC address in {timeout_s:g}s:\n" + "".join(lines)
    return found[0]


@pytest.fixture
def query_services(
    bootstrap: str, tmp_path: Path, unique: str
) -> Iterator[tuple[SowTopic, subprocess.Popen[str], str, str]]:
    """The namespaced topic, the doomed query service and both addresses (doomed first)."""
    topic = namespaced(unique, QUOTES).topics["QUOTES"]
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "topics:\n"
        f"  - name: {topic.name}\n"
        "    key: [/id]\n"
        f"    kafka_topic: {topic.kafka_topic}\n"
        f"    partitions: {topic.partitions}\n"
    )
    doomed = _query_service(bootstrap, topology, tmp_path / "doomed")
    survivor = _query_service(bootstrap, topology, tmp_path / "survivor")
    try:
        yield topic, doomed, _grpc_address(doomed), _grpc_address(survivor)
    finally:
        for service in (doomed, survivor):
            if service.poll() is None:
                service.kill()
            service.wait(10)
            if service.stderr is not None:
                service.stderr.close()


def _subscribe(subscriber: Subscriber, total: int) -> None:
    """Receive ``total`` changes, discarding each before taking the next (thread body)."""
    try:
        subscription = subscriber.client.subscribe(
            "QUOTES", f"quotes-{subscriber.number}", bookmark=subscriber.bookmark
        )
        with subscription:
            for message in subscription:
                part = message.WhichOneof("part")
                if part == "registered":
                    subscriber.registered.set()
                if part != "change":
                    continue
                record = json.loads(message.change.record.data)
                subscriber.seqs[record["id"]].append(record["seq"])
                subscriber.received += 1
                subscriber.client.discard(message)
                if subscriber.received == total:
                    return
    except BaseException as error:  # reported by the test, with the subscriber's number
        subscriber.error = error
    finally:
        subscriber.registered.set()
        subscriber.done.set()


def _kill_under_subscribers(
    bootstrap: str,
    tmp_path: Path,
    unique: str,
    services: tuple[SowTopic, subprocess.Popen[str], str, str],
    count: int,
    per_key: int,
    rate: float,
) -> None:
    topic, doomed, doomed_address, survivor_address = services
    total = KEYS * per_key
    # Four in five start on the doomed service; half start "now", half at the whole log.
    subscribers = [
        Subscriber(
            n,
            FailoverClient(
                [doomed_address, survivor_address] if n % 5 else [survivor_address, doomed_address],
                f"subscriber-{n}",
                pause_s=0.1,
            ),
            bookmark="" if n % 2 else "0",
        )
        for n in range(count)
    ]
    threads = [
        threading.Thread(target=_subscribe, args=(s, total), daemon=True) for s in subscribers
    ]
    with running_sow(bootstrap, namespaced(unique, topic), tmp_path / "processor", unique) as (
        _,
        publisher,
    ):
        for thread in threads:
            thread.start()
        for subscriber in subscribers:
            assert subscriber.registered.wait(60), f"subscriber {subscriber.number} not registered"
            assert subscriber.error is None, (subscriber.number, subscriber.error)
        on_doomed = [s for s in subscribers if s.client.address == doomed_address]
        assert len(on_doomed) == count * 4 // 5
        published = threading.Event()

        def publish() -> None:
            began = time.monotonic()
            for n in range(total):
                data = json.dumps({"id": n % KEYS, "seq": n // KEYS + 1}).encode()
                publisher.publish("QUOTES", data)
                time.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
            published.set()

        publishing = threading.Thread(target=publish, daemon=True)
        publishing.start()
        # The kill lands once every subscriber on the doomed service is a third through.
        deadline = time.monotonic() + 60
        while min(s.received for s in on_doomed) < total // 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        doomed.send_signal(signal.SIGKILL)
        received_at_kill = {s.number: s.received for s in on_doomed}
        assert not published.is_set(), "the publisher was done before the kill"
        publishing.join(60)
        deadline = time.monotonic() + 60
        for subscriber in subscribers:
            subscriber.done.wait(max(0.0, deadline - time.monotonic()))
        late = [(s.number, s.received) for s in subscribers if not s.done.is_set()]
        for subscriber in subscribers:
            subscriber.client.close()  # ends the late ones' streams (they are reported)
        for thread in threads:
            thread.join(10)
    assert doomed.wait(10) == -signal.SIGKILL
    assert late == [], f"subscribers (number, changes received) still waiting: {late}"
    errors = [(s.number, repr(s.error)) for s in subscribers if s.error is not None]
    assert errors == []
    # The kill landed mid-stream for the subscribers on the doomed service, and every one
    # of them (and only they) moved to the survivor.
    assert all(0 < received < total for received in received_at_kill.values()), received_at_kill
    assert {s.number for s in subscribers if s.client.failovers} == {s.number for s in on_doomed}
    assert all(s.client.address == survivor_address for s in subscribers)
    expected = list(range(1, per_key + 1))
    wrong = {
        s.number: {key: seqs for key, seqs in s.seqs.items() if seqs != expected}
        for s in subscribers
        if s.seqs != dict.fromkeys(range(KEYS), expected)
    }
    assert wrong == {}, f"subscribers whose per-key sequence numbers are not 1..{per_key}"


def test_twenty_subscribers_resume_on_the_other_query_service_with_no_gap_and_no_duplicate(
    bootstrap: str,
    tmp_path: Path,
    unique: str,
    query_services: tuple[SowTopic, subprocess.Popen[str], str, str],
) -> None:
    _kill_under_subscribers(
        bootstrap, tmp_path, unique, query_services, count=20, per_key=30, rate=100
    )


@pytest.mark.heavy
def test_a_hundred_subscribers_resume_on_the_other_query_service_with_no_gap_and_no_duplicate(
    bootstrap: str,
    tmp_path: Path,
    unique: str,
    query_services: tuple[SowTopic, subprocess.Popen[str], str, str],
) -> None:
    _kill_under_subscribers(
        bootstrap, tmp_path, unique, query_services, count=100, per_key=30, rate=100
    )
