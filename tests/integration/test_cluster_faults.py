"""Exactly-once through broker faults on a replicated cluster (issue 33).

Three embedded Apache Kafka members (replication factor 3, min in-sync 2). The CI smoke
test (test_cluster_replication.py) kills the leader of an input partition while publishing
and querying go on. The heavy tests here run the faults of docs/reliability.md under the
load of :mod:`tests.integration.cluster_faults`, each ending with its checks, and print
one ``FAULT`` line of figures per fault:
``python -m pytest -m heavy tests/integration/test_cluster_faults.py -s``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from processor.log.broker import EmbeddedKafkaCluster
from tests.conftest import StartOwnCluster
from tests.integration.cluster_faults import Figures, Workload

# -- heavy: each fault under load -------------------------------------------------------

#: A fault's name, and when it began and ended (figures are taken once the load has
#: gone on past its end).
Window = tuple[str, float, float]


@pytest.fixture
def workload(own_cluster: StartOwnCluster, tmp_path: Path, unique: str) -> Iterator[Workload]:
    running = Workload(own_cluster(), tmp_path, unique)
    try:
        running.start()
        time.sleep(5)  # steady load before the fault
        yield running
    finally:
        running.close()


def _finish(workload: Workload, windows: list[Window]) -> list[Figures]:
    workload.wait_for_publishes(40)
    workload.cluster.wait_fully_replicated()
    time.sleep(max(0.0, max(w[2] for w in windows) + 20 - time.monotonic()))
    figures = [workload.figures(*window) for window in windows]
    for figure in figures:
        print(figure.line())
    workload.verify()
    return figures


def _kill_and_restart(workload: Workload, node: int, fault: str, down_s: float) -> Window:
    """SIGKILL member ``node``, leave it down ``down_s`` (the load must go on: one
    member down is within the replication), start it again and wait until it is back
    in every in-sync replica set."""
    cluster = workload.cluster
    began = time.monotonic()
    cluster.node(node).kill()
    workload.wait_for_publishes(20)  # before the member returns
    time.sleep(max(0.0, down_s - (time.monotonic() - began)))
    cluster.start_node(node)
    ended = time.monotonic()
    cluster.wait_fully_replicated()
    # The load settles before anything else happens: each fault's figures cover 20 s
    # past its end, and no other fault's.
    time.sleep(max(0.0, ended + 20 - time.monotonic()))
    return fault, began, ended


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_the_input_leader_then_the_coordinators_killed(workload: Workload) -> None:
    cluster = workload.cluster
    orders = workload.topology.topics["ORDERS"].kafka_topic
    settings = workload.settings
    windows = [_kill_and_restart(workload, cluster.leader_of(orders, 0), "input leader", 15)]
    coordinator = cluster.transaction_coordinator(settings.transactional_id)
    windows.append(_kill_and_restart(workload, coordinator, "transaction coordinator", 15))
    group = _group_coordinator(cluster, settings.group_id)
    windows.append(_kill_and_restart(workload, group, "group coordinator", 15))
    _finish(workload, windows)


def _group_coordinator(cluster: EmbeddedKafkaCluster, group: str) -> int:
    """The group's coordinator as the broker names it (and as the hash finds it)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.coordinator.id == cluster.group_coordinator(group)
    return int(described.coordinator.id)


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_a_broker_frozen_for_30s(workload: Workload) -> None:
    cluster = workload.cluster
    node = cluster.leader_of(workload.topology.topics["ORDERS"].kafka_topic, 0)
    began = time.monotonic()
    cluster.node(node).pause()
    try:
        time.sleep(30)
    finally:
        cluster.node(node).resume()
    _finish(workload, [("one broker frozen 30 s (SIGSTOP)", began, time.monotonic())])


@pytest.mark.heavy
@pytest.mark.timeout(1200)
def test_a_rolling_restart_under_load(workload: Workload) -> None:
    cluster = workload.cluster
    began = time.monotonic()
    for node in (1, 2, 3):
        cluster.node(node).stop()  # a controlled shutdown (SIGTERM)
        cluster.start_node(node)
        cluster.wait_fully_replicated()
    _finish(workload, [("rolling restart", began, time.monotonic())])


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_two_brokers_down_then_back(workload: Workload) -> None:
    cluster = workload.cluster
    app = workload.app
    assert app is not None
    began = time.monotonic()
    cluster.node(2).kill()
    cluster.node(3).kill()
    deadline = began + 10
    said = "the Kafka cluster is blocking: 2 of 3 brokers are down"
    while not (app.readiness() or "").startswith(said):
        assert time.monotonic() < deadline, f"10 s after two of three died: {app.readiness()}"
        time.sleep(0.1)
    print(f"not ready after {time.monotonic() - began:.1f} s: {app.readiness()}")
    # Nothing can be written, and queries still answer from the replica, at once.
    took = []
    while time.monotonic() < began + 25:
        asked = time.monotonic()
        records, _, _ = workload.client.query("ORDERS", top_n=10, timeout=5)
        took.append(time.monotonic() - asked)
        assert len(records) == 10
        time.sleep(0.5)
    print(f"queries during the fault: {len(took)}, slowest {max(took):.3f} s")
    assert max(took) < 1.0, took
    cluster.node(2).start(120)
    cluster.node(3).start(120)
    cluster.wait_for_brokers(3, 120)
    ended = time.monotonic()
    deadline = time.monotonic() + 60
    while app.readiness() is not None:
        assert time.monotonic() < deadline, f"not ready 60 s after: {app.readiness()}"
        time.sleep(0.2)
    (figures,) = _finish(workload, [("two brokers down 25 s", began, ended)])
    errors = [o.error for o in workload.outcomes if o.error]
    print("errors:", collections.Counter(e[:160] for e in errors).most_common(3))
    assert figures.refused > 0, "no publish was refused while writes could not be replicated"


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_the_active_controller_killed(workload: Workload) -> None:
    cluster = workload.cluster
    controller = cluster.active_controller()
    assert controller > 0
    window = _kill_and_restart(workload, controller, "active controller", 15)
    assert cluster.active_controller() > 0
    _finish(workload, [window])
