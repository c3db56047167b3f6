"""Exactly-once under SIGKILL, crashes between commit steps, and store rebuilds.

The processor runs as ``sow process`` in a child process, so it can be killed for real.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from processor import changelog
from processor.app import topic_specs
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology
from tests.integration.harness import store_contents

PARTITIONS = 2


class ProcessorProcess:
    """``sow process`` in a child process, with its stderr collected by a thread."""

    #: Every child started by a test; the ``reap`` fixture kills leftovers after it.
    started: list[ProcessorProcess] = []

    def __init__(
        self,
        bootstrap: str,
        topology_file: Path,
        state_dir: Path,
        group: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.lines: list[str] = []
        self.assigned = threading.Event()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "process",
                "--bootstrap-servers",
                bootstrap,
                "--topology",
                str(topology_file),
                "--state-dir",
                str(state_dir),
                "--group-id",
                group,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ProcessorProcess.started.append(self)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if " assigned " in line:
                self.assigned.set()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def output(self) -> str:
        return "".join(self.lines)


class Model:
    """The expected SOW: last value per SowKey, and the log's end per partition."""

    def __init__(self) -> None:
        self.state: dict[bytes, bytes] = {}
        self.ends: dict[int, int] = {}


def publish(
    bootstrap: str,
    topic: SowTopic,
    updates: int,
    keys: int,
    seconds: float,
    model: Model,
    seed: int = 7,
) -> None:
    """Publish updates keyed by SowKey (2% deletes), spread over ``seconds``."""
    rng = random.Random(seed)
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    # Idempotent: the log holds each update once and in the order the model saw it, even
    # when a produce request is retried under load.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "log_level": 3,
            "enable.idempotence": True,
            "queue.buffering.max.messages": max(updates, 100_000),
        }
    )
    failed: list[object] = []

    def delivered(error: object, _: object) -> None:
        if error is not None:
            failed.append(error)

    started = time.monotonic()
    for i in range(updates):
        order = rng.randrange(keys)
        sow_key = generator({"orderId": order}).encode()
        partition = partition_for(sow_key, topic.partitions)
        if rng.random() < 0.02:
            producer.produce(topic.kafka_topic, None, sow_key, partition, on_delivery=delivered)
            model.state.pop(sow_key, None)
        else:
            value = orjson.dumps({"orderId": order, "seq": i})
            producer.produce(topic.kafka_topic, value, sow_key, partition, on_delivery=delivered)
            model.state[sow_key] = value
        if i % 1000 == 0:
            producer.poll(0)
            ahead = started + seconds * i / updates - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    unsent = producer.flush(120)
    assert unsent == 0, f"{unsent} updates of the model never reached the broker"
    assert not failed, f"updates of the model were refused: {failed[:3]}"
    for p in range(topic.partitions):
        # ListOffsets may under-report on some brokers; read the partition instead.
        model.ends[p] = _count(bootstrap, topic.kafka_topic, p)


def _count(bootstrap: str, topic: str, partition: int) -> int:
    records = read_topic_partition(bootstrap, topic, partition)
    return records[-1].offset() + 1 if records else 0


def read_topic_partition(bootstrap: str, topic: str, partition: int) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "log_level": 3,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    records: list[object] = []
    # A batch consume waits its whole timeout unless it fills up: take short waits and
    # stop at the partition's end (an EOF event), or after 10 s of nothing.
    quiet_until = time.monotonic() + 10
    try:
        while time.monotonic() < quiet_until:
            batch = consumer.consume(10000, 0.1)
            if batch:
                quiet_until = time.monotonic() + 10
            if any(message.error() for message in batch):
                records.extend(m for m in batch if not m.error())
                break
            records.extend(batch)
    finally:
        consumer.close()
    return records


def wait_until_committed(
    bootstrap: str, group: str, topic: str, ends: dict[int, int], timeout_s: float
) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    raise AssertionError(f"the processor did not commit up to {ends} in {timeout_s}s")


def changelog_sow(records: Iterable[Any], unique_positions: bool = True) -> dict[bytes, bytes]:
    """The SOW a changelog's records hold, checking that no update is in it twice (each
    record names the input position it applied). A view's records may share one: a
    change of an underlying record applied directly writes its old and new groups with
    the view's input and offset -1 (``unique_positions`` False)."""
    seen: set[tuple[str, int, int]] = set()
    final: dict[bytes, bytes] = {}
    for record in records:
        key = record.key()
        if key.startswith(changelog.CONTROL_PREFIX):
            continue
        value = record.value()
        if value is None:
            position = changelog.parse_position(dict(record.headers())["sow.position"])
            final.pop(key, None)
        else:
            envelope = changelog.decode(value)
            position = (envelope.log_topic, envelope.log_partition, envelope.log_offset)
            final[key] = envelope.data
        assert not unique_positions or position not in seen, (
            f"update {position} is in the changelog twice"
        )
        seen.add(position)
    return final


def assert_changelog_exactly_once(
    bootstrap: str, topic: SowTopic, model: Model, unique_positions: bool = True
) -> None:
    records = [
        record
        for p in range(topic.partitions)
        for record in read_topic_partition(bootstrap, topic.changelog_topic, p)
    ]
    assert changelog_sow(records, unique_positions) == model.state


def write_topology(path: Path, topic: SowTopic) -> Path:
    path.write_text(
        f"topics:\n  - name: {topic.name}\n    key: [/orderId]\n"
        f"    kafka_topic: {topic.kafka_topic}\n    partitions: {topic.partitions}\n"
    )
    return path


@pytest.fixture(autouse=True)
def reap() -> Iterator[None]:
    """Kill any processor a test left running (a failed assertion skips its cleanup)."""
    yield
    while ProcessorProcess.started:
        child = ProcessorProcess.started.pop()
        if child.process.poll() is None:
            child.kill()


@pytest.fixture
def orders(bootstrap: str, unique: str, tmp_path: Path) -> Iterator[tuple[SowTopic, Path]]:
    topic = SowTopic(
        "ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders", partitions=PARTITIONS
    )
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter"))
    return topic, write_topology(tmp_path / "orders.yaml", topic)


def sigkill_scenario(
    bootstrap: str,
    group: str,
    tmp_path: Path,
    orders: tuple[SowTopic, Path],
    updates: int,
    keys: int,
    seconds: float,
    min_kills: int,
) -> None:
    """Publish ``updates`` over ``seconds`` while SIGKILLing the processor at random
    points; then check the SOW, the changelog, and a rebuild from the changelog."""
    topic, topology_file = orders
    state_dir = tmp_path / "state"
    model = Model()
    publisher = threading.Thread(
        target=publish, args=(bootstrap, topic, updates, keys, seconds, model)
    )
    publisher.start()
    rng = random.Random(11)
    kills = 0
    while publisher.is_alive() or kills < min_kills:
        worker = ProcessorProcess(bootstrap, topology_file, state_dir, group)
        assert worker.assigned.wait(60), worker.output
        time.sleep(rng.uniform(0.2, 2.5))
        worker.kill()
        kills += 1
    publisher.join()
    final = ProcessorProcess(bootstrap, topology_file, state_dir, group)
    wait_until_committed(bootstrap, group, topic.kafka_topic, model.ends, 300)
    final.terminate()
    assert kills >= min_kills
    assert store_contents(state_dir, topic) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)

    shutil.rmtree(state_dir)
    rebuilt = ProcessorProcess(bootstrap, topology_file, state_dir, group)
    assert rebuilt.assigned.wait(300), rebuilt.output
    rebuilt.terminate()
    assert "restoring ORDERS[0]" in rebuilt.output
    assert "restored ORDERS[0]" in rebuilt.output
    assert store_contents(state_dir, topic) == model.state


def test_sigkill_during_50k_updates_then_rebuild(
    bootstrap: str, unique: str, tmp_path: Path, orders: tuple[SowTopic, Path]
) -> None:
    sigkill_scenario(bootstrap, f"{unique}-group", tmp_path, orders, 50_000, 5_000, 12.0, 3)


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_soak_sigkill_during_1m_updates_then_rebuild(
    bootstrap: str, unique: str, tmp_path: Path, orders: tuple[SowTopic, Path]
) -> None:
    sigkill_scenario(bootstrap, f"{unique}-group", tmp_path, orders, 1_000_000, 50_000, 120.0, 12)


@pytest.mark.parametrize("step", ["produced", "offsets-sent", "committed", "stored"])
def test_crash_between_commit_steps(
    bootstrap: str, unique: str, tmp_path: Path, orders: tuple[SowTopic, Path], step: str
) -> None:
    topic, topology_file = orders
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    model = Model()
    publish(bootstrap, topic, 6_000, 500, 0.0, model)
    crashing = ProcessorProcess(
        bootstrap,
        topology_file,
        state_dir,
        group,
        env={"SOW_CRASH_AT": f"{step}:2", "SOW_MAX_BATCH": "500"},
    )
    assert crashing.process.wait(120) == 86, crashing.output
    survivor = ProcessorProcess(
        bootstrap, topology_file, state_dir, group, env={"SOW_MAX_BATCH": "500"}
    )
    wait_until_committed(bootstrap, group, topic.kafka_topic, model.ends, 120)
    survivor.terminate()
    assert store_contents(state_dir, topic) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)
