"""The embedded Apache Kafka cluster: several KRaft nodes on loopback, each broker and
controller in one JVM, with a static controller quorum of all of them.

Layout of its directory (``<state dir>/kafka`` under ``sow serve`` with
``SOW_EMBEDDED_BROKERS=3``, a temporary folder for tests)::

    cluster.id          the id every member's log is formatted with
    node-1/ node-2/ ... one :class:`~processor.log.broker.embedded_kafka.EmbeddedKafka`
                        directory each (its log, ports, pid and broker log)

Every topic the cluster creates by itself (transaction state, consumer offsets, share
state, and topics created without a factor) has the replication of
:meth:`processor.log.Replication.resolve`: three copies and two in sync on three nodes.
A fenced broker (one that stopped heartbeating for :data:`SESSION_TIMEOUT_MS`) leaves the
in-sync replicas, so a dead or frozen node holds writes up for seconds, not for
``replica.lag.time.max.ms``.

Fault tests reach each member (:meth:`EmbeddedKafkaCluster.node`) and find who leads what:
the leader of a partition, the transaction coordinator of a transactional id, the group
coordinator of a group, and the active controller of the quorum.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from processor.errors import BrokerError
from processor.log.broker.common import KAFKA_FETCH_WAIT_MS
from processor.log.broker.embedded_kafka import EmbeddedKafka, new_cluster_id
from processor.log.replication import Replication

log = logging.getLogger(__name__)

#: Each member's heap cap (MB): three JVMs share the machine.
CLUSTER_HEAP_MB = 384
#: How long a broker may miss heartbeats before the controller fences it (its partitions
#: get new leaders, it leaves the in-sync replicas). Kafka's default is 9 s.
SESSION_TIMEOUT_MS = 4000
#: The internal topics' partitions: a few, so coordinators spread over the members.
INTERNAL_PARTITIONS = 3


def cluster_properties(nodes: int) -> dict[str, str]:
    """What a member of a ``nodes`` cluster sets beyond a single node's configuration."""
    factor, min_insync = Replication().resolve(nodes)
    copies, in_sync = str(factor), str(min_insync)
    return {
        "default.replication.factor": copies,
        "min.insync.replicas": in_sync,
        "offsets.topic.replication.factor": copies,
        "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
        "transaction.state.log.replication.factor": copies,
        "transaction.state.log.min.isr": in_sync,
        "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
        "share.coordinator.state.topic.replication.factor": copies,
        "share.coordinator.state.topic.min.isr": in_sync,
        "unclean.leader.election.enable": "false",
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "replica.lag.time.max.ms": "10000",
        # Leadership goes back to the preferred replica soon after a restarted member
        # has caught up (Kafka checks every 5 minutes by default).
        "leader.imbalance.check.interval.seconds": "10",
    }


class EmbeddedKafkaCluster:
    """``nodes`` Apache Kafka members on free loopback ports, started and stopped together
    (a :class:`~processor.log.broker.common.Broker`); each member can also be killed,
    stopped, paused and started again on its own log and ports (fault tests).

    ``directory`` None: a temporary folder, removed at ``stop()``. ``overrides`` are
    broker properties given to every member (tests shorten timers with them).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        nodes: int = 3,
        heap_mb: int = CLUSTER_HEAP_MB,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        if nodes < 2:
            raise BrokerError(f"a cluster has two members or more, not {nodes}")
        self._temporary = directory is None
        self._directory = directory or Path(tempfile.mkdtemp(prefix="sow-kafka-cluster-"))
        self._directory.mkdir(parents=True, exist_ok=True)
        settings = {**cluster_properties(nodes), **(overrides or {})}
        self.nodes: list[EmbeddedKafka] = []
        taken: set[int] = set()  # no two members on one port, saved ones included
        for n in range(1, nodes + 1):
            node = EmbeddedKafka(
                self._directory / f"node-{n}", heap_mb=heap_mb, overrides=settings, taken=taken
            )
            taken |= node.ports
            self.nodes.append(node)
        voters = ",".join(
            f"{n}@127.0.0.1:{node.controller_port}" for n, node in enumerate(self.nodes, 1)
        )
        cluster_id = self._cluster_id()
        for n, node in enumerate(self.nodes, 1):
            node.join(n, voters, cluster_id)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes)

    @property
    def description(self) -> str:
        factor, min_insync = Replication().resolve(len(self.nodes))
        return (
            f"embedded Apache Kafka {self.version} (KRaft, a cluster of {len(self.nodes)} "
            f"nodes, replication factor {factor}, min in-sync {min_insync}) at "
            f"{self.bootstrap_servers}, logs in {self._directory}"
        )

    @property
    def version(self) -> str:
        return self.nodes[0].version

    @property
    def fetch_wait_ms(self) -> int:
        return KAFKA_FETCH_WAIT_MS

    @property
    def group_protocol(self) -> str:
        return self.nodes[0].group_protocol

    @property
    def assignment(self) -> str:
        return self.nodes[0].assignment

    @property
    def keeps_log(self) -> bool:
        return not self._temporary

    @property
    def directory(self) -> Path:
        return self._directory

    def node(self, node_id: int) -> EmbeddedKafka:
        """The member with node id ``node_id`` (1-based)."""
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 120.0) -> EmbeddedKafkaCluster:
        """Start every member (formatting logs the first time) and wait until each
        answers and all are registered; returns self. BrokerError (every member
        stopped) when they do not."""
        try:
            # One after the other, from this thread: a JVM started from another thread
            # would not die with this process.
            for node in self.nodes:
                node.launch()
            log.info("%d Apache Kafka members launched; waiting for the quorum", len(self.nodes))
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                node.await_answer(max(1.0, deadline - time.monotonic()))
            self.wait_for_brokers(len(self.nodes), max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.kill()
            if self._temporary:
                shutil.rmtree(self._directory, ignore_errors=True)
            raise
        log.info("started %s", self.description)
        return self

    def stop(self) -> None:
        """Stop every member (a controlled shutdown each, at once); idempotent."""
        for node in self.nodes:
            node.resume()  # a paused member cannot shut down
        _each(self.nodes, lambda node: node.stop())
        if self._temporary:
            shutil.rmtree(self._directory, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL every member."""
        for node in self.nodes:
            node.kill()

    def start_node(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start one member again (after ``kill``/``stop``) and wait until the cluster
        counts it among its brokers."""
        self.node(node_id).start(timeout_s)
        self.wait_for_brokers(len(self.nodes), timeout_s)

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

    def wait_for_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        """Block until the cluster's metadata lists ``count`` live brokers."""
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # any client error means "not yet"
                seen = len(admin.list_topics(timeout=2.0).brokers)
                if seen == count:
                    return
            time.sleep(0.2)
        raise BrokerError(
            f"the embedded Kafka cluster lists {seen} live brokers, not {count}, after "
            f"{timeout_s:.0f}s; see the broker.log of each member under {self._directory}"
        )

    def wait_fully_replicated(self, timeout_s: float = 120.0) -> None:
        """Block until every partition of every topic has all its replicas in sync (what
        an operator waits for between the steps of a rolling restart)."""
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        lagging: list[str] = ["(not asked yet)"]
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                lagging = under_replicated(admin.list_topics(timeout=5.0))
                if not lagging:
                    return
            time.sleep(0.5)
        raise BrokerError(
            f"partitions still under-replicated after {timeout_s:.0f}s: {lagging[:10]}"
        )

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node id of the partition's leader now (-1: none)."""
        found = self.admin().list_topics(topic, timeout=10.0).topics.get(topic)
        if found is None or partition not in found.partitions:
            raise BrokerError(f"the cluster has no partition {topic}[{partition}] (yet)")
        return int(found.partitions[partition].leader)

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node id of ``transactional_id``'s transaction coordinator: the leader of
        its ``__transaction_state`` partition."""
        return self.leader_of("__transaction_state", _coordinator_partition(transactional_id))

    def group_coordinator(self, group_id: str) -> int:
        """The node id of ``group_id``'s group coordinator: the leader of its
        ``__consumer_offsets`` partition."""
        return self.leader_of("__consumer_offsets", _coordinator_partition(group_id))

    def active_controller(self) -> int:
        """The node id of the quorum's leader, as the running members last wrote it in
        their ``quorum-state`` files (the highest epoch wins); -1 when none says."""
        best = (-1, -1)
        for node in self.nodes:
            if not node.running:
                continue
            path = node.data_dir / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                state = json.loads(path.read_text())
                epoch, leader = int(state["leaderEpoch"]), int(state["leaderId"])
                best = max(best, (epoch, leader))
        return best[1]

    def _cluster_id(self) -> str:
        path = self._directory / "cluster.id"
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text:
                return text
        text = new_cluster_id()
        path.write_text(text)
        return text


def under_replicated(metadata: Any) -> list[str]:
    """``topic[partition]`` of every partition whose in-sync replicas are fewer than its
    replicas, in a confluent-kafka ClusterMetadata."""
    return [
        f"{name}[{p}]"
        for name, topic in sorted(metadata.topics.items())
        for p, partition in sorted(topic.partitions.items())
        if len(partition.isrs) < len(partition.replicas)
    ]


def _coordinator_partition(key: str) -> int:
    """The internal-topic partition Kafka hashes ``key`` to: Java's ``String.hashCode``
    (over UTF-16 code units), made non-negative (``Utils.abs``), modulo the count."""
    data = key.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % INTERNAL_PARTITIONS


def _each(nodes: Iterable[EmbeddedKafka], action: Callable[[EmbeddedKafka], object]) -> None:
    """Run ``action`` on every member at once; re-raise the first failure."""
    failures: list[BaseException] = []

    def run(node: EmbeddedKafka) -> None:
        try:
            action(node)
        except BaseException as exc:  # reported below, on the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
