"""Standby stores and static membership: group-mode processors on a real broker, each
with its own RocksDB state directory, running in threads of this process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from processor.app import build_processor, topic_specs
from processor.config import Settings
from processor.engine.processor import Processor
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.kafka.settings import ensure_topics
from processor.observability.metrics import ComponentCollector
from processor.topology.model import SowTopic, Topology
from tests.integration.harness import namespaced, store_contents

PARTITIONS = 4
KEYS = 8000


class Running:
    """A processor running in a thread; ``stop`` stops it and re-raises its failure."""

    def __init__(self, processor: Processor, name: str = "processor") -> None:
        self.processor = processor
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.processor.run()
        except BaseException as exc:
            self.failure = exc

    def stop(self) -> None:
        self.processor.stop()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the processor did not stop"
        if self.failure is not None:
            raise self.failure


@pytest.fixture
def orders(bootstrap: str, unique: str) -> Topology:
    topology = namespaced(unique, SowTopic("ORDERS", keys=("/id",), partitions=PARTITIONS))
    ensure_topics(bootstrap, topic_specs(topology, f"{unique}.dead-letter"))
    return topology


@pytest.fixture
def running() -> Iterator[list[Running]]:
    """Processors a test started; those still running are stopped after it."""
    started: list[Running] = []
    yield started
    for each in started:
        each.processor.stop()
    for each in started:
        each.stop()


def settings(bootstrap: str, unique: str, state_dir: Path, **extra: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        state_dir=state_dir,
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
    )._with(extra)


def publish(
    bootstrap: str, topic: SowTopic, ids: range, round_: int, model: dict[bytes, bytes]
) -> None:
    """One update per id (``round_`` in the value), keyed and partitioned as the product does."""
    generator = FieldKeyGenerator(topic.domain, topic.keys)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in ids:
        sow_key = generator({"id": i}).encode()
        value = orjson.dumps({"id": i, "round": round_})
        producer.produce(
            topic.kafka_topic, value, sow_key, partition_for(sow_key, topic.partitions)
        )
        model[sow_key] = value
        if i % 2000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 40.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except RuntimeError:  # a dict the poll loop changed while we read it
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def failover(
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    orders: Topology,
    running: list[Running],
    standby: str,
) -> tuple[Processor, int]:
    """Two members share 4 partitions (the survivor with ``standby``); the other one
    leaves after the load; the survivor takes its partitions and applies new input. The
    survivor's SOW must equal the model. Returns the survivor and what its takeover
    replayed (changelog records)."""
    topic = orders.topics["ORDERS"]
    leaving = build_processor(
        settings(bootstrap, unique, tmp_path / "a", instance_id="a"), bootstrap, orders
    )
    survivor = build_processor(
        settings(bootstrap, unique, tmp_path / "b", instance_id="b", standby=standby),
        bootstrap,
        orders,
    )
    running += [Running(leaving), Running(survivor)]
    wait_for(
        "both members to share the partitions",
        lambda: len(leaving.owned_partitions) == 2 and len(survivor.owned_partitions) == 2,
    )
    model: dict[bytes, bytes] = {}
    publish(bootstrap, topic, range(KEYS), 1, model)
    wait_for("the load to be applied", lambda: leaving.applied + survivor.applied >= KEYS)
    assert 0 < leaving.applied < KEYS, "the load was not shared (the group did not settle)"
    if standby == "all":
        assert len(survivor.standby_partitions) == 2
        # Each record the other member applied is one changelog record (plus progress).
        wait_for(
            "the standby stores to catch up",
            lambda: survivor.standby_records >= leaving.applied and survivor.standby_behind() == 0,
        )
    before_restored, before_applied = survivor.restored_records, survivor.applied
    running[0].stop()
    publish(bootstrap, topic, range(0, KEYS, 40), 2, model)
    wait_for(
        "the survivor to apply the new input",
        lambda: survivor.applied - before_applied >= KEYS // 40,
    )
    running[1].stop()
    assert store_contents(tmp_path / "b", topic) == model
    return survivor, survivor.restored_records - before_restored


def test_failover_to_a_warm_standby_replays_only_the_tail(
    bootstrap: str, unique: str, tmp_path: Path, orders: Topology, running: list[Running]
) -> None:
    survivor, replayed = failover(bootstrap, unique, tmp_path, orders, running, "all")
    # The other member's 2 partitions hold about KEYS / 2 records plus progress records;
    # the standby had them all, so the takeover replays at most a few progress records.
    assert replayed < 50, f"the takeover replayed {replayed} changelog records"
    assert survivor.standby_partitions == []
    figures = {
        sample.name: sample.value
        for metric in ComponentCollector(lambda: survivor, lambda: None, lambda: None).collect()
        for sample in metric.samples
    }
    assert figures["sow_standby_records_total"] == survivor.standby_records > 0
    assert figures["sow_processor_restored_records_total"] == survivor.restored_records


def test_failover_without_standby_replays_the_whole_changelog(
    bootstrap: str, unique: str, tmp_path: Path, orders: Topology, running: list[Running]
) -> None:
    _, replayed = failover(bootstrap, unique, tmp_path, orders, running, "off")
    assert replayed >= KEYS // 4, f"the takeover replayed only {replayed} changelog records"


class Revocations(logging.Handler):
    """When the processor running in thread ``name`` logged a revoke (thread-safe)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.name and record.getMessage().startswith("revoked "):
            self.at.append(time.monotonic())


# The heavy tier: static membership is off by default (the Helm chart turns it on), and the
# dynamic contrast (a member that leaves is revoked at once) is a long run.
@pytest.mark.heavy
@pytest.mark.parametrize("membership", ["static", "dynamic"])
def test_static_member_keeps_its_partitions_across_a_quick_restart(
    bootstrap: str,
    unique: str,
    tmp_path: Path,
    orders: Topology,
    running: list[Running],
    membership: str,
) -> None:
    """A static member (group.instance.id from the instance id) does not leave the group
    when it stops: the group waits up to the session timeout (6 s) for it to come back (a
    dynamic member leaves at once), and restarted within that time it gets the same
    partitions back (on Kafka without a rebalance; Tansu rebalances once the session
    times out, and the range assignor, which orders static members by instance id, gives
    them back)."""
    revocations = Revocations("member-b")
    logger = logging.getLogger("processor.engine.assignment")
    logger.addHandler(revocations)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:

        def member(name: str) -> Processor:
            config = Settings.from_env(
                {},
                bootstrap_servers=bootstrap,
                state_dir=str(tmp_path / name),
                group_id=f"{unique}-group",
                dead_letter_topic=f"{unique}.dead-letter",
                instance_id=name,
                membership=membership,
            )
            assert config.membership == membership
            processor = build_processor(config, bootstrap, orders)
            running.append(Running(processor, f"member-{name}"))
            return processor

        first, other = member("a"), member("b")
        wait_for(
            "both members to share the partitions",
            lambda: len(first.owned_partitions) == 2 and len(other.owned_partitions) == 2,
        )
        owned = first.owned_partitions
        revocations.at.clear()
        stopped = time.monotonic()
        running[0].stop()
        if membership == "dynamic":
            wait_for("the other member to be revoked", lambda: bool(revocations.at), 30)
            waited = revocations.at[0] - stopped
            assert waited < 4.0, f"the group waited {waited:.1f}s for a dynamic member that left"
            return
        again = member("a")
        wait_for(
            "the restarted member's partitions",
            lambda: again.ready.is_set() and len(again.owned_partitions) == 2,
            40,
        )
        assert again.owned_partitions == owned
        if revocations.at:  # Tansu: a rebalance once the old session timed out
            waited = revocations.at[0] - stopped
            assert waited >= 4.0, (
                f"the group rebalanced {waited:.1f}s after a static member stopped"
            )
    finally:
        logger.removeHandler(revocations)
        logger.setLevel(level)
