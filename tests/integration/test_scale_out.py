"""Scale-out: processors and query services as separate OS processes, one broker.

A publisher writes updates (keys with per-key sequence numbers) the whole time while
processors join, are killed and are added; a reader queries every query service
throughout. At the end each query service's SOW equals a dict model of what was
published, the changelog holds every input position exactly once (nothing lost, nothing
applied twice across the rebalances), and no read failed, stalled or went backwards.

The local scale test, one command::

    python -m pytest -m heavy tests/integration/test_scale_out.py

(4 input partitions, 1 -> 2 -> 4 processors, SIGKILL one and add another mid-stream,
2 query services). The short variant (1 -> 2 processors, SIGKILL one, 1 query service)
runs on both consumer-group protocols; on KIP-848's (``SOW_GROUP_PROTOCOL=consumer``)
with the normal test suite, where the broker has it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, Producer

from processor.app import topic_specs
from processor.changelog import CONTROL_PREFIX, decode
from processor.client.sow_client import SowClient
from processor.keys import FieldKeyGenerator, partition_for
from processor.log.broker import Broker, TansuBroker
from processor.log.kafka.settings import ensure_topics
from processor.topology.loader import load_topology
from processor.topology.model import SowTopic
from tests.integration.harness import group_type, read_topic
from tests.integration.scale_cluster import Cluster

PARTITIONS = 4
KEYS = 200
#: Updates per burst and bursts per second: few, large batches, since the embedded
#: broker slows down as a partition accumulates batches (docs/brokers.md).
BURST = 100
BURST_EVERY_S = 0.25
#: Longest a query service may go without answering a read.
MAX_READ_GAP_S = 5.0


class Publisher:
    """Writes bursts of updates keyed by SowKey until stopped; keeps the dict model.

    ``model`` maps id -> the last sequence number delivered for it; ``positions`` holds
    the (partition, offset) of every delivered record.
    """

    def __init__(self, bootstrap: str, topic: SowTopic) -> None:
        self._topic = topic
        self._keys = FieldKeyGenerator(topic.domain, topic.keys)
        self._producer: Producer | None = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        self.model: dict[int, int] = {}
        self.positions: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._sequence = collections.Counter[int]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None  # no client outlives the test (and its broker)

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        self.positions.add((message.partition(), message.offset()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        n = 0
        while not self._stop.is_set():
            burst: dict[int, int] = {}
            for _ in range(BURST):
                ident = (n * 7919) % KEYS  # every key, in a scrambled order
                n += 1
                self._sequence[ident] += 1
                seq = burst[ident] = self._sequence[ident]
                key = self._keys({"id": ident}).encode()
                value = orjson.dumps({"id": ident, "seq": seq, "pad": "x" * 40})
                producer.produce(
                    self._topic.kafka_topic,
                    value,
                    key,
                    partition_for(key, self._topic.partitions),
                    on_delivery=self._delivered,
                )
            if producer.flush(30) == 0:
                self.model.update(burst)
            else:
                self.errors.append("a burst was not delivered in 30s")
            self._stop.wait(BURST_EVERY_S)


class Reader:
    """Queries every query service in turn until stopped, recording failures, the
    longest gap between answers, and any key whose sequence went backwards."""

    def __init__(self, topic: str, addresses: list[str]) -> None:
        self._topic = topic
        self._clients = {a: SowClient(a, publisher="") for a in addresses}
        self.answers = collections.Counter[str]()
        self.failures: list[str] = []
        self.backwards: list[str] = []
        self.max_gap_s: dict[str, float] = dict.fromkeys(addresses, 0.0)
        self._last: dict[str, float] = {}
        self._seen: dict[str, dict[int, int]] = {a: {} for a in addresses}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reader", daemon=True)

    def start(self) -> None:
        now = time.monotonic()
        self._last = dict.fromkeys(self._clients, now)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for address in self._clients:
            self._gap(address)
            self._clients[address].close()

    def _gap(self, address: str) -> None:
        gap = time.monotonic() - self._last[address]
        self.max_gap_s[address] = max(self.max_gap_s[address], gap)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for address, client in self._clients.items():
                try:
                    records, _, _ = client.query(self._topic, timeout=5)
                except Exception as exc:  # every failure is the finding
                    self.failures.append(f"{address}: {exc}")
                    continue
                self._gap(address)
                self._last[address] = time.monotonic()
                self.answers[address] += 1
                seen = self._seen[address]
                for record in records:
                    message = orjson.loads(record.data)
                    before = seen.get(message["id"], 0)
                    if message["seq"] < before:
                        self.backwards.append(f"{address}: id {message['id']} {before}->")
                    seen[message["id"]] = message["seq"]


def sow_of(address: str, topic: str) -> dict[int, int]:
    """id -> seq of every record a query service holds."""
    with SowClient(address, publisher="") as client:
        records, _, _ = client.query(topic, timeout=10)
    return {m["id"]: m["seq"] for m in (orjson.loads(r.data) for r in records)}


def wait_for_model(address: str, topic: str, model: dict[int, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (sow := sow_of(address, topic)) != model:
        if time.monotonic() > deadline:
            wrong = {k: (sow.get(k), v) for k, v in model.items() if sow.get(k) != v}
            raise AssertionError(f"{address} differs from the model (have, want): {wrong}")
        time.sleep(0.5)


def applied_positions(bootstrap: str, topic: SowTopic) -> list[tuple[int, int]]:
    """The (input partition, input offset) of every upsert in the changelog."""
    positions = []
    for message in read_topic(bootstrap, topic.changelog_topic, topic.partitions, 60):
        key, value = message.key(), message.value()  # type: ignore[attr-defined]
        if key.startswith(CONTROL_PREFIX) or value is None:
            continue
        envelope = decode(value)
        assert envelope.log_topic == topic.kafka_topic
        positions.append((envelope.log_partition, envelope.log_offset))
    return positions


@pytest.fixture
def scale(bootstrap: str, unique: str, tmp_path: Path) -> Iterator[Cluster]:
    topology = tmp_path / "scale.yaml"
    topology.write_text(
        f"topics:\n  - name: SCALE\n    key: /id\n    kafka_topic: {unique}.scale\n"
        f"    partitions: {PARTITIONS}\n"
    )
    dead_letters = f"{unique}.dead-letter"
    ensure_topics(bootstrap, topic_specs(load_topology(topology), dead_letters))
    cluster = Cluster(
        bootstrap,
        topology,
        tmp_path,
        group=f"{unique}-group",
        input_topic=f"{unique}.scale",
        partitions=PARTITIONS,
        env={"SOW_DEAD_LETTER_TOPIC": dead_letters, "SOW_FETCH_WAIT_MS": "20"},
    )
    try:
        yield cluster
    finally:
        cluster.stop()


def run_scenario(
    bootstrap: str,
    cluster: Cluster,
    services: int,
    steps: list[tuple[str, int]],
    first_env: dict[str, str] | None = None,
) -> dict[str, float]:
    """Start ``services`` query services and one processor (with ``first_env``), publish
    and read throughout, then run ``steps``, each followed by a settled assignment:

    - ("add", n) starts n processors;
    - ("kill", i) SIGKILLs processor i (1-based);
    - ("kill+add", i) SIGKILLs processor i and starts another at once;
    - ("kill+restart", i) SIGKILLs processor i and starts its instance id again at once
      on its state directory (a StatefulSet's replacement);
    - ("crashed", i) waits for processor i to crash (SOW_CRASH_AT);
    - ("restart", i) starts processor i's instance id again on its state directory.

    Then stop publishing and check everything. Returns the seconds each step took to
    settle (for the docs' rebalance figures)."""
    topic = load_topology(cluster.topology).topics["SCALE"]
    for _ in range(services):
        cluster.add_service()
    addresses = []
    for service in cluster.services:
        service.wait_ready(90)
        addresses.append(service.grpc_address)
        # The banner comes as the service starts serving; its replica may still be reading
        # the changelogs' ends (a query then answers UNAVAILABLE, catching up). The reader
        # measures availability through the rebalances, from a caught-up start.
        with SowClient(service.grpc_address, publisher="") as client:
            client.query("SCALE", wait_for_catch_up=True, timeout=60)
    publisher = Publisher(bootstrap, topic)
    reader = Reader("SCALE", addresses)
    publisher.start()
    reader.start()
    settle: dict[str, float] = {}
    try:
        cluster.add_processor(first_env).wait_ready(90)
        settle["start 1"] = cluster.wait_settled(60)
        time.sleep(2)
        for action, n in steps:
            began = time.monotonic()
            if action in ("kill", "kill+add", "kill+restart"):
                cluster.processors[n - 1].kill()
            if action == "crashed":
                crashing = cluster.processors[n - 1]
                assert crashing.process.wait(120) == 86, crashing.log()
            if action in ("restart", "kill+restart"):
                cluster.add_processor(instance=n)
            for _ in range(n if action == "add" else 1 if action == "kill+add" else 0):
                cluster.add_processor()
            cluster.wait_settled(90)
            settle[f"{action} {n}"] = time.monotonic() - began
            time.sleep(2)  # publish and read across the new assignment
    finally:
        publisher.stop()
    try:
        for address in addresses:
            try:
                wait_for_model(address, "SCALE", publisher.model, 60)
            except AssertionError as stale:
                members = [*cluster.processors, *cluster.services]
                logs = "\n".join(f"--- {m.name}\n{m.log()[-6000:]}" for m in members)
                raise AssertionError(f"{stale}\nthe members' logs:\n{logs}") from None
    finally:
        reader.stop()

    assert publisher.errors == []
    assert len(publisher.model) == KEYS
    positions = applied_positions(bootstrap, topic)
    twice = [p for p, count in collections.Counter(positions).items() if count > 1]
    assert twice == [], f"{len(twice)} input positions applied twice, e.g. {twice[:5]}"
    assert set(positions) == publisher.positions  # and none lost
    assert reader.failures == []
    assert reader.backwards == []
    assert all(reader.answers[a] > 0 for a in addresses)
    assert max(reader.max_gap_s.values()) < MAX_READ_GAP_S, reader.max_gap_s
    codes = cluster.stop()
    assert set(codes.values()) == {0}, codes
    print(f"reads answered {dict(reader.answers)}, longest gap (s) {reader.max_gap_s}")
    return settle


# Heavy, and the killed instance starts again: on the embedded Tansu broker a processor
# SIGKILLed mid-transaction leaves its transaction open until its transactional id starts
# again (Tansu never aborts it), freezing the query services on the partitions it touched
# (docs/scaling.md); a run where the survivor alone took over failed so once.
@pytest.mark.parametrize(
    "group_protocol",
    [
        pytest.param("classic", marks=pytest.mark.heavy),
        # Never on Tansu (no KIP-848 groups there), so none of the above applies: Kafka
        # aborts a killed processor's transaction within its 10 s timeout.
        "consumer",
    ],
)
def test_a_processor_joins_and_one_is_killed_mid_stream(
    broker: Broker, bootstrap: str, scale: Cluster, group_protocol: str
) -> None:
    """1 -> 2 processors, then SIGKILL the first and start its instance again, on either
    consumer-group protocol (eager rebalances, or KIP-848's incremental ones)."""
    if group_protocol == "consumer" and isinstance(broker, TansuBroker):
        pytest.skip("the embedded Tansu broker has no KIP-848 groups")
    scale.env["SOW_GROUP_PROTOCOL"] = group_protocol
    steps = [("add", 1), ("kill+restart", 1)]
    settle = run_scenario(bootstrap, scale, services=1, steps=steps)
    assert group_type(bootstrap, scale.group) == group_protocol.upper()
    print("settled after (s):", settle)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_scale_out_to_four_processors_and_replace_a_killed_one(
    bootstrap: str, scale: Cluster
) -> None:
    """1 -> 2 -> 4 processors, then SIGKILL one and start its instance again (a
    StatefulSet's replacement), then add a fifth, with two query services."""
    steps = [("add", 1), ("add", 2), ("kill+restart", 2), ("add", 1)]
    settle = run_scenario(bootstrap, scale, services=2, steps=steps)
    print("settled after (s):", settle)


@pytest.mark.heavy
@pytest.mark.timeout(600)
@pytest.mark.xfail(
    reason="Tansu commits the transaction a crashed producer left open when its "
    "transactional id starts again (Kafka aborts it): a batch another processor has "
    "re-applied meanwhile appears twice in the changelog (same data; docs/scaling.md)",
    strict=False,
)
def test_a_processor_crashed_mid_transaction_and_restarted_after_a_takeover(
    bootstrap: str, scale: Cluster
) -> None:
    """Processor 1 dies between sending offsets and committing; processor 2 takes its
    partitions and re-applies the batch; then processor 1's instance starts again."""
    run_scenario(
        bootstrap,
        scale,
        services=1,
        steps=[("add", 1), ("crashed", 1), ("restart", 1)],
        first_env={"SOW_CRASH_AT": "offsets-sent:60"},
    )
