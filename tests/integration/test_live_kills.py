"""Issue 34: delivery at apply time while the processor is killed, again and again.

`sow serve` keeps its query service, its replica and its subscribers while its processor
child is SIGKILLed under a publish stream (it starts a new child each time,
``SOW_PROCESSOR_RESTARTS``). The processor hands changes to the replica before its Kafka
commit, so a kill often lands between the two: the next child applies the same input
again. No subscriber may see a change the committed history (the changelog, read
committed) does not hold, miss one, or get one twice.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from processor import changelog
from processor.client.sow_client import SowClient
from processor.topology.loader import load_topology
from processor.wire import sow_pb2
from tests.integration.harness import read_topic, waited_for
from tests.integration.serve_helpers import Serve, children
from tests.integration.subscription_helpers import Collector

KEYS = 40


@dataclass
class Publisher:
    """Publishes ``{"id": k, "v": n}`` (n counting up) at about ``rate`` per second."""

    client: SowClient
    topic: str
    rate: float
    stop: threading.Event = field(default_factory=threading.Event)
    last: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        rng = random.Random(34)
        n = 0
        while not self.stop.is_set():
            n += 1
            key = rng.randrange(KEYS)
            try:
                self.client.publish(self.topic, orjson.dumps({"id": key, "v": n}), timeout=30)
            except Exception as exc:  # noted and checked: a lost publish fails the test
                self.errors.append(repr(exc))
                continue
            self.last[key] = n
            time.sleep(1 / self.rate)


@contextlib.contextmanager
def _started(thread: threading.Thread, stop: threading.Event) -> Iterator[None]:
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def _committed_versions(bootstrap: str, changelog_topic: str) -> dict[str, list[int]]:
    """Each key's versions, in the order the changelog (read committed) holds them."""
    versions: dict[str, list[int]] = defaultdict(list)
    for record in read_topic(bootstrap, changelog_topic, partitions=2, timeout_s=60):
        key = record.key()  # type: ignore[attr-defined]
        value = record.value()  # type: ignore[attr-defined]
        if key.startswith(changelog.CONTROL_PREFIX) or value is None:
            continue
        versions[key.decode()].append(orjson.loads(changelog.data_of(value))["v"])
    return versions


def _check(collector: Collector, committed: dict[str, list[int]]) -> int:
    """What one subscriber got: from its query result on, each key's versions exactly as
    committed (nothing missing, nothing twice, nothing the history lacks); returns the
    changes it received."""
    start = {r.sow_key: orjson.loads(r.data)["v"] for r in collector.query_records()}
    received: dict[str, list[int]] = defaultdict(list)
    changes = collector.changes()
    for change in changes:
        assert change.kind == sow_pb2.CHANGE_PUBLISH, change
        received[change.sow_key].append(orjson.loads(change.record.data)["v"])
    for key, history in committed.items():
        got = received.get(key, [])
        first = history.index(start[key]) + 1 if key in start else 0
        assert got == history[first:], (
            f"{key}: from {start.get(key)} the subscriber got {got}, committed {history[first:]}"
        )
    assert set(received) <= set(committed), "a change of a key the history does not hold"
    return len(changes)


def run_kills(
    workdir: Path,
    bootstrap: str,
    unique: str,
    kills: int,
    subscribers: int,
    env: dict[str, str] | None = None,
    killing: bool = True,
) -> None:
    topic = f"LIVE_{unique}".replace("-", "_")
    (workdir / "topology.yaml").write_text(
        f"topics:\n  - name: {topic}\n    message_type: json\n    key: /id\n    partitions: 2\n"
    )
    changelog_topic = load_topology(workdir / "topology.yaml").topics[topic].changelog_topic
    serve = Serve(
        workdir,
        bootstrap,
        unique,
        env={"SOW_PROCESSOR_RESTARTS": "100000", "SOW_LIVE_DELIVERY": "true", **(env or {})},
    )
    try:
        serve.until_ready()
        with SowClient(serve.address) as client:
            collectors = [Collector(client.sow_and_subscribe(topic)) for _ in range(subscribers)]
            publisher = Publisher(client, topic, rate=400)
            thread = threading.Thread(target=publisher.run, daemon=True)
            rng = random.Random(7)
            began = time.monotonic()
            with _started(thread, publisher.stop):
                for kill in range(kills):
                    time.sleep(rng.uniform(0.1, 1.0))
                    if not killing:
                        continue
                    child = serve.processor()
                    os.kill(child, signal.SIGKILL)
                    waited_for(
                        lambda old=child: any(p != old for p in _processors(serve)),
                        30,
                        f"a new processor after kill {kill + 1}",
                    )
                    if kill % 4 != 3:  # mostly killed while streaming, else while restoring
                        waited_for(lambda: _ready(serve), 60, f"ready after kill {kill + 1}")
                    assert serve.process.poll() is None, serve.output
                time.sleep(1.0)
            took = time.monotonic() - began
            assert not publisher.errors, publisher.errors[:5]

            def current() -> bool:
                records, _, _ = client.query(topic)
                found = {
                    int(r.sow_key and orjson.loads(r.data)["id"]): orjson.loads(r.data)["v"]
                    for r in records
                }
                return found == publisher.last

            waited_for(current, 60, "every acknowledged publish in the SOW")
            committed = _committed_versions(bootstrap, changelog_topic)

            def drained() -> bool:
                return all(
                    max((orjson.loads(c.record.data)["v"] for c in k.changes()), default=0)
                    >= max(publisher.last.values())
                    for k in collectors
                )

            waited_for(drained, 60, "the subscribers drained")
            time.sleep(0.5)
            errors = [line for line in serve.lines if " ERROR " in line and "exited" not in line]
            try:
                counts = [_check(collector, committed) for collector in collectors]
            except AssertionError:
                print("".join(errors[-20:]))
                raise
            total = sum(len(v) for v in committed.values())
            print(
                f"{kills} processor kills in {took:.0f}s, {total} changes committed, "
                f"{len(collectors)} subscribers got {min(counts)}-{max(counts)} changes each, "
                f"all exactly the committed history; the replica: {_live_figures(serve)}"
            )
            for collector in collectors:
                collector.stream.cancel()
    finally:
        serve.process.terminate()
        serve.process.wait(60)


def _metrics_address(serve: Serve) -> str:
    return next(line.split()[1] for line in serve.lines if "metrics:" in line)


def _ready(serve: Serve) -> bool:
    """Whether `sow serve` answers /readyz with 200 (its processor joined and restored)."""
    address = _metrics_address(serve).removesuffix("/metrics")
    try:
        with urllib.request.urlopen(f"{address}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _live_figures(serve: Serve) -> str:
    """The replica's live-unit counters, from `sow serve`'s /metrics."""
    with urllib.request.urlopen(_metrics_address(serve), timeout=10) as answer:
        text = answer.read().decode()
    return ", ".join(
        line
        for line in text.splitlines()
        if line.startswith(("sow_replica_live", "sow_processor_live"))
    )


def _processors(serve: Serve) -> list[int]:
    from tests.integration.serve_helpers import cmdline

    return [p for p in children(serve.process.pid) if b"processor.cli\0process" in cmdline(p)]


def test_live_delivery_survives_processor_kills(
    tmp_path: Path, bootstrap: str, unique: str
) -> None:
    """CI's smoke of the suite below: two kills, five subscribers."""
    run_kills(tmp_path, bootstrap, unique, kills=2, subscribers=5)


@pytest.mark.heavy
@pytest.mark.timeout(2400)
def test_live_delivery_survives_a_hundred_processor_kills(
    tmp_path: Path, bootstrap: str, unique: str
) -> None:
    """The issue's suite: 100 kills under a publish stream, 20 sow_and_subscribe
    subscribers."""
    run_kills(tmp_path, bootstrap, unique, kills=100, subscribers=20)
