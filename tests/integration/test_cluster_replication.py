"""Replication on a three-member embedded Apache Kafka (issue 33, points 1 and 2): every
topic the product creates (dead letters, inputs, repartition, changelogs, a view's and a
queue's topics) gets three copies with two in sync, or what SOW_REPLICATION_FACTOR says;
``sow check-config`` finds nothing to warn about; publishing and querying go on through
an input leader's death (the CI smoke test of broker faults); and ``sow serve`` with
SOW_EMBEDDED_BROKERS=3 runs its own cluster under its state directory, serves, stops
cleanly with no JVM left, and finds its SOW again on the next start.

The in-process tests share one cluster (a class-scoped fixture: one start costs ~13 s),
stopped before the ``sow serve`` test starts a cluster of its own."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from processor.app import start
from processor.cli.check import replication_summary
from processor.config import Settings
from processor.log.broker import EMBEDDED_ENV, EmbeddedKafkaCluster
from processor.log.topics import topic_specs
from processor.topology import load_topology
from processor.topology.model import SowTopic, Topology
from tests.conftest import TEST_BROKER_SETTINGS
from tests.integration.harness import namespaced, namespaced_topology, running_sow
from tests.integration.serve_helpers import READY, cmdline, serve_env

pytestmark = pytest.mark.skipif(
    os.environ.get(EMBEDDED_ENV, "").strip().lower() == "tansu" or shutil.which("java") is None,
    reason="a cluster is three embedded Apache Kafka members (Java 17+); Tansu runs one node",
)

#: A SOW topic, a view over it and a queue over it: every kind of topic the product makes.
TOPOLOGY = """
topics:
  - {name: orders, key: /orderId, partitions: 2}
views:
  - name: ByRegion
    message_type: json
    underlying: orders
    projection: ["COUNT(/orderId) AS /orders", "/region AS /region"]
    grouping: [/region]
queues:
  - {name: Q, message_type: json, underlying: orders}
"""


@pytest.fixture(scope="class")
def cluster() -> Iterator[EmbeddedKafkaCluster]:
    started = EmbeddedKafkaCluster(nodes=3, overrides=TEST_BROKER_SETTINGS).start()
    try:
        yield started
    finally:
        gc.collect()  # the tests' clients go while the cluster answers
        started.stop()


def _replication(bootstrap: str, topics: list[str]) -> dict[str, tuple[set[int], str]]:
    """Each topic's replica counts (over its partitions) and its min.insync.replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    metadata = admin.list_topics(timeout=10)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
    configs = {
        resource.name: future.result(10)
        for resource, future in admin.describe_configs(resources).items()
    }
    return {
        name: (
            {len(p.replicas) for p in metadata.topics[name].partitions.values()},
            configs[name]["min.insync.replicas"].value,
        )
        for name in topics
    }


def _run(topology: Topology, settings: Settings) -> None:
    """Start kafka-sow until it is ready (its topics made, its group joined), then stop."""
    app = start(settings, topology=topology)
    try:
        deadline = time.monotonic() + 90
        while app.readiness() is not None:
            assert time.monotonic() < deadline, f"not ready after 90s: {app.readiness()}"
            time.sleep(0.1)
    finally:
        app.stop()


class TestOnOneCluster:
    def test_every_topic_the_product_creates_has_three_copies_two_in_sync(
        self, cluster: EmbeddedKafkaCluster, tmp_path: Path, unique: str
    ) -> None:
        (tmp_path / "topology.yaml").write_text(TOPOLOGY)
        topology = namespaced_topology(unique, load_topology(tmp_path / "topology.yaml"))
        dead_letter = f"{unique}.dead-letter"
        settings = Settings(
            bootstrap_servers=cluster.bootstrap_servers,
            state_dir=tmp_path / "state",
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            dead_letter_topic=dead_letter,
        )
        _run(topology, settings)
        names = [spec.name for spec in topic_specs(topology, dead_letter)]
        # the SOW topic, its view and its queue, each with its repartition and changelog
        # topics, the queue's deliveries, and the dead letters
        assert len(names) >= 8, names
        got = _replication(cluster.bootstrap_servers, names)
        assert got == dict.fromkeys(names, ({3}, "2")), got
        # Kafka's own topics the processor uses: its transactions and its group's offsets
        internal = _replication(
            cluster.bootstrap_servers, ["__transaction_state", "__consumer_offsets"]
        )
        assert internal == dict.fromkeys(internal, ({3}, "2")), internal
        # check-config has nothing to warn about on this cluster
        said = replication_summary(Settings(bootstrap_servers=cluster.bootstrap_servers))
        assert said == [
            "replication: 3 copies of every topic the product creates, 2 in sync "
            f"({cluster.bootstrap_servers} has 3 brokers)"
        ]

    def test_the_replication_factor_setting_is_what_topics_get(
        self, cluster: EmbeddedKafkaCluster, tmp_path: Path, unique: str
    ) -> None:
        (tmp_path / "topology.yaml").write_text("topics:\n  - {name: orders, key: /orderId}\n")
        topology = namespaced_topology(unique, load_topology(tmp_path / "topology.yaml"))
        dead_letter = f"{unique}.dead-letter"
        settings = Settings.from_env(
            {"SOW_REPLICATION_FACTOR": "2"},
            bootstrap_servers=cluster.bootstrap_servers,
            state_dir=tmp_path / "state",
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            dead_letter_topic=dead_letter,
        )
        _run(topology, settings)
        names = [spec.name for spec in topic_specs(topology, dead_letter)]
        got = _replication(cluster.bootstrap_servers, names)
        assert got == dict.fromkeys(names, ({2}, "1")), got

    def test_publishing_and_querying_go_on_when_an_input_leader_dies(
        self, cluster: EmbeddedKafkaCluster, tmp_path: Path, unique: str
    ) -> None:
        """The CI smoke test of broker faults (the heavy ones: test_cluster_faults.py):
        publishes with processed acks and queries go on through the death of an input
        partition's leader, and nothing acknowledged is lost."""
        topology = namespaced(unique, SowTopic("ORDERS", keys=("/id",), partitions=2))
        kafka_topic = topology.topics["ORDERS"].kafka_topic
        with running_sow(cluster.bootstrap_servers, topology, tmp_path, unique) as (_, client):
            first = [orjson.dumps({"id": n, "v": 1}) for n in range(300)]
            replies = list(client.publish_stream("ORDERS", first, ack="processed"))
            assert not [r for r in replies if r.error_code]
            leader = cluster.leader_of(kafka_topic, 0)
            cluster.node(leader).kill()
            try:
                for n in range(0, 300, 2):
                    data = orjson.dumps({"id": n, "v": 2})
                    client.publish("ORDERS", data, ack="processed", timeout=30)
                records, _, _ = client.query("ORDERS", batch_size=1000)
                got = {orjson.loads(r.data)["id"]: orjson.loads(r.data)["v"] for r in records}
                assert got == {n: 2 if n % 2 == 0 else 1 for n in range(300)}
                assert cluster.leader_of(kafka_topic, 0) != leader
            finally:
                cluster.start_node(leader)
                cluster.wait_fully_replicated()


def _java_of(state: Path) -> list[int]:
    """The pids of the JVMs whose command line names ``state`` (the cluster's members)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            line = cmdline(int(entry.name))
            if b"java" in line and str(state).encode() in line:
                found.append(int(entry.name))
    return found


class ClusterServe:
    """``sow serve`` with SOW_EMBEDDED_BROKERS=3 on the state directory ``state``."""

    def __init__(self, workdir: Path, state: Path) -> None:
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "processor.cli", "serve", "--grpc-address", "127.0.0.1:0"),
                *("--topology", "topology.yaml", "--state-dir", str(state)),
            ],
            cwd=workdir,
            env={**serve_env(), "SOW_EMBEDDED_BROKERS": "3"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def until_ready(self, within_s: float = 180) -> str:
        """The gRPC address, once ready; fails if it exits or takes longer."""
        assert self.process.stderr is not None
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            assert line, "sow serve exited before it was ready:\n" + "".join(self.lines)
            self.lines.append(line)
            if READY in line:
                return next(ln.split()[1] for ln in self.lines if "gRPC:" in ln)
        raise AssertionError(f"not ready within {within_s}s:\n" + "".join(self.lines))

    def terminate(self, within_s: float = 60) -> str:
        """SIGTERM, and the rest of its output once it exited."""
        self.process.send_signal(signal.SIGTERM)
        try:
            _, rest = self.process.communicate(timeout=within_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, rest = self.process.communicate(timeout=30)
            raise AssertionError(
                f"sow serve did not stop within {within_s}s of SIGTERM:\n{rest}"
            ) from None
        self.lines.append(rest)
        return "".join(self.lines)


def _sow(address: str, *args: str, stdin: str = "") -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", *args, "--server", address],
        input=stdin,
        env=serve_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.heavy  # two cluster starts and two sow serve stops: ~100 s on 2 busy cores
def test_sow_serve_runs_a_three_member_cluster_of_its_own(tmp_path: Path) -> None:
    """Started twice on one state directory: each member's log under
    ``<state>/kafka/node-N``, publishes and queries served, SIGTERM ends it with exit 0
    and no JVM of its own left, and the second start reuses the members' logs (the same
    cluster, nothing formatted) and finds the SOW the first made."""
    (tmp_path / "topology.yaml").write_text("topics:\n  - {name: ORDERS, key: /orderId}\n")
    state = tmp_path / "state"
    first_id = ""
    for round_ in range(2):
        serve = ClusterServe(tmp_path, state)
        try:
            address = serve.until_ready()
            said = "".join(serve.lines)
            assert "a cluster of 3 nodes, replication factor 3, min in-sync 2" in said, said
            for n in (1, 2, 3):
                assert (state / "kafka" / f"node-{n}" / "data" / "meta.properties").is_file()
            cluster_id = (state / "kafka" / "cluster.id").read_text()
            if round_ == 0:
                first_id = cluster_id
            else:
                assert cluster_id == first_id
                assert "formatted a new Apache Kafka log" not in said, said
            assert len(_java_of(state)) == 3
            if round_ == 0:
                lines = "".join(f'{{"orderId": {i}, "v": {i}}}\n' for i in range(100))
                _sow(address, "publish", "ORDERS", "--wait", stdin=lines)
            rows = _sow(address, "query", "ORDERS")
            records = [row["data"] for row in rows if "data" in row]
            assert sorted(r["orderId"] for r in records) == list(range(100)), rows[-1:]
        finally:
            output = serve.terminate()
        assert serve.process.returncode == 0, output
        assert "Traceback" not in output, output
        assert _java_of(state) == [], "a member of the cluster outlived sow serve"
