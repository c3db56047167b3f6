"""Broker faults on a three-member cluster, under load, checked against a model.

A :class:`Workload` runs kafka-sow (processor, replica, gRPC service in this process) on an
embedded Apache Kafka cluster with a SOW topic, a view over it and a queue over a plain
topic, and keeps, for as long as it runs:

- publishers: unary publishes with ``processed`` acks at a steady rate, each outcome
  (position or error) and latency (publish -> visible in this service's SOW) recorded;
  every tenth acknowledged publish is checked at once by a query (its record, or a later
  one, is in the SOW: the ack told the truth);
- a sow_and_subscribe of the SOW topic, open throughout;
- an idempotent producer of queue messages (acks=all) and a queue consumer that
  acknowledges what it is given;
- a readiness probe sampled every 0.2 s.

:meth:`Workload.verify` ends it and checks what every fault test must end with: every
acknowledged publish is in the input log and applied once in the changelog; the stores,
the changelog and a query equal the input log folded per key; the subscriber saw every
change after its snapshot once (no gap, no duplicate); the view equals its recomputation
from the SOW; every queue message acknowledged by Kafka was delivered at least once.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor import changelog
from processor.app import Application, start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.errors import ServiceError
from processor.log.broker import EmbeddedKafkaCluster
from processor.topology import Topology
from processor.topology.loader import load_topology
from processor.wire import sow_pb2
from tests.integration.harness import difference, read_topic, store_contents
from tests.integration.queue_helpers import Consumer
from tests.integration.subscription_helpers import Collector

PARTITIONS = 2
KEYS = 400
GROUPS = 7
#: Publishes per second per publisher thread, and the threads.
RATE = 40
PUBLISHERS = 2
#: How long one publish may take (it waits through a leader election).
PUBLISH_TIMEOUT_S = 15.0
QUEUE_RATE = 50


def write_topology(path: Path, unique: str) -> Topology:
    path.write_text(
        f"""
topics:
  - name: ORDERS
    key: /id
    partitions: {PARTITIONS}
    kafka_topic: {unique}.orders
  - {{name: events, sow: false, kafka_topic: {unique}.events, partitions: {PARTITIONS}}}
views:
  - name: ByGroup
    message_type: json
    underlying: ORDERS
    projection: ["/group AS /group", "SUM(/qty) AS /total", "COUNT(/id) AS /count"]
    grouping: [/group]
    partitions: {PARTITIONS}
    kafka_topic: {unique}.bygroup
queues:
  - {{name: Q, message_type: json, underlying: events, semantics: at-least-once,
      lease_period: 60s, max_per_subscription_backlog: 50}}
"""
    )
    return load_topology(path)


@dataclass
class Outcome:
    """One publish: when it was sent, how long it took, and its position or error."""

    sent: float
    took: float
    key: int
    data: bytes
    position: tuple[str, int, int] | None = None
    error: str = ""


@dataclass
class Figures:
    """What a user saw during one fault (docs/reliability.md)."""

    fault: str
    began: float = 0.0
    ended: float = 0.0
    #: The longest wait between two successful publishes of one partition, from the
    #: fault's start until 20 s after its end: how long writes stalled.
    stall_s: float = 0.0
    not_ready_s: float = 0.0
    not_ready_after_s: float | None = None
    ready_again_after_s: float | None = None
    resumed_after_s: float | None = None
    refused: int = 0
    worst_visible_s: float = 0.0
    published: int = 0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        return (
            f"FAULT {self.fault}: {self.published} publishes, {self.refused} refused "
            f"{collections.Counter(self.errors).most_common(2)}; writes stalled at most "
            f"{self.stall_s:.1f} s; first success {seconds(self.resumed_after_s)} s after "
            f"the fault ended; worst publish -> "
            f"visible {self.worst_visible_s:.2f} s; not ready {self.not_ready_s:.1f} s (went "
            f"false {seconds(self.not_ready_after_s)} s after the fault began, true "
            f"{seconds(self.ready_again_after_s)} s after it ended)"
        )


class Workload:
    """kafka-sow on ``cluster`` under the load of the module doc (``start`` / ``verify``)."""

    def __init__(self, cluster: EmbeddedKafkaCluster, tmp_path: Path, unique: str) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        self.unique = unique
        self.topology = write_topology(tmp_path / "topology.yaml", unique)
        self.settings = Settings(
            bootstrap_servers=self.bootstrap,
            state_dir=tmp_path / "state",
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            dead_letter_topic=f"{unique}.dead-letter",
        )
        self.outcomes: list[Outcome] = []
        self.ack_lies: list[str] = []
        self.readiness: list[tuple[float, str | None]] = []
        self.queued: set[int] = set()
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.app: Application | None = None

    # -- running ----------------------------------------------------------------------

    def start(self) -> None:
        self.app = start(self.settings, topology=self.topology)
        deadline = time.monotonic() + 120
        while self.app.readiness() is not None:
            assert time.monotonic() < deadline, f"not ready: {self.app.readiness()}"
            time.sleep(0.1)
        self.client = SowClient(self.app.grpc_address)
        seed = [orjson.dumps(self._message(k, 0)) for k in range(KEYS)]
        replies = list(self.client.publish_stream("ORDERS", seed, ack="processed"))
        assert all(not r.error_code for r in replies), replies[:3]
        self.subscriber = Collector(
            self.client.sow_and_subscribe("ORDERS", batch_size=500, max_backlog=1_000_000)
        )
        assert self.subscriber.wait_for(lambda c: c.group_end() is not None, 60)
        self.consumer = Consumer(self.client, "Q", ack=True, max_backlog=50)
        for n in range(PUBLISHERS):
            self._spawn(self._publish, n)
        self._spawn(self._queue_messages)
        self._spawn(self._probe)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    @staticmethod
    def _message(key: int, seq: int) -> dict[str, Any]:
        return {"id": key, "group": key % GROUPS, "qty": seq % 97, "seq": seq}

    def _publish(self, number: int) -> None:
        rng = random.Random(number)
        with SowClient(self.app.grpc_address if self.app else "") as client:
            began, sent = time.monotonic(), 0
            while not self.stop.is_set():
                pause = began + sent / RATE - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sent += 1
                key = rng.randrange(KEYS)
                data = orjson.dumps(self._message(key, number * 10_000_000 + sent))
                at = time.monotonic()
                outcome = Outcome(at, 0.0, key, data)
                try:
                    reply = client.publish(
                        "ORDERS", data, ack="processed", timeout=PUBLISH_TIMEOUT_S
                    )
                    p = reply.position
                    outcome.position = (p.topic, p.partition, p.offset)
                except ServiceError as exc:
                    outcome.error = f"{exc.code}: {str(exc)[:160]}"
                outcome.took = time.monotonic() - at
                self.outcomes.append(outcome)
                if outcome.position is not None and sent % 10 == 0:
                    self._check_ack(client, reply.sow_key, outcome.position)

    def _check_ack(self, client: SowClient, sow_key: str, position: tuple[str, int, int]) -> None:
        """A ``processed`` ack means a query of this service sees the record (or a later
        update of its key) at once."""
        try:
            records, _, _ = client.query("ORDERS", sow_keys=[sow_key], timeout=10)
        except ServiceError as exc:
            self.ack_lies.append(f"query after the ack of {position} failed: {exc}")
            return
        offsets = [r.position.offset for r in records]
        if not offsets or max(offsets) < position[2]:
            self.ack_lies.append(f"acked {position} but the SOW holds offsets {offsets}")

    def _queue_messages(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "log_level": 0}
        )

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.queued.add(orjson.loads(message.value())["id"])

        began, n = time.monotonic(), 0
        while not self.stop.is_set():
            pause = began + n / QUEUE_RATE - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            producer.produce(
                f"{self.unique}.events", orjson.dumps({"id": n}), on_delivery=delivered
            )
            producer.poll(0)
            n += 1
        producer.flush(120)

    def _probe(self) -> None:
        while not self.stop.wait(0.2):
            assert self.app is not None
            self.readiness.append((time.monotonic(), self.app.readiness()))

    # -- a fault's figures --------------------------------------------------------------

    def figures(self, fault: str, began: float, ended: float) -> Figures:
        """What the load saw from ``began`` (fault injected) to ``ended`` (fault over)
        and after: publishes refused, the first success after the end, readiness."""
        figures = Figures(fault, began, ended)
        during = [o for o in self.outcomes if began <= o.sent + o.took <= ended + 20]
        figures.published = len(during)
        refused = [o for o in during if o.error]
        figures.refused = len(refused)
        figures.errors = [o.error.split(":", 1)[0] for o in refused]
        ok = [o for o in during if o.position is not None]
        figures.worst_visible_s = max((o.took for o in ok), default=0.0)
        figures.stall_s = _longest_stall(self.outcomes, began, ended + 20)
        resumed = [o.sent + o.took for o in ok if o.sent + o.took >= ended]
        if resumed:
            figures.resumed_after_s = max(0.0, min(resumed) - ended)
        samples = [(t, r) for t, r in self.readiness if began <= t <= ended + 20]
        figures.not_ready_s = 0.2 * sum(1 for _, r in samples if r is not None)
        first_false = next((t for t, r in samples if r is not None), None)
        if first_false is not None:
            figures.not_ready_after_s = first_false - began
            later = [t for t, r in samples if t >= max(ended, first_false) and r is None]
            if later:
                figures.ready_again_after_s = max(0.0, min(later) - ended)
        return figures

    def wait_for_publishes(self, count: int = 20, timeout_s: float = 120.0) -> None:
        """Block until ``count`` more publishes succeed (the load goes on)."""
        deadline = time.monotonic() + timeout_s
        base = sum(1 for o in self.outcomes if o.position is not None)
        while sum(1 for o in self.outcomes if o.position is not None) < base + count:
            assert time.monotonic() < deadline, (
                f"publishes did not resume within {timeout_s:.0f}s; the last errors: "
                f"{[o.error for o in self.outcomes[-3:]]}; readiness: "
                f"{self.app.readiness() if self.app else None}"
            )
            time.sleep(0.2)

    # -- the end ------------------------------------------------------------------------

    def verify(self) -> None:
        """Stop the load and check everything the module doc lists."""
        self.stop.set()
        for thread in self._threads:
            thread.join(PUBLISH_TIMEOUT_S + 60)
        assert self.app is not None
        acked = [o for o in self.outcomes if o.position is not None]
        assert len(acked) > 30, f"only {len(acked)} publishes succeeded"
        assert not self.ack_lies, self.ack_lies[:5]
        ends: dict[int, Any] = {}
        for o in acked:
            assert o.position is not None
            topic, partition, offset = o.position
            if partition not in ends or ends[partition].offset < offset:
                ends[partition] = sow_pb2.Position(topic=topic, partition=partition, offset=offset)
        records, _, _ = self.client.query(
            "ORDERS", min_position=list(ends.values()), timeout=180, batch_size=10_000
        )
        sow = {r.sow_key.encode(): r.data for r in records}
        inputs = self._input_log()
        logged = {(r.topic(), r.partition(), r.offset()): r.value() for r in inputs}
        lost = [o.position for o in acked if logged.get(o.position) != o.data]  # type: ignore[arg-type]
        assert not lost, f"{len(lost)} acknowledged publishes are not in the log: {lost[:5]}"
        # Published without a SowKey: the records' keys are empty, the SowKey is /id's.
        folded: dict[int, bytes] = {}
        for record in sorted(inputs, key=lambda r: (r.partition(), r.offset())):
            folded[orjson.loads(record.value())["id"]] = record.value()
        assert by_id(sow) == folded, difference(by_id(sow), folded)
        self._verify_subscriber(sow)
        self._verify_view(sow)
        self._verify_queue()
        self.consumer.close()
        self.subscriber.stop()
        self.client.close()
        self.app.stop()
        self.app = None
        orders = self.topology.topics["ORDERS"]
        stores = by_id(store_contents(self.settings.state_dir, orders))
        assert stores == folded, difference(stores, folded)
        applied = self._changelog(orders.changelog_topic)
        missing = [o.position for o in acked if o.position not in applied]
        assert not missing, f"{len(missing)} acknowledged publishes never applied: {missing[:5]}"

    def _input_log(self) -> list[Any]:
        topic = self.topology.topics["ORDERS"].kafka_topic
        return read_topic(self.bootstrap, topic, PARTITIONS, timeout_s=120)

    def _changelog(self, name: str) -> set[tuple[str, int, int]]:
        """The input positions the changelog applied, each once (exactly once)."""
        seen: set[tuple[str, int, int]] = set()
        for record in read_topic(self.bootstrap, name, PARTITIONS, timeout_s=120):
            key = record.key()  # type: ignore[attr-defined]
            if key.startswith(changelog.CONTROL_PREFIX) or record.value() is None:  # type: ignore[attr-defined]
                continue
            envelope = changelog.decode(record.value())  # type: ignore[attr-defined]
            position = (envelope.log_topic, envelope.log_partition, envelope.log_offset)
            assert position not in seen, f"update {position} is in the changelog twice"
            seen.add(position)
        return seen

    def _verify_subscriber(self, sow: dict[bytes, bytes]) -> None:
        """Every change after the subscriber's snapshot came once, and its state ends
        equal to the SOW."""
        collector = self.subscriber

        def rebuilt(c: Collector) -> dict[bytes, bytes]:
            state = {r.sow_key.encode(): r.data for r in c.query_records()}
            for change in c.changes():
                if change.kind == sow_pb2.CHANGE_PUBLISH:
                    state[change.sow_key.encode()] = change.record.data
                else:
                    state.pop(change.sow_key.encode(), None)
            return state

        assert collector.wait_for(lambda c: rebuilt(c) == sow, 120), (
            f"the subscriber ended with {difference(rebuilt(collector), sow)}; "
            f"its error: {collector.error}"
        )
        assert collector.error is None, collector.error
        got = [
            (c.changelog_position.partition, c.changelog_position.offset)
            for c in collector.changes()
        ]
        assert len(got) == len(set(got)), "the subscriber got a change twice"
        snapshot = {p.partition: p.offset for p in collector.group_end().snapshot}
        name = self.topology.topics["ORDERS"].changelog_topic
        expected = {
            (r.partition(), r.offset())  # type: ignore[attr-defined]
            for r in read_topic(self.bootstrap, name, PARTITIONS, timeout_s=120)
            if not r.key().startswith(changelog.CONTROL_PREFIX)  # type: ignore[attr-defined]
            and r.offset() >= snapshot.get(r.partition(), 0)  # type: ignore[attr-defined]
        }
        gaps = sorted(expected - set(got))
        assert not gaps, f"the subscriber missed {len(gaps)} changes: {gaps[:5]}"

    def _verify_view(self, sow: dict[bytes, bytes]) -> None:
        expected: dict[int, tuple[int, int]] = {}
        for data in sow.values():
            message = orjson.loads(data)
            total, count = expected.get(message["group"], (0, 0))
            expected[message["group"]] = (total + message["qty"], count + 1)
        deadline = time.monotonic() + 120
        got: dict[int, tuple[int, int]] = {}
        while time.monotonic() < deadline:
            records, _, _ = self.client.query("ByGroup")
            got = {}
            for record in records:
                row = orjson.loads(record.data)
                got[row["group"]] = (int(row["total"]), int(row["count"]))
            if got == expected:
                return
            time.sleep(0.5)
        raise AssertionError(f"the view {got} is not its recomputation {expected}")

    def _verify_queue(self) -> None:
        deadline = time.monotonic() + 180
        missing: set[int] = set()
        while time.monotonic() < deadline:
            missing = self.queued - set(self.consumer.ids())
            if not missing:
                return
            time.sleep(0.5)
        raise AssertionError(
            f"{len(missing)} of {len(self.queued)} queue messages Kafka acknowledged were "
            f"never delivered: {sorted(missing)[:10]}"
        )

    def close(self) -> None:
        """Stop whatever still runs (a failed test's cleanup)."""
        self.stop.set()
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
                self.subscriber.stop()
                self.client.close()
            self.app.stop()
            self.app = None


def _longest_stall(outcomes: list[Outcome], began: float, until: float) -> float:
    """The longest time between successive successful publishes of one partition in
    [began, until] (the window's edges count as successes)."""
    done: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}  # none: all of it
    for o in outcomes:
        if o.position is not None and began <= o.sent + o.took <= until:
            done[o.position[1]].append(o.sent + o.took)
    worst = 0.0
    for times in done.values():
        edges = [began, *sorted(times), until]
        worst = max(worst, *(b - a for a, b in itertools.pairwise(edges)))
    return worst


def by_id(records: dict[bytes, bytes]) -> dict[int, bytes]:
    """SOW records by their /id."""
    return {orjson.loads(data)["id"]: data for data in records.values()}
