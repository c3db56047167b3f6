"""The read replica against changelogs on the real broker: catching up, snapshots and
staleness (changelog transactions written as the processor writes them)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.client.sow_client import ServiceError, SowClient
from processor.errors import CatchingUpError
from processor.log.kafka.writer import KafkaLogWriter
from processor.publish.gateway import Gateway
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.replica.snapshot import FILE_NAME
from processor.server.service import start_server
from processor.topology.model import SowTopic
from tests.conftest import StartOwnBroker
from tests.integration.replica_helpers import (
    ChangelogWriter,
    contents,
    eventually,
    following,
    single,
    tail_on,
)


@contextlib.contextmanager
def serving(engine: QueryEngine, bootstrap: str) -> Iterator[SowClient]:
    """The gRPC service over ``engine`` on a free loopback port, and a client of it."""
    writer = KafkaLogWriter(bootstrap)
    gateway = Gateway(engine.topology, writer, engine.replica)
    server, address = start_server(engine, gateway, "127.0.0.1:0")
    client = SowClient(address)
    try:
        yield client
    finally:
        client.close()
        server.stop(grace=0).wait()
        writer.close()  # its poller thread would keep the producer alive for good


def topic_for(unique: str, partitions: int = 2) -> SowTopic:
    return SowTopic("ITEMS", keys=("/id",), kafka_topic=f"{unique}.ITEMS", partitions=partitions)


def fill(writer: ChangelogWriter, count: int, per_transaction: int = 5000, tag: str = "a") -> None:
    for partition in range(writer.topic.partitions):
        for start in range(0, count, per_transaction):
            writer.transaction(
                partition,
                [
                    (f"k{partition}-{i}", {"id": i, "tag": tag})
                    for i in range(start, min(start + per_transaction, count))
                ],
            )


def test_queries_fail_while_catching_up_and_wait_when_asked(bootstrap: str, unique: str) -> None:
    topic = topic_for(unique)
    writer = ChangelogWriter(bootstrap, topic, f"{unique}-tx")
    fill(writer, 100_000)  # long enough to catch up that the first queries come first
    writer.close()
    replica = Replica(single(topic), tail_on(bootstrap))
    engine = QueryEngine(single(topic), replica)
    with following(replica), serving(engine, bootstrap) as client:
        with pytest.raises(ServiceError, match="catching up with the changelogs") as failed:
            client.query("ITEMS", top_n=1)
        assert failed.value.code == "UNAVAILABLE"
        with pytest.raises(CatchingUpError, match="catching up with the changelogs"):
            engine.run(SowQuery("ITEMS", top_n=1))
        records, begin, _ = client.query("ITEMS", top_n=3, wait_for_catch_up=True)
        assert len(records) == 3
        assert begin.staleness_ms == 0
        result = engine.run(SowQuery("ITEMS", wait_for_catch_up=True, timeout_s=60))
        assert result.stats is not None
        assert result.stats.records_returned == 200_000
        assert replica.caught_up()
        # The position vector is past every record of both partitions.
        assert all(offset > 100_000 for _, _, offset in result.snapshot)


def test_snapshot_restart_equals_replay_and_a_damaged_snapshot_is_ignored(
    bootstrap: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_for(unique)
    topology = single(topic)
    writer = ChangelogWriter(bootstrap, topic, f"{unique}-tx")
    fill(writer, 3000, per_transaction=1000)
    snapshots = tmp_path / "replica"
    first = Replica(topology, tail_on(bootstrap), snapshot_dir=snapshots, snapshot_interval_s=0.2)
    with following(first):
        assert first.wait_caught_up(30)
        before = contents(first, topic)
        eventually((snapshots / FILE_NAME).exists)  # written while running
    assert len(before) == 6000
    assert (snapshots / FILE_NAME).exists()
    # Changes after the snapshot: updates, deletes, inserts.
    writer.transaction(0, [("k0-1", {"id": 1, "tag": "b"}), ("k0-2", None), ("new", {"id": -1})])
    writer.transaction(1, [("k1-5", None)])
    writer.close()

    restarted = Replica(topology, tail_on(bootstrap), snapshot_dir=snapshots)
    replayed = Replica(topology, tail_on(bootstrap))
    with following(restarted), following(replayed):
        assert restarted.wait_caught_up(30)
        assert replayed.wait_caught_up(30)
        after = contents(restarted, topic)
        assert after == contents(replayed, topic)
        # Same record order within each partition (partitions interleave as read).
        for prefix in (b"k0-", b"k1-"):
            assert [k for k in after if k.startswith(prefix)] == [
                k for k in contents(replayed, topic) if k.startswith(prefix)
            ]
        # The restarted replica read only what came after its snapshot.
        assert restarted.applied == 4
        assert replayed.applied == 6000 + 4
    assert b"k0-2" not in after
    assert b"new" in after
    assert len(after) == 6000 - 2 + 1

    raw = bytearray((snapshots / FILE_NAME).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (snapshots / FILE_NAME).write_bytes(bytes(raw))
    damaged = Replica(topology, tail_on(bootstrap), snapshot_dir=snapshots)
    with caplog.at_level(logging.WARNING), following(damaged):
        assert damaged.wait_caught_up(30)
        assert contents(damaged, topic) == after
        assert damaged.applied == 6000 + 4
    assert "is damaged" in caplog.text
    assert "replaying the changelogs from offset 0" in caplog.text


def test_staleness_grows_while_the_broker_is_frozen(
    unique: str, own_broker: StartOwnBroker
) -> None:
    broker = own_broker()
    try:
        topic = topic_for(unique, partitions=1)
        writer = ChangelogWriter(broker.bootstrap_servers, topic, f"{unique}-tx")
        writer.transaction(0, [("a", {"id": 1})])
        replica = Replica(single(topic), tail_on(broker.bootstrap_servers))
        engine = QueryEngine(single(topic), replica)
        with following(replica), serving(engine, broker.bootstrap_servers) as client:
            assert replica.wait_caught_up(30)
            # A commit returns before its markers are written: the record may become
            # readable just after the replica first reached the end.
            eventually(lambda: replica.record_counts().get("ITEMS") == 1)
            eventually(lambda: replica.staleness_ms() == 0)
            pid = broker.pid  # the test owns this broker and freezes it
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(1.5)
                began = time.monotonic()
                result = engine.run(SowQuery("ITEMS"))
                assert time.monotonic() - began < 0.5  # answered from memory at once
                assert result.stats is not None
                assert result.stats.records_returned == 1
                frozen = replica.staleness_ms()
                assert frozen >= 1000
                records, begin, _ = client.query("ITEMS", timeout=5)
                assert len(records) == 1
                assert begin.staleness_ms >= frozen
                time.sleep(0.3)
                assert replica.staleness_ms() > frozen
            finally:
                os.kill(pid, signal.SIGCONT)
            eventually(lambda: replica.staleness_ms() == 0)
            writer.transaction(0, [("b", {"id": 2})])
            eventually(lambda: len(contents(replica, topic)) == 2)
        writer.close()
    finally:
        broker.stop()


def test_a_snapshot_of_another_log_is_not_tailed(
    unique: str, tmp_path: Path, own_broker: StartOwnBroker
) -> None:
    """A new log at the same address (a memory-only broker restarted, a new cluster):
    its new changelog has grown past the snapshot's positions, with other records. The
    replica must not apply them on top of the snapshot but read the new log from 0."""
    topic = topic_for(unique, partitions=1)
    snapshots = tmp_path / "replica"
    first = own_broker()
    port = int(first.bootstrap_servers.rsplit(":", 1)[1])
    try:
        writer = ChangelogWriter(first.bootstrap_servers, topic, f"{unique}-tx")
        writer.transaction(0, [(f"old{i}", {"id": i}) for i in range(10)])
        writer.close()
        replica = Replica(single(topic), tail_on(first.bootstrap_servers), snapshots)
        with following(replica):
            assert replica.wait_caught_up(30)
    finally:
        first.stop()
    second = own_broker(port=port)
    try:
        writer = ChangelogWriter(second.bootstrap_servers, topic, f"{unique}-tx2")
        for start in (0, 10, 20):
            writer.transaction(0, [(f"new{i}", {"id": i}) for i in range(start, start + 10)])
        writer.close()
        restarted = Replica(single(topic), tail_on(second.bootstrap_servers), snapshots)
        with following(restarted):
            assert restarted.wait_caught_up(30)
            held = contents(restarted, topic)
        assert sorted(held) == sorted(f"new{i}".encode() for i in range(30))
    finally:
        second.stop()
