"""Views under SIGKILL (issue 21, heavy): seed 002's View examples stay exact while the
processor is killed 50 times during a random stream of inserts, updates and deletes on
their underlying topics, and a view rebuilt from its changelog equals the live one.

The processor runs as ``sow process`` in a child process (killed with SIGKILL at random
points, and through ``SOW_CRASH_AT`` between its commit steps); the query service
(gateway, read replica, gRPC) runs in the test's process and is never killed, so the
stream goes on through every kill (its publishes do; a delete waits until a processor has
applied it). Every few kills the stream pauses and every view must
equal its recomputation in plain Python (:class:`tests.integration.test_views.Underlying`):
a later update of a member could otherwise hide a member lost in a crash.

Run with ``python -m pytest -m heavy tests/integration/test_view_faults.py``
(``SOW_VIEW_FAULT_KILLS`` and ``SOW_VIEW_FAULT_SEED`` change the kills and the seed).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from processor.app import Application, start
from processor.client.sow_client import ServiceError, SowClient
from processor.config import Settings
from processor.engine.commit import CRASH_ENV
from processor.state.opener import store_path
from processor.topology import load_topology
from processor.topology.model import Topology
from tests.conftest import StartOwnBroker
from tests.integration.harness import store_contents
from tests.integration.test_crash_recovery import (
    Model,
    ProcessorProcess,
    assert_changelog_exactly_once,
    reap,
)
from tests.integration.test_views import SEED, Underlying, wait_until_exact

__all__ = ["reap"]  # the fixture that kills processors a failed test left running

PARTITIONS = 3
#: The commit steps a ``SOW_CRASH_AT`` kill stops the processor after, in turn.
CRASH_STEPS = ("produced", "offsets-sent", "committed", "stored")
#: Every CRASH_EVERY-th kill is a crash at a commit step, the others SIGKILLs.
CRASH_EVERY = 3
#: Every CHECK_EVERY-th kill (a SIGKILL one) first pauses the stream and checks every view.
CHECK_EVERY = 5
#: The stream: OPERATIONS random operations, then a pause, until the kills are done.
OPERATIONS = 5
PAUSE_S = 0.05
#: The test's own broker: a killed processor's partitions move to its successor once its
#: session times out (3 s, not 6: 50 kills), and small segments let compaction clean the
#: changelogs during the run (restores stay short; the rebuild reads compacted logs).
BROKER_OVERRIDES = {
    "group.consumer.session.timeout.ms": "3000",
    "log.segment.bytes": str(1024 * 1024),
}


def write_seed_topology(path: Path, partitions: int) -> Topology:
    """Seed 002's views as ``test_views`` loads them (/ett/order keyed by tag 11), each SOW
    topic with ``partitions`` (and so each view: as many as its underlying topics); the
    ``sow process`` child loads the same file. The seed's views name no Kafka topics (an
    AMPS View has no KafkaTopic), so the test runs on a broker of its own."""
    text = SEED.read_text().replace("<Key>/orderId</Key>", "<Key>/11</Key>", 1)
    root = ET.fromstring(text)
    for topic in root.iterfind("SOW/Topic"):
        ET.SubElement(topic, "Partitions").text = str(partitions)
    ET.ElementTree(root).write(path, encoding="unicode")
    topology = load_topology(path)
    assert all(t.partitions == partitions for t in topology.topics.values())
    return topology


def views_of(topology: Topology) -> list[str]:
    return [name for name, topic in topology.topics.items() if topic.view is not None]


class StreamClient(SowClient):
    """The stream's client. A sow_delete waits until the delete is applied, and no
    processor applies anything between a kill and its successor's start: the gateway may
    give up waiting (after 30 s) on a delete it wrote to the log, which the stream (whose
    model dropped the record already) counts as done, as the reply says it is."""

    unapplied = 0

    def delete(
        self, topic: str, sow_keys: Sequence[str] = (), timeout: float = 30.0, **options: Any
    ) -> Any:
        try:
            return super().delete(topic, sow_keys, max(timeout, 120.0), **options)
        except ServiceError as exc:
            if exc.code != "DEADLINE_EXCEEDED" or "were written to the log" not in exc.details:
                raise
            self.unapplied += 1
            return None


class Stream(threading.Thread):
    """Publishes the random stream of ``underlying`` until ``stop``; holding ``hold``
    pauses it between two steps (``underlying`` then says what every view must be)."""

    def __init__(self, underlying: Underlying, client: SowClient) -> None:
        super().__init__(name="view-fault-stream", daemon=True)
        self.underlying = underlying
        self.client = client
        self.hold = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.operations = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.hold:
                    self.underlying.step(self.client, OPERATIONS)
                    self.operations += OPERATIONS
                time.sleep(PAUSE_S)
        except BaseException as exc:
            self.error = exc

    def check_running(self) -> None:
        assert self.error is None, f"the stream failed: {self.error!r}"
        assert self.is_alive(), "the stream stopped"


def query_records(client: SowClient, view: str) -> dict[bytes, bytes]:
    """A view's records as the query service serves them, by SowKey."""
    records, _, _ = client.query(view)
    return {r.sow_key.encode(): r.data for r in records}


def assert_stores_and_changelogs_equal_the_live_views(
    bootstrap: str, topology: Topology, state_dir: Path, client: SowClient
) -> None:
    """Every view's stores (its processor stopped) and changelog (read_committed, control
    records skipped) hold what is served. (A view's records do not each name an input
    position of their own: the underlying topics' changelogs are where an update applied
    twice would show, and a view's exactness against the recomputation is its check.)"""
    for view in views_of(topology):
        live = query_records(client, view)
        assert live, f"view {view} is empty: the stream should have filled it"
        assert store_contents(state_dir, topology.topics[view]) == live, view
        served = Model()
        served.state = live
        assert_changelog_exactly_once(
            bootstrap, topology.topics[view], served, unique_positions=False
        )
    for topic in topology.topics.values():  # no update of an underlying topic twice
        if topic.view is None:
            served = Model()
            served.state = query_records(client, topic.name)
            assert_changelog_exactly_once(bootstrap, topic, served)


def dump_outputs(path: Path) -> None:
    """Every processor child's log, in start order, for a failure's evidence."""
    with path.open("w") as out:
        for number, child in enumerate(ProcessorProcess.started, 1):
            code = child.process.poll()
            out.write(f"===== processor {number} (exit {code}) =====\n{child.output}\n")
    print(f"processor logs: {path}", flush=True)


def kill_scenario(
    bootstrap: str, unique: str, tmp_path: Path, kills_wanted: int, seed: int
) -> None:
    topology_file = tmp_path / "views.xml"
    topology = write_seed_topology(topology_file, PARTITIONS)
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path / "query-service",
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-not-processing",
        dead_letter_topic=f"{unique}.dead-letter",
    )
    service: Application = start(settings, topology=topology, processor=False)
    publisher, client = StreamClient(service.grpc_address), SowClient(service.grpc_address)
    underlying = Underlying(seed)
    stream = Stream(underlying, publisher)
    rng = random.Random(seed)
    crash_steps = itertools.cycle(CRASH_STEPS)
    began = time.monotonic()
    print(f"seed {seed}, {kills_wanted} kills", flush=True)

    def processor(env: dict[str, str] | None = None) -> ProcessorProcess:
        """A started processor, once it has its partitions; one asked to crash may do so
        before (recovered partitions are processed while others still recover)."""
        child = ProcessorProcess(bootstrap, topology_file, state_dir, group, env)
        deadline = time.monotonic() + 120
        while not child.assigned.wait(0.2):
            if env and child.process.poll() is not None:
                break
            assert time.monotonic() < deadline, child.output
        return child

    def check(timeout_s: float) -> None:
        with stream.hold:
            stream.check_running()
            wait_until_exact(client, topology, underlying.expected(), timeout_s)

    try:
        stream.start()
        for kill in range(1, kills_wanted + 1):
            if kill % CRASH_EVERY == 0:
                spec = f"{next(crash_steps)}:{rng.randint(1, 12)}"
                worker = processor({CRASH_ENV: spec})
                try:
                    code = worker.process.wait(120)
                except subprocess.TimeoutExpired as exc:
                    worker.kill()
                    raise AssertionError(f"{CRASH_ENV}={spec}: no crash\n{worker.output}") from exc
                assert code == 86, f"{CRASH_ENV}={spec}: exit {code}\n{worker.output}"
            else:
                worker = processor()
                if kill % CHECK_EVERY == 0:
                    check(120)
                time.sleep(rng.uniform(0.0, 2.5))
                worker.kill()
            if kill % 10 == 0:
                print(
                    f"{kill} kills, {stream.operations} operations, "
                    f"{time.monotonic() - began:.0f}s",
                    flush=True,
                )
        final = processor()  # first: the stream's last delete may be waiting for one
        stream.check_running()
        stream.stop.set()
        stream.join(60)
        assert stream.error is None, f"the stream failed: {stream.error!r}"
        print(f"{publisher.unapplied} deletes not applied within 30 s (no processor)")
        wait_until_exact(client, topology, underlying.expected(), 300)
        final.terminate()
        assert_stores_and_changelogs_equal_the_live_views(bootstrap, topology, state_dir, client)

        # The views' stores lost: rebuilt from their changelogs (their groups' members
        # too: the retractions of the next steps need them).
        for view in views_of(topology):
            for p in range(PARTITIONS):
                shutil.rmtree(store_path(state_dir, topology.topics[view], p))
        rebuilt = processor()
        wait_until_exact(client, topology, underlying.expected(), 120)
        for _ in range(4):
            underlying.step(publisher, 15)
            wait_until_exact(client, topology, underlying.expected(), 120)
        rebuilt.terminate()
        for view in views_of(topology):
            assert f"restored {view}[" in rebuilt.output, rebuilt.output
        assert_stores_and_changelogs_equal_the_live_views(bootstrap, topology, state_dir, client)
        print(
            f"done: {kills_wanted} kills, {stream.operations} operations, "
            f"{time.monotonic() - began:.0f}s",
            flush=True,
        )
    except BaseException:
        dump_outputs(tmp_path / "processors.log")
        raise
    finally:
        stream.stop.set()
        stream.join(60)
        publisher.close()
        client.close()
        service.stop()


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_views_stay_exact_through_50_processor_kills(
    own_broker: StartOwnBroker, unique: str, tmp_path: Path
) -> None:
    broker = own_broker(overrides=BROKER_OVERRIDES)
    kill_scenario(
        broker.bootstrap_servers,
        unique,
        tmp_path,
        int(os.environ.get("SOW_VIEW_FAULT_KILLS", "50")),
        int(os.environ.get("SOW_VIEW_FAULT_SEED", "21")),
    )
