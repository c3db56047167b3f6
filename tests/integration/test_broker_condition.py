"""What the user sees when the Kafka cluster cannot take writes (issue 33, point 4): two
of three brokers stopped (min.insync.replicas=2 unmet), readiness turns false within
10 s naming the condition, the metrics and ``sow status`` show it, and readiness turns
true again by itself once the brokers return."""

from __future__ import annotations

import argparse
import logging
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from processor.app import Application, start
from processor.cli.status import cmd_status
from processor.config import Settings
from processor.topology.model import SowTopic, Topology
from tests.conftest import StartOwnCluster
from tests.integration.harness import waited_for

log = logging.getLogger(__name__)

#: The acceptance bound: readiness false within this long of the fault.
NOTICED_WITHIN_S = 10.0
#: Ready again within this long of the brokers' return.
RESUMED_WITHIN_S = 60.0

pytestmark = pytest.mark.heavy


def metrics(app: Application) -> dict[str, float]:
    assert app.observer is not None
    url = f"http://{app.observer.address}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        name: float(value)
        for line in text.splitlines()
        if line.startswith("sow_broker") and " " in line
        for name, value in [line.rsplit(" ", 1)]
    }


def status(app: Application, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert app.observer is not None
    capsys.readouterr()
    args = argparse.Namespace(
        metrics_address=app.observer.address, state_dir=tmp_path / "state", timeout=5.0
    )
    assert cmd_status(args) == 0
    return capsys.readouterr().out


def row(shown: str, name: str) -> str:
    """The value of the row ``name`` of ``sow status``'s table."""
    for line in shown.splitlines():
        if line.startswith(name + "  "):
            return line[len(name) :].strip()
    pytest.fail(f"no row {name!r} in:\n{shown}")


def test_two_brokers_down_turns_readiness_false_and_back_by_itself(
    own_cluster: StartOwnCluster,
    tmp_path: Path,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = own_cluster()
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.o", partitions=2)
    settings = Settings(
        bootstrap_servers=cluster.bootstrap_servers,
        state_dir=tmp_path / "state",
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
    )
    app = start(settings, topology=Topology({"ORDERS": topic}))
    try:
        waited_for(lambda: app.readiness() is None, 90, "readiness")
        assert app.cluster is not None
        assert app.cluster.watching
        waited_for(lambda: metrics(app).get("sow_brokers_answering") == 3, 10, "3 brokers")
        assert metrics(app)["sow_broker_blocking"] == 0
        assert row(status(app, tmp_path, capsys), "broker condition") == "healthy"

        cluster.node(2).stop()
        began = time.monotonic()
        stopping = threading.Thread(target=cluster.node(3).stop)
        stopping.start()
        noticed = waited_for(
            lambda: app.readiness() is not None, NOTICED_WITHIN_S, "readiness false"
        )
        reason = app.readiness() or ""
        log.info("readiness false after %.1fs: %s", noticed, reason)
        assert reason.startswith("the Kafka cluster is blocking: "), reason
        assert "fewer than min.insync.replicas=2" in reason or "no leader" in reason, reason
        assert app.health is not None
        waited_for(lambda: app.health is not None and app.health.reason is not None, 2, "health")
        seen = metrics(app)
        assert seen["sow_broker_blocking"] == 1
        assert seen["sow_brokers_answering"] <= 1
        shown = status(app, tmp_path, capsys)
        assert row(shown, "broker condition").startswith("blocking: "), shown
        assert row(shown, "ready").startswith("no: the Kafka cluster is blocking: "), shown
        stopping.join(60)
        log.info("two brokers stopped after %.1fs", time.monotonic() - began)

        cluster.node(2).start()  # start_node would wait for all three
        back = waited_for(lambda: app.readiness() is None, RESUMED_WITHIN_S, "readiness true")
        log.info("ready again %.1fs after one broker returned", back)
        seen = metrics(app)
        assert seen["sow_broker_blocking"] == 0
        assert seen["sow_broker_degraded"] == 1  # one broker is still down
        assert seen["sow_broker_blocking_seconds_total"] > 0
        assert float(row(status(app, tmp_path, capsys), "time blocking (s)")) > 0
        cluster.start_node(3)
        healthy = waited_for(
            lambda: metrics(app).get("sow_broker_degraded") == 0, 60, "the cluster healthy"
        )
        log.info("healthy %.1fs after the last broker returned", healthy)
        print(f"noticed after {noticed:.1f}s, ready {back:.1f}s after a broker returned")
    finally:
        app.stop()
