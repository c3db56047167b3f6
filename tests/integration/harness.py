"""An in-process kafka-sow (processor, replica, gRPC service) on the session's broker."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import changelog
from processor.app import Application, start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.state.opener import store_path
from processor.state.rocksdb import RocksDBStore
from processor.testing import MemoryBackend, MemoryLog, start_memory
from processor.topology.model import SowTopic, Topology, ViewSpec
from tests.conftest import MEMORY


def namespaced(unique: str, *topics: SowTopic) -> Topology:
    """A topology whose Kafka topics are unique to one test (the broker is shared)."""
    return Topology({t.name: replace(t, kafka_topic=f"{unique}.{t.kafka_topic}") for t in topics})


def namespaced_topology(unique: str, topology: Topology, partitions: int = 0) -> Topology:
    """``topology`` with Kafka topics unique to one test, its views included, and with
    ``partitions`` (0: as configured) for every SOW topic and view."""
    topics: dict[str, SowTopic] = {}
    views: dict[str, ViewSpec] = {}
    for name, topic in topology.topics.items():
        count = partitions or topic.partitions
        kafka_topic = f"{unique}.{topic.kafka_topic}"
        view = topic.view
        if view is not None:
            view = views[view.name] = replace(view, kafka_topic=kafka_topic, partitions=count)
        topics[name] = replace(topic, kafka_topic=kafka_topic, partitions=count, view=view)
    return replace(topology, topics=topics, views=views)


#: The memory log of each test (by its unique name): a restart finds its log again.
MEMORY_LOGS: dict[str, MemoryLog] = {}


@contextlib.contextmanager
def running_sow(
    backend: str,
    topology: Topology,
    state_dir: Path,
    unique: str,
    settings: dict[str, object] | None = None,
    **components: bool,
) -> Iterator[tuple[Application, SowClient]]:
    """Start processor + replica + gRPC on a free port, on the memory log (``backend``
    is ``"memory"``) or the broker at ``backend``; yield the app and a client once it is
    ready (processor joined and restored, replica caught up), as a user's first request
    after health turns SERVING would find it. ``components``: ``processor=False`` or
    ``service=False`` start one without the other (the client then has no server).
    ``settings``: :class:`Settings` fields to override."""
    if backend == MEMORY:
        app = start_memory(
            topology,
            state_dir,
            backend=MemoryBackend(MEMORY_LOGS.setdefault(unique, MemoryLog())),
            group_id=f"{unique}-group",
            dead_letter_topic=f"{unique}.dead-letter",
            **(settings or {}),
            **components,
        )
    else:
        config = Settings(
            bootstrap_servers=backend,
            state_dir=state_dir,
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            dead_letter_topic=f"{unique}.dead-letter",
        )
        config = replace(config, **(settings or {}))
        app = start(config, topology=topology, **components)
    client = SowClient(app.grpc_address)
    try:
        deadline = time.monotonic() + 60
        while app.readiness() is not None:
            assert time.monotonic() < deadline, f"not ready after 60s: {app.readiness()}"
            time.sleep(0.05)
        yield app, client
    finally:
        client.close()
        app.stop()


def read_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    timeout_s: float = 20.0,
    expect: int | None = None,
) -> list[object]:
    """Every committed record of a topic (until ``expect`` records or partition ends)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[object] = []
    ended: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if expect is not None and len(records) >= expect:
                break
            if expect is None and len(ended) == partitions:
                break
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                ended.add(message.partition())
                continue
            ended.discard(message.partition())
            records.append(message)
    finally:
        consumer.close()
    return records


def store_contents(state_dir: Path, topic: SowTopic) -> dict[bytes, bytes]:
    """The messages a processor's RocksDB stores hold for ``topic``, by SowKey."""
    contents: dict[bytes, bytes] = {}
    for p in range(topic.partitions):
        store = RocksDBStore(store_path(state_dir, topic, p))
        contents.update((k, changelog.decode(v).data) for k, v in store.items())
        store.close()
    return contents


def group_type(bootstrap: str, group: str) -> str:
    """``CONSUMER`` (KIP-848) or ``CLASSIC``: the kind of group the broker says it is."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    described = admin.describe_consumer_groups([group])[group].result(10)
    return str(described.type.name)


def waited_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until ``condition`` held; fails the test after ``timeout_s``."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout_s:
            pytest.fail(f"{what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - began


def difference(got: Mapping[Any, bytes], expected: Mapping[Any, bytes]) -> str:
    """What a state lacks, has too much of, or holds differently (a few each)."""
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    changed = sorted(k for k in got.keys() & expected.keys() if got[k] != expected[k])
    return (
        f"missing {len(missing)} {[(k, expected[k]) for k in missing[:3]]}, "
        f"extra {len(extra)} {[(k, got[k]) for k in extra[:3]]}, "
        f"different {len(changed)} {[(k, got[k], expected[k]) for k in changed[:3]]}"
    )
