"""What only a real Apache Kafka does, and what kafka-sow relies on it for.

* **Compaction.** A changelog whose segments roll every 100 ms and whose cleaner keeps no
  tombstone longer than 100 ms really is compacted under a running processor: each live
  SowKey once, deleted keys gone, one or two PROGRESS records per partition. A store
  rebuilt from it and a query service started on it answer the same SOW as before, and the
  last PROGRESS record of a partition (the one compaction keeps) is all a new query
  service needs for read-your-writes.
* **Open transactions.** A processor killed between producing and committing leaves a
  transaction open: its successor's InitProducerId aborts it at once; with no successor,
  the coordinator aborts it after ``transaction.timeout.ms`` (10 s), and until then every
  read_committed reader of the partition is held back. No reader ever sees its records.
  A processor that stands still longer than that is fenced by the abort, and carries on.
* **Broker crash.** The embedded broker SIGKILLed (while the processor holds a
  transaction open) and restarted on its log under a publish stream: everything recovers
  by itself, every acknowledged publish is in the SOW, none applied twice.

The session broker (tests/conftest.py) cleans logs every 100 ms and looks for timed-out
transactions every 500 ms; on Tansu (``SOW_EMBEDDED_BROKER=tansu``), which neither compacts
nor aborts, these tests are skipped (docs/brokers.md).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from processor.app import Application, start, topic_specs
from processor.changelog import CONTROL_PREFIX, PROGRESS_KEY, PUBLISHER_PREFIX, decode_progress
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.engine.publishers import PUBLISHER_META_PREFIX
from processor.keys import FieldKeyGenerator, partition_for
from processor.log import TopicSpec
from processor.log.broker import Broker, TansuBroker
from processor.log.kafka.settings import ensure_topics
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.state.opener import store_path
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.conftest import StartOwnBroker
from tests.integration.harness import store_contents, waited_for
from tests.integration.test_crash_recovery import (
    Model,
    ProcessorProcess,
    assert_changelog_exactly_once,
    publish,
    read_topic_partition,
    reap,
    wait_until_committed,
    write_topology,
)
from tests.integration.test_fault_suite import StreamedModel, paced

__all__ = ["reap"]  # the fixture that kills processors a failed test left running

#: Changelog settings under which the cleaner compacts within a second: segments roll
#: 100 ms after their first record (on the next append), any dirty segment is cleaned
#: once 100 ms old, and tombstones (and transaction markers) go 100 ms after the first
#: cleaning that saw them.
COMPACT_AT_ONCE = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "100",
    "delete.retention.ms": "100",
}
TRANSACTION_TIMEOUT_S = KafkaTransactionalLog.TRANSACTION_TIMEOUT_MS / 1000
#: A SIGKILLed node's next incarnation cannot register until the controller has given up
#: on the old one's session (DUPLICATE_BROKER_REGISTRATION meanwhile): 9 s by default.
QUICK_RESTART = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture(autouse=True)
def apache_kafka(broker: Broker) -> None:
    """These behaviours are Apache Kafka's: Tansu neither compacts nor aborts."""
    if isinstance(broker, TansuBroker):
        pytest.skip("the session broker is Tansu, which neither compacts nor aborts")


def orders_topic(unique: str, partitions: int = 2) -> SowTopic:
    return SowTopic(
        "ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.orders", partitions=partitions
    )


def create_topics(bootstrap: str, topic: SowTopic, dead_letter: str) -> None:
    """The topology's topics as the product specifies them, the changelog with
    :data:`COMPACT_AT_ONCE` added (``ensure_topics`` then finds them all there)."""
    specs = [
        TopicSpec(s.name, s.partitions, {**s.config, **COMPACT_AT_ONCE})
        if s.name == topic.changelog_topic
        else s
        for s in topic_specs(Topology({topic.name: topic}), dead_letter)
    ]
    assert dict(specs[-1].config)["cleanup.policy"] == "compact"
    ensure_topics(bootstrap, specs)


def settings_for(bootstrap: str, state_dir: Path, unique: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        state_dir=state_dir,
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
    )


@contextlib.contextmanager
def running(
    bootstrap: str,
    topic: SowTopic,
    state_dir: Path,
    unique: str,
    *,
    processor: bool = True,
    service: bool = True,
) -> Iterator[Application]:
    """kafka-sow in this process (processor thread and/or query service), ready: the
    processor has restored its stores and the replica has caught up."""
    app = start(
        settings_for(bootstrap, state_dir, unique),
        topology=Topology({topic.name: topic}),
        processor=processor,
        service=service,
    )
    try:
        waited_for(lambda: app.readiness() is None, 90, "readiness")
        yield app
    finally:
        app.stop()


def order_ids_on(topic: SowTopic, partition: int, first: int, count: int) -> list[int]:
    """``count`` orderIds from ``first`` on whose SowKeys belong to ``partition``."""
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    found: list[int] = []
    order = first
    while len(found) < count:
        if partition_for(generator({"orderId": order}).encode(), topic.partitions) == partition:
            found.append(order)
        order += 1
    return found


def sow_key_of(topic: SowTopic, order: int) -> bytes:
    return FieldKeyGenerator(topic.domain, topic.keys)({"orderId": order}).encode()


def last_positions(topic: SowTopic, model: Model) -> list[sow_pb2.Position]:
    """The last acknowledged command of each partition, as a query's min_position."""
    return [
        sow_pb2.Position(topic=topic.kafka_topic, partition=p, offset=end - 1)
        for p, end in model.ends.items()
    ]


def queried_sow(
    client: SowClient, topic: SowTopic, model: Model, timeout_s: float = 60
) -> dict[bytes, bytes]:
    """The whole SOW, once the service has applied every acknowledged command."""
    records, _, _ = client.query(
        topic.name,
        min_position=last_positions(topic, model),
        timeout=timeout_s + 10,
        timeout_seconds=timeout_s,
    )
    return {r.sow_key.encode(): r.data for r in records}


def delete_keys(client: SowClient, topic: SowTopic, model: Model, keys: list[bytes]) -> None:
    """sow_delete by SowKey; the model forgets them and notes where the deletes landed."""
    reply = client.delete(topic.name, sow_keys=[k.decode() for k in keys])
    assert reply.records_deleted == len(keys), reply
    for key in keys:
        model.state.pop(key, None)
    for position in reply.positions:
        model.ends[position.partition] = max(
            model.ends.get(position.partition, 0), position.offset + 1
        )


@dataclass
class ChangelogView:
    """What a read_committed reader finds in a changelog: per partition, the records of
    each data key (upserts and tombstones) and of each control key, in offset order."""

    upserts: collections.Counter[bytes] = field(default_factory=collections.Counter)
    tombstones: collections.Counter[bytes] = field(default_factory=collections.Counter)
    controls: dict[int, collections.Counter[bytes]] = field(default_factory=dict)
    progress: dict[int, list[bytes]] = field(default_factory=dict)
    offsets: dict[int, list[int]] = field(default_factory=dict)


def read_changelog(bootstrap: str, topic: SowTopic) -> ChangelogView:
    view = ChangelogView()
    for p in range(topic.partitions):
        controls = view.controls[p] = collections.Counter()
        progress = view.progress[p] = []
        offsets = view.offsets[p] = []
        for record in read_topic_partition(bootstrap, topic.changelog_topic, p):
            key, value = record.key(), record.value()  # type: ignore[attr-defined]
            offsets.append(record.offset())  # type: ignore[attr-defined]
            if key.startswith(CONTROL_PREFIX):
                controls[key] += 1
                if key == PROGRESS_KEY:
                    progress.append(value)
            elif value is None:
                view.tombstones[key] += 1
            else:
                view.upserts[key] += 1
    return view


def compacted(view: ChangelogView, live: set[bytes]) -> bool:
    """Each live key once, nothing else: no tombstone, no deleted key, and at most two
    PROGRESS records per partition (the latest of the cleaned part, and the one in the
    active segment, which the cleaner never touches)."""
    return (
        not view.tombstones
        and set(view.upserts) == live
        and all(n == 1 for n in view.upserts.values())
        and all(c[PROGRESS_KEY] <= 2 for c in view.controls.values())
    )


def publisher_meta(state_dir: Path, topic: SowTopic) -> dict[int, dict[bytes, bytes]]:
    """Each store partition's duplicate-detection entries (publisher -> sequence)."""
    found: dict[int, dict[bytes, bytes]] = {}
    for p in range(topic.partitions):
        store = RocksDBStore(store_path(state_dir, topic, p))
        found[p] = dict(store.meta_items(PUBLISHER_META_PREFIX))
        store.close()
    return found


# -- 1. compaction ---------------------------------------------------------------------


def test_a_compacted_changelog_rebuilds_the_same_sow(
    bootstrap: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Many updates over few keys and some deletes; the changelog compacts down to each
    live key once (deleted keys and their tombstones gone); then a store rebuilt from it
    and a new query service read from it hold exactly the SOW that was published, and the
    rebuilt store discards the same publisher sequences."""
    topic = orders_topic(unique)
    create_topics(bootstrap, topic, f"{unique}.dead-letter")
    state_dir = tmp_path / "state"
    model = StreamedModel()
    orders = 40
    with running(bootstrap, topic, state_dir, unique) as app, SowClient(app.grpc_address) as client:
        updates = (orjson.dumps({"orderId": i % orders, "seq": i}) for i in range(4000))
        model.publish(client, updates)
        deleted = [sow_key_of(topic, order) for order in range(10)]
        delete_keys(client, topic, model, deleted)
        # Two of them come back: their new records must outlive the tombstones.
        model.publish(client, (orjson.dumps({"orderId": o, "seq": -1}) for o in (0, 1)))
        deleted = deleted[2:]
        assert queried_sow(client, topic, model) == model.state
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        written = sum(offsets(admin, topic.changelog_topic, 2, committed=True).values())
        assert written > 4000  # every update, its PROGRESS record and commit marker

        # The active segment is never cleaned: keep appending (a new key per partition,
        # every 0.3 s) so that the segments holding the workload roll and get cleaned.
        fresh = {p: iter(order_ids_on(topic, p, 1_000, 1_000)) for p in range(2)}
        view = read_changelog(bootstrap, topic)
        deadline = time.monotonic() + 60
        while not compacted(view, set(model.state)):
            if time.monotonic() > deadline:
                progress = [c[PROGRESS_KEY] for c in view.controls.values()]
                pytest.fail(
                    f"not compacted in 60s: {sum(view.upserts.values())} upserts of "
                    f"{len(model.state)} live keys, {sum(view.tombstones.values())} "
                    f"tombstones, PROGRESS records per partition {progress}"
                )
            model.publish(
                client,
                (orjson.dumps({"orderId": next(fresh[p]), "seq": 0}) for p in range(2)),
            )
            time.sleep(0.3)
            view = read_changelog(bootstrap, topic)
        assert queried_sow(client, topic, model) == model.state
    left = sum(len(o) for o in view.offsets.values())
    assert left < written / 20, (left, written)
    # (c) The deleted keys are gone: their records and their tombstones.
    assert not set(deleted) & (set(view.upserts) | set(view.tombstones))
    # What recovery needs survives: a PROGRESS record per partition, and the latest
    # sequence of every publisher of the partition.
    assert all(view.progress[p] for p in range(2)), view.controls
    for p in range(2):
        publishers = [k for k in view.controls[p] if k.startswith(PUBLISHER_PREFIX)]
        assert publishers, view.controls[p]

    # (a) A store rebuilt from the compacted changelog.
    expected_meta = publisher_meta(state_dir, topic)
    assert store_contents(state_dir, topic) == model.state
    shutil.rmtree(state_dir)
    with (
        caplog.at_level(logging.INFO, logger="processor.engine.recovery"),
        running(bootstrap, topic, state_dir, unique, service=False),
    ):
        pass
    replayed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("restored")]
    assert len(replayed) == 2, replayed
    assert store_contents(state_dir, topic) == model.state
    assert publisher_meta(state_dir, topic) == expected_meta

    # (b) A new query service (no snapshot) reading the compacted changelog.
    with (
        running(bootstrap, topic, tmp_path / "service", unique, processor=False) as service,
        SowClient(service.grpc_address) as client,
    ):
        assert queried_sow(client, topic, model) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)


def test_the_last_progress_record_is_all_a_new_query_service_needs(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """Compaction keeps one PROGRESS record per changelog partition: the latest. When the
    latest transaction of a partition read only some of its log topics (here only the
    repartition topic: records a producer wrote to the wrong input partition), the
    PROGRESS record must still say how far the others were applied, or a query service
    started on the compacted changelog cannot answer a read-your-writes query about them."""
    topic = orders_topic(unique)
    create_topics(bootstrap, topic, f"{unique}.dead-letter")
    model = StreamedModel()
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    misplaced = iter(order_ids_on(topic, 1, 10_000, 1_000))

    def rekeyed_round() -> None:
        """Records of partition 1's keys written to input partition 0: the processor
        re-keys them, then applies them from the repartition topic alone."""
        for _ in range(5):
            order = next(misplaced)
            value = orjson.dumps({"orderId": order, "seq": 1})
            producer.produce(topic.kafka_topic, value, sow_key_of(topic, order), 0)
            model.state[sow_key_of(topic, order)] = value
        assert producer.flush(10) == 0

    with (
        running(bootstrap, topic, tmp_path / "state", unique) as app,
        SowClient(app.grpc_address) as client,
    ):
        model.publish(client, (orjson.dumps({"orderId": i, "seq": 0}) for i in range(200)))
        assert queried_sow(client, topic, model) == model.state
        first = read_changelog(bootstrap, topic)
        (input_progress,) = first.progress[1][-1:]
        assert topic.kafka_topic in {t for t, _, _ in decode_progress(input_progress)}
        covered = first.offsets[1][-1]  # the PROGRESS record of the last publish

        # Until compaction removes that PROGRESS record, only re-keyed records reach
        # changelog partition 1.
        deadline = time.monotonic() + 60
        while covered in read_changelog(bootstrap, topic).offsets[1]:
            if time.monotonic() > deadline:
                pytest.fail("the changelog's first PROGRESS record was not compacted in 60s")
            rekeyed_round()
            waited_for(
                lambda: queried_sow_now(client, topic) == model.state, 30, "the re-keyed records"
            )
            time.sleep(0.2)
        assert queried_sow(client, topic, model) == model.state

    with (
        running(bootstrap, topic, tmp_path / "service", unique, processor=False) as service,
        SowClient(service.grpc_address) as client,
    ):
        assert queried_sow(client, topic, model, timeout_s=15) == model.state


def queried_sow_now(client: SowClient, topic: SowTopic) -> dict[bytes, bytes]:
    records, _, _ = client.query(topic.name)
    return {r.sow_key.encode(): r.data for r in records}


# -- 2. open transactions ----------------------------------------------------------------


def offsets(admin: AdminClient, topic: str, partitions: int, committed: bool) -> dict[int, int]:
    """Per partition, the last stable offset (``committed``: where read_committed readers
    stop, before the first open transaction) or the high watermark."""
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        isolation_level=level,
        request_timeout=10,
    )
    return {tp.partition: future.result().offset for tp, future in futures.items()}


def read_uncommitted(bootstrap: str, topic: str, partition: int) -> list[object]:
    """Every record of a partition, aborted ones included (read_uncommitted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    records: list[object] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                return records  # the partition's end
            records.append(message)
    finally:
        consumer.close()
    pytest.fail(f"read_uncommitted did not reach the end of {topic}[{partition}] in 30s")


def crashed_mid_transaction(
    bootstrap: str, topology_file: Path, state_dir: Path, group: str, crash_at: str
) -> float:
    """Run a processor that exits (code 86) after producing a transaction's records and
    before committing it; return ``time.monotonic()`` of its exit."""
    crashing = ProcessorProcess(
        bootstrap,
        topology_file,
        state_dir,
        group,
        env={"SOW_CRASH_AT": crash_at, "SOW_MAX_BATCH": "500"},
    )
    assert crashing.process.wait(120) == 86, crashing.output
    return time.monotonic()


def test_a_successor_aborts_the_transaction_its_killed_predecessor_left_open(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = orders_topic(unique)
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter"))
    topology_file = write_topology(tmp_path / "orders.yaml", topic)
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    model = Model()
    publish(bootstrap, topic, 6_000, 500, 0.0, model)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    crashed_at = crashed_mid_transaction(bootstrap, topology_file, state_dir, group, "produced:2")
    stable = offsets(admin, topic.changelog_topic, 2, committed=True)
    high = offsets(admin, topic.changelog_topic, 2, committed=False)
    held = {p: (stable[p], high[p]) for p in range(2) if stable[p] < high[p]}
    assert held, f"no transaction was left open: stable {stable}, high {high}"

    def resolved() -> bool:
        now = offsets(admin, topic.changelog_topic, 2, committed=True)
        return all(now[p] >= end for p, (_, end) in held.items())

    # Nobody ends the transaction while no successor runs ...
    time.sleep(2.0)
    assert not resolved(), "the open transaction ended with no successor running"
    successor = ProcessorProcess(
        bootstrap, topology_file, state_dir, group, env={"SOW_MAX_BATCH": "500"}
    )
    # ... and the successor's InitProducerId (before its group join) aborts it at once:
    # the coordinator would time it out only 10 s after it began.
    waited_for(resolved, 30, "the end of the open transaction")
    resolved_after = time.monotonic() - crashed_at
    assert resolved_after < TRANSACTION_TIMEOUT_S - 1, resolved_after
    wait_until_committed(bootstrap, group, topic.kafka_topic, model.ends, 120)
    successor.terminate()
    assert store_contents(state_dir, topic) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)
    # The open transaction's records are in the log, aborted: read_uncommitted sees
    # them, read_committed never does.
    for p, (begin, end) in held.items():
        written = {
            r.offset()  # type: ignore[attr-defined]
            for r in read_uncommitted(bootstrap, topic.changelog_topic, p)
            if begin <= r.offset() < end  # type: ignore[attr-defined]
        }
        assert written, f"the open transaction wrote nothing to partition {p}"
        committed = {
            r.offset()  # type: ignore[attr-defined]
            for r in read_topic_partition(bootstrap, topic.changelog_topic, p)
        }
        assert not written & committed


def test_an_abandoned_transaction_times_out_and_readers_go_on(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """No successor: a read_committed reader of the changelog is held back (it does not
    see what another producer writes after the open transaction) until the coordinator
    aborts the transaction, ``transaction.timeout.ms`` after it began; then it goes on,
    without ever seeing the aborted records."""
    topic = orders_topic(unique, partitions=1)
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter"))
    topology_file = write_topology(tmp_path / "orders.yaml", topic)
    model = Model()
    publish(bootstrap, topic, 2_000, 500, 0.0, model)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    crashed_at = crashed_mid_transaction(
        bootstrap, topology_file, tmp_path / "state", f"{unique}-group", "produced:1"
    )
    (begin,) = offsets(admin, topic.changelog_topic, 1, committed=True).values()
    (end,) = offsets(admin, topic.changelog_topic, 1, committed=False).values()
    assert begin < end, "no transaction was left open"

    # Another producer appends after the open transaction (a control key, which every
    # changelog reader skips).
    other = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    other.produce(topic.changelog_topic, b"later", b"\x00test:later", 0)
    assert other.flush(10) == 0
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    reader.assign([TopicPartition(topic.changelog_topic, 0, 0)])
    seen: list[int] = []
    try:
        deadline = crashed_at + TRANSACTION_TIMEOUT_S + 20
        while time.monotonic() < deadline:
            message = reader.poll(0.1)
            if message is None or message.error():
                continue
            seen.append(message.offset())
            if message.key() == b"\x00test:later":
                break
        else:
            pytest.fail(f"the reader was still held back {deadline - crashed_at:.0f}s on")
        went_on_after = time.monotonic() - crashed_at
    finally:
        reader.close()
    assert not [o for o in seen if begin <= o < end], "a reader saw aborted records"
    assert seen[-1] >= end
    # Held back until the timeout (counted from the transaction's first record, just
    # before the crash), released within a few seconds of it.
    assert TRANSACTION_TIMEOUT_S - 1.5 < went_on_after < TRANSACTION_TIMEOUT_S + 5, went_on_after


def test_a_processor_stalled_past_the_transaction_timeout_carries_on(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The processor stands still for longer than ``transaction.timeout.ms`` between
    producing a transaction's records and committing it (a long GC pause, a frozen VM):
    the coordinator aborts the transaction and bumps the producer's epoch, so the
    producer's next call is fenced. No other processor took over: the processor carries
    on with a new producer (it used to stop as if one had), re-applies the aborted batch
    from the committed offsets, and applies nothing twice."""
    topic = orders_topic(unique)
    ensure_topics(bootstrap, topic_specs(Topology({"ORDERS": topic}), "sow.dead-letter"))
    topology_file = write_topology(tmp_path / "orders.yaml", topic)
    state_dir = tmp_path / "state"
    group = f"{unique}-group"
    model = Model()
    publish(bootstrap, topic, 6_000, 500, 0.0, model)
    stall = f"produced:2:{TRANSACTION_TIMEOUT_S + 2:g}"
    stalling = ProcessorProcess(
        bootstrap,
        topology_file,
        state_dir,
        group,
        env={"SOW_STALL_AT": stall, "SOW_MAX_BATCH": "500"},
    )
    wait_until_committed(bootstrap, group, topic.kafka_topic, model.ends, 120)
    assert stalling.process.poll() is None, stalling.output
    stalling.terminate()
    assert "stalling at step produced" in stalling.output
    assert "longer than transaction.timeout.ms" in stalling.output, stalling.output
    assert "another processor took over" not in stalling.output
    assert store_contents(state_dir, topic) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)


# -- 3. the broker SIGKILLed under a publish stream ---------------------------------------


class Messages:
    """A message source several publish streams draw from one after another: a stream
    that broke may still be drawing from it on a gRPC thread."""

    def __init__(self, messages: Iterator[bytes]) -> None:
        self._messages = messages
        self._lock = threading.Lock()

    def __iter__(self) -> Messages:
        return self

    def __next__(self) -> bytes:
        with self._lock:
            return next(self._messages)


class OutageModel(StreamedModel):
    """The model of a publish stream that goes on through broker outages: an
    acknowledged publish goes in; one refused, or outstanding when a stream broke, is
    *uncertain* (it may or may not be in the log) and its key is published again at the
    end (:meth:`settle`), so that the model says exactly what the SOW must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.uncertain: list[collections.deque[bytes]] = []
        self.broken_streams = 0
        self.refused = 0

    def publish_through(self, client: SowClient, messages: Messages) -> None:
        while True:
            sent: collections.deque[bytes] = collections.deque()
            self.uncertain.append(sent)

            def remembered(sent: collections.deque[bytes] = sent) -> Iterator[bytes]:
                for data in messages:
                    sent.append(data)
                    yield data

            try:
                for reply in client.publish_stream("ORDERS", remembered(), batch_size=100):
                    data = sent.popleft()
                    if reply.error_code:
                        self.refused += 1
                        self.uncertain.append(collections.deque([data]))
                        continue
                    self.state[reply.sow_key.encode()] = data
                    p = reply.position.partition
                    self.ends[p] = max(self.ends.get(p, 0), reply.position.offset + 1)
                return
            except Exception:  # a broken stream: its outstanding messages are uncertain
                self.broken_streams += 1
                time.sleep(0.5)

    def settle(self, client: SowClient) -> int:
        """Publish the uncertain keys again (acknowledged); return how many there were."""
        orders = sorted({orjson.loads(data)["orderId"] for sent in self.uncertain for data in sent})
        self.publish(client, (orjson.dumps({"orderId": o, "seq": "settled"}) for o in orders))
        return len(orders)


@pytest.mark.parametrize(
    "down_s", [0.0, TRANSACTION_TIMEOUT_S + 1], ids=["restarted-at-once", "down-past-the-timeout"]
)
def test_the_broker_killed_and_restarted_under_a_publish_stream_loses_nothing(
    own_broker: StartOwnBroker,
    unique: str,
    tmp_path: Path,
    down_s: float,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker is SIGKILLed while a client streams publishes and the processor holds
    a transaction open (its records produced, not committed: ``SOW_STALL_AT`` holds it
    there for 3 s), then started again on its log (same ports) at once, or after longer
    than the transaction timeout, when the coordinator aborts that transaction as it
    loads and fences the producer. The processor, the query service and the publisher
    carry on by themselves; every acknowledged publish is in the SOW, none applied twice."""
    monkeypatch.setenv("SOW_STALL_AT", "produced:10:3")
    broker = own_broker(overrides=QUICK_RESTART)
    if isinstance(broker, TansuBroker):
        pytest.skip("Tansu keeps its log in memory: a killed Tansu comes back empty")
    bootstrap = broker.bootstrap_servers
    topic = orders_topic(unique)
    model = OutageModel()
    with (
        running(bootstrap, topic, tmp_path / "state", unique) as app,
        SowClient(app.grpc_address) as client,
    ):
        model.publish(client, (orjson.dumps({"orderId": i, "seq": -1}) for i in range(1000)))
        stop = threading.Event()
        messages = Messages(paced(500, stop, seed=9))
        publisher = threading.Thread(target=model.publish_through, args=(client, messages))
        publisher.start()
        try:
            waited_for(
                lambda: any("stalling at step" in r.getMessage() for r in caplog.records),
                30,
                "a transaction held open",
            )
            acknowledged = sum(model.ends.values())
            broker.kill()
            time.sleep(down_s)
            broker.start()
            waited_for(lambda: sum(model.ends.values()) > acknowledged + 500, 90, "publishing")
            waited_for(lambda: app.readiness() is None, 90, "readiness after the restart")
            time.sleep(2.0)
        finally:
            stop.set()
            publisher.join(60)
        assert not publisher.is_alive()
        assert app.failure() is None, app.failure()
        uncertain = model.settle(client)
        restarts = [r.getMessage() for r in caplog.records if "processing failed" in r.getMessage()]
        logging.getLogger(__name__).warning(
            "broker down %.0fs: %d broken publish streams, %d refused publishes, %d keys "
            "settled; the processor restarted %d times: %s",
            down_s,
            model.broken_streams,
            model.refused,
            uncertain,
            len(restarts),
            restarts,
        )
        assert queried_sow(client, topic, model, timeout_s=90) == model.state
    assert_changelog_exactly_once(bootstrap, topic, model)
