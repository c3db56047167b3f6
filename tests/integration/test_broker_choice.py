"""The broker order (processor/log/broker/__init__.py): an explicit bootstrap address, else the
embedded Apache Kafka when Java 17+ is installed, else Tansu, which says why and which
limits apply, in one line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processor.errors import BrokerError, ConfigurationError
from processor.log.broker import EmbeddedKafka, ExternalBroker, TansuBroker, start_broker
from processor.log.broker.maven import kafka_version


def test_an_explicit_address_wins_and_starts_nothing() -> None:
    broker = start_broker("kafka.example:9092")
    assert broker == ExternalBroker("kafka.example:9092")


def test_without_java_the_embedded_default_falls_back_to_tansu_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with caplog.at_level(logging.WARNING, logger="processor.log.broker"):
        broker = start_broker(embedded="auto")
    try:
        assert isinstance(broker, TansuBroker)
    finally:
        broker.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "no Java found for the embedded Apache Kafka" in warnings[0]
    assert "--bootstrap-servers" in warnings[0]
    assert "memory only" in warnings[0]


def test_insisting_on_kafka_without_java_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with pytest.raises(BrokerError, match="install a Java 17\\+ JDK and Maven"):
        start_broker(embedded="kafka")


def test_an_unknown_embedded_broker_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must be one of auto, kafka, tansu"):
        start_broker(embedded="redpanda")


def test_the_embedded_kafka_keeps_its_log_and_ports_across_restarts(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    first = EmbeddedKafka(tmp_path / "kafka").start()
    try:
        assert first.keeps_log
        assert f"embedded Apache Kafka {kafka_version()}" in first.description
        producer = Producer({"bootstrap.servers": first.bootstrap_servers, "log_level": 0})
        producer.produce("kept", b"v")
        assert producer.flush(30) == 0
    finally:
        first.stop()
    second = EmbeddedKafka(tmp_path / "kafka").start()
    try:
        assert second.bootstrap_servers == first.bootstrap_servers  # the same ports again
        topics = AdminClient({"bootstrap.servers": second.bootstrap_servers}).list_topics(
            timeout=10
        )
        assert "kept" in topics.topics
    finally:
        second.stop()
    assert (tmp_path / "kafka" / "data" / "meta.properties").exists()
    assert not (tmp_path / "kafka" / "broker.pid").exists()


def test_a_broker_left_running_by_a_killed_parent_is_stopped_by_the_next_start(
    tmp_path: Path,
) -> None:
    """A parent SIGKILLed from a thread other than its main one leaves its JVM running
    (the death signal is tied to the starting thread); the next start on the same
    directory stops it rather than failing on the log's lock."""
    script = (
        "import sys, threading\n"
        "from pathlib import Path\n"
        "from processor.log.broker import EmbeddedKafka\n"
        "def run():\n"
        f"    EmbeddedKafka(Path({str(tmp_path / 'kafka')!r})).start()\n"
        "    print('up', flush=True)\n"
        "t = threading.Thread(target=run); t.start(); t.join()\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert "up" in done.stdout, done.stderr
    leftover = int((tmp_path / "kafka" / "broker.pid").read_text())
    assert Path(f"/proc/{leftover}").exists()
    broker = EmbeddedKafka(tmp_path / "kafka").start()
    try:
        assert not Path(f"/proc/{leftover}").exists() or _zombie(leftover)
    finally:
        broker.stop()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture(autouse=True)
def _no_inherited_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests choose the broker themselves (the Tansu smoke tier sets one)."""
    monkeypatch.delenv("SOW_EMBEDDED_BROKER", raising=False)
    assert "SOW_EMBEDDED_BROKER" not in os.environ


def test_the_first_start_fetches_the_jars_with_maven_showing_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A machine that never ran it: an empty classpath cache and Maven repository."""
    from processor.log.broker.maven import classpath

    monkeypatch.setenv("SOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={tmp_path / 'm2'}")
    with caplog.at_level(logging.INFO, logger="processor.log.broker.maven"):
        jars = classpath().split(os.pathsep)
    assert any(Path(jar).name == f"kafka_2.13-{kafka_version()}.jar" for jar in jars)
    assert all(Path(jar).is_relative_to(tmp_path / "m2") for jar in jars)
    shown = [r for r in caplog.records if getattr(r, "progress", None) is not None]
    assert shown, "no progress line while Maven downloaded"
    assert (tmp_path / "cache" / f"kafka-{kafka_version()}" / "classpath.txt").exists()
    caplog.clear()
    assert classpath().split(os.pathsep) == jars  # the second time: from the cache, at once
    assert not [r for r in caplog.records if "fetching" in r.getMessage()]


def test_a_broker_started_from_the_main_thread_ends_with_its_killed_parent(
    tmp_path: Path,
) -> None:
    """The JVM gets SIGTERM from Linux when its parent dies (PR_SET_PDEATHSIG, set by a
    shim before the JVM starts, so the parent's fork never runs gRPC's fork handlers)."""
    script = (
        "from pathlib import Path\n"
        "from processor.log.broker import EmbeddedKafka\n"
        f"EmbeddedKafka(Path({str(tmp_path / 'kafka')!r})).start()\n"
        "print('up', flush=True)\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert "up" in done.stdout, done.stderr
    jvm = int((tmp_path / "kafka" / "broker.pid").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{jvm}").exists() and not _zombie(jvm):
        assert time.monotonic() < deadline, "the JVM outlived its killed parent"
        time.sleep(0.2)
