"""The HTTP endpoint: Prometheus /metrics, /healthz and /readyz."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from processor.app import start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced

ORDERS = SowTopic("ORDERS", keys=("/orderId",))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _samples(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = _get(f"http://{address}/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_report_a_publish_and_a_dead_letter_after_they_happen(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path,
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
        metrics_address="127.0.0.1:0",
    )
    app = start(settings, topology=topology)
    try:
        assert app.observer is not None
        address = app.observer.address
        assert _get(f"http://{address}/healthz") == (200, "ok\n")
        before = _samples(address)
        assert before[("sow_dead_letters_total", ())] == 0
        assert (
            before.get(("sow_grpc_requests_total", (("code", "OK"), ("method", "Sow/Publish"))))
            is None
        )

        with SowClient(app.grpc_address) as client:
            reply = client.publish("ORDERS", b'{"orderId": 1, "price": 5}')
            client.query("ORDERS", min_position=[reply.position])
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topology.topic("ORDERS").kafka_topic, b"this is not json")
        producer.flush(10)

        deadline = time.monotonic() + 30
        after = _samples(address)
        while (
            after[("sow_dead_letters_total", ())] < 1
            or after[("sow_processor_records_total", ())] < 2
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
            after = _samples(address)
        assert after[("sow_dead_letters_total", ())] == 1
        assert after[("sow_processor_records_total", ())] >= 2
        assert after[("sow_records", (("topic", "ORDERS"),))] == 1
        changes = (("kind", "publish"), ("topic", "ORDERS"))
        assert after[("sow_topic_changes_total", changes)] == 1
        assert after[("sow_grpc_requests_total", (("code", "OK"), ("method", "Sow/Publish")))] == 1
        assert after[("sow_grpc_request_seconds_count", (("method", "Sow/Publish"),))] == 1
        assert after[("sow_replica_caught_up", ())] == 1
        assert _get(f"http://{address}/readyz") == (200, "ready\n")
        assert _get(f"http://{address}/nope")[0] == 404
        status = subprocess.run(
            [sys.executable, "-m", "processor.cli", "status", "--metrics-address", address],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        table = {
            line.rsplit("  ", 1)[0].strip(): line.rsplit("  ", 1)[1]
            for line in status.stdout.splitlines()
        }
        assert table["ready"] == "yes"
        assert table["records {topic=ORDERS}"] == "1"
        assert table["dead letters"] == "1"
        assert table["standby records"] == "0"  # standby is off by default
        assert table["broker"] == f"external Kafka at {bootstrap}"  # which broker runs
        assert table["processor stalls"] == "0"
    finally:
        app.stop()
    gone = subprocess.run(
        [sys.executable, "-m", "processor.cli", "status", "--metrics-address", address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode == 5  # unavailable
    assert f"no metrics endpoint answered at http://{address}/readyz" in gone.stderr


def test_readyz_says_why_a_process_is_not_ready() -> None:
    from processor.observability.metrics import ComponentCollector, Observer

    reasons: list[str | None] = ["the read replica is catching up: 10 of 20 records"]
    observer = Observer(
        lambda: reasons[-1], ComponentCollector(lambda: None, lambda: None, lambda: None)
    )
    address = observer.serve("127.0.0.1:0")
    try:
        status, text = _get(f"http://{address}/readyz")
        assert status == 503
        assert text == "not ready: the read replica is catching up: 10 of 20 records\n"
        reasons.append(None)
        assert _get(f"http://{address}/readyz") == (200, "ready\n")
    finally:
        observer.stop()


def test_lag_metrics_rise_with_a_burst_and_fall_back_to_zero(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """A burst written straight to the input topic shows as processor input lag and then
    as replica changelog lag while it is worked off; both are 0 once it is applied."""
    topology = namespaced(unique, ORDERS)
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path,
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
        metrics_address="127.0.0.1:0",
    )
    app = start(settings, topology=topology)
    try:
        assert app.observer is not None
        address = app.observer.address
        topic = (("topic", "ORDERS"),)
        burst = 300_000
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 20,
                "queue.buffering.max.messages": burst,  # the whole burst may queue up
            }
        )
        for n in range(burst):
            producer.produce(
                topology.topic("ORDERS").kafka_topic, b'{"orderId": %d}' % (n % 1000), b"%d" % n
            )
            if n % 50_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        seen = {"sow_processor_input_lag": 0.0, "sow_replica_changelog_lag": 0.0}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            samples = _samples(address)
            for name, most in seen.items():
                seen[name] = max(most, samples[(name, topic)])
            if samples[("sow_processor_records_total", ())] >= burst and all(
                samples[(name, topic)] == 0 for name in seen
            ):
                break
            time.sleep(0.05)
        assert samples[("sow_processor_records_total", ())] >= burst
        assert all(samples[(name, topic)] == 0 for name in seen), samples
        assert seen["sow_processor_input_lag"] > 0
        assert seen["sow_replica_changelog_lag"] > 0
    finally:
        app.stop()
