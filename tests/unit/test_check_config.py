"""``sow check-config`` on the shipped topologies and on broken files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SHIPPED = sorted(Path("topologies").iterdir())


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "check-config", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_topology_checks_out(path: Path) -> None:
    done = _check(path)
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    assert entries
    assert all(e["source"] == str(path) for e in entries)
    topics = [e for e in entries if "topic" in e]
    assert all(t["kafka_topic"] and t["partitions"] >= 1 for t in topics)
    derived = [e for e in entries if "topic" not in e]  # views and queues
    assert all(e["served"].startswith("served") for e in derived), derived
    assert f"{path}: OK" in done.stderr


def test_the_whole_directory_checks_out_as_sow_serve_loads_it() -> None:
    done = _check(Path("topologies"))
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    names = {e["topic"] for e in entries if "topic" in e}
    assert {"ORDERS", "BLOBS", "INVOICES", "WORK"} <= names
    # The README's tour reads the view and consumes the queue.
    assert {e["view"] for e in entries if "view" in e} == {"ORDERS_BY_SYMBOL"}
    assert {e["queue"] for e in entries if "queue" in e} == {"WORK"}


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("syntax.yaml", "topics:\n  - name: A\n   key: /id\n", "line"),
        ("unknown.yaml", "topics:\n  - name: A\n    key: /id\n    colour: blue\n", "colour"),
        (
            "schema.yaml",
            "topics:\n  - name: A\n    message_type: avro\n    key: /id\n"
            "    schema: nowhere.avsc\n",
            "nowhere.avsc",
        ),
        ("broken.xml", "<AMPSConfig><SOW><Topic>", "broken.xml"),
    ],
)
def test_a_broken_file_fails_with_the_place_and_the_invalid_exit_code(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    done = _check(path)
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    assert problem in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 4, done.stderr


def test_each_topic_states_the_delivery_order_it_gets(tmp_path: Path) -> None:
    """Subscribers get publish order per SowKey only on a partitioned topic (AMPS: publish
    order); check-config says so for every topic (issue 19, ordering)."""
    path = tmp_path / "order.yaml"
    path.write_text(
        "topics:\n  - name: A\n    key: /id\n    partitions: 4\n"
        "  - name: B\n    key: /id\n    partitions: 1\n"
    )
    done = _check(path)
    assert done.returncode == 0, done.stderr
    order = {t["topic"]: t["order"] for t in map(json.loads, done.stdout.splitlines())}
    assert order["A"].startswith("per SowKey")
    assert "partitions: 1" in order["A"]
    assert order["B"] == "publish order (one partition)"


def _replication(count: int | None = None, **environ: str) -> list[str]:
    """replication_summary's lines for the environment ``environ``, on a cluster of
    ``count`` brokers (None: one that does not answer)."""
    from processor.cli.check import replication_summary
    from processor.config import Settings
    from processor.errors import BrokerError

    def ask(bootstrap: str, timeout_s: float) -> int:
        assert timeout_s <= 5  # a short question: check-config stays quick
        if count is None:
            raise BrokerError("no answer within 3s")
        return count

    return replication_summary(Settings.from_env(environ), ask)


EXTERNAL = {"KAFKA_BOOTSTRAP_SERVERS": "k1:9092,k2:9092"}


@pytest.mark.parametrize(
    ("count", "environ", "said", "warned"),
    [
        (
            3,
            {},
            "3 copies of every topic the product creates, 2 in sync "
            "(k1:9092,k2:9092 has 3 brokers)",
            "",
        ),
        (
            5,
            {"SOW_REPLICATION_FACTOR": "2"},
            "2 copies of every topic the product creates, 1 in sync (SOW_REPLICATION_FACTOR)",
            "",
        ),
        (
            1,
            {},
            "1 copy of every topic the product creates, 1 in sync (k1:9092,k2:9092 has 1 broker)",
            "k1:9092,k2:9092 has one broker and SOW_REPLICATION_FACTOR is unset",
        ),
        (3, {"SOW_REPLICATION_FACTOR": "1"}, "1 copy", "SOW_REPLICATION_FACTOR=1 is set"),
        (
            None,
            {"SOW_REPLICATION_FACTOR": "1"},
            "could not ask k1:9092,k2:9092 how many brokers it has (no answer within 3s)",
            "SOW_REPLICATION_FACTOR=1 is set",
        ),
        (
            None,
            {},
            "could not ask k1:9092,k2:9092 how many brokers it has (no answer within 3s): "
            "every topic the product creates will get as many copies as it has brokers, "
            "at most 3, 2 in sync once there are 3",
            "",
        ),
        (
            2,
            {"SOW_REPLICATION_FACTOR": "3"},
            "3 copies",
            "SOW_REPLICATION_FACTOR=3 but k1:9092,k2:9092 lists 2 live brokers",
        ),
    ],
)
def test_check_config_says_the_replication_and_warns_of_a_single_copy(
    count: int | None, environ: dict[str, str], said: str, warned: str
) -> None:
    lines = _replication(count, **EXTERNAL, **environ)
    assert lines[0].startswith("replication: "), lines
    assert said in lines[0], lines
    warnings = [line for line in lines if line.startswith("warning: ")]
    if not warned:
        assert warnings == [], lines
        return
    assert len(warnings) == 1, lines
    assert warned in warnings[0], lines
    if "one broker" in warned or "=1 " in warned:
        # what to set, and why one copy is a risk
        assert "set SOW_REPLICATION_FACTOR=3 and SOW_MIN_INSYNC_REPLICAS=2" in warnings[0]
        assert "loses acknowledged writes" in warnings[0]


@pytest.mark.parametrize("nodes", [1, 3])
def test_the_embedded_broker_is_never_asked_nor_warned_about(nodes: int) -> None:
    lines = _replication(None, SOW_EMBEDDED_BROKERS=str(nodes))  # asking would fail
    copies, in_sync = (1, 1) if nodes == 1 else (3, 2)
    assert lines == [
        f"replication: {copies} cop{'y' if copies == 1 else 'ies'} of every topic the product "
        f"creates, {in_sync} in sync (the embedded Apache Kafka, "
        + ("a single node)" if nodes == 1 else "a cluster of 3 nodes)")
    ]


@pytest.mark.parametrize(
    ("count", "environ"),
    [
        (3, {**EXTERNAL, "SOW_REPLICATION_FACTOR": "2", "SOW_MIN_INSYNC_REPLICAS": "3"}),
        (None, {**EXTERNAL, "SOW_REPLICATION_FACTOR": "2", "SOW_MIN_INSYNC_REPLICAS": "3"}),
        (1, {**EXTERNAL, "SOW_MIN_INSYNC_REPLICAS": "2"}),  # one copy, two in sync
        (None, {"SOW_MIN_INSYNC_REPLICAS": "2"}),  # on the embedded single node
    ],
)
def test_more_in_sync_than_copies_is_an_error(count: int | None, environ: dict[str, str]) -> None:
    from processor.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="no write could ever succeed"):
        _replication(count, **environ)


def _check_env(**environ: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))}
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "check-config", "topologies/orders.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, **environ},
    )


def test_an_unreachable_cluster_is_said_quickly_and_the_check_passes() -> None:
    import socket
    import time

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    began = time.monotonic()
    done = _check_env(KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}", SOW_REPLICATION_FACTOR="1")
    assert time.monotonic() - began < 20
    assert done.returncode == 0, done.stderr
    assert f"could not ask 127.0.0.1:{port} how many brokers it has" in done.stderr
    assert "warning: SOW_REPLICATION_FACTOR=1 is set" in done.stderr
    assert "%3|" not in done.stderr  # librdkafka's own lines stay out


def test_more_in_sync_than_copies_fails_the_check() -> None:
    done = _check_env(SOW_REPLICATION_FACTOR="2", SOW_MIN_INSYNC_REPLICAS="3")
    assert done.returncode == 3, done.stderr
    assert "min in-sync replicas (3) exceed the replication factor (2)" in done.stderr
    assert "SOW_MIN_INSYNC_REPLICAS to at most 2" in done.stderr


def test_each_action_is_listed_with_what_it_does(tmp_path: Path) -> None:
    path = tmp_path / "actions.xml"
    path.write_text(
        """<AMPSConfig><SOW>
  <Topic><Name>ORDERS</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  <Topic><Name>LATE</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW>
<Actions>
  <Action>
    <On><Module>amps-action-on-schedule</Module>
      <Options><Every>*/5 * * * *</Every><Name>purge</Name></Options></On>
    <Do><Module>amps-action-do-delete-sow</Module>
      <Options><Topic>ORDERS</Topic><Filter>/done = 1</Filter></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-message-condition-timeout</Module>
      <Options><Topic>ORDERS</Topic><Filter>/done = 0</Filter><Duration>90s</Duration></Options>
    </On>
    <Do><Module>amps-action-do-publish-message</Module><Options><Topic>LATE</Topic></Options></Do>
  </Action>
</Actions></AMPSConfig>"""
    )
    done = _check(path)
    assert done.returncode == 0, done.stderr
    actions = [json.loads(line) for line in done.stdout.splitlines() if '"action"' in line]
    assert [a["action"] for a in actions] == ["purge", "action 2"]
    assert actions[0]["on"] == {"module": "amps-action-on-schedule", "every": "*/5 * * * *"}
    assert actions[0]["do"] == [
        {"module": "amps-action-do-delete-sow", "topic": "ORDERS", "filter": "/done = 1"}
    ]
    assert actions[1]["on"]["duration"] == "90s"
    assert actions[1]["does"] == (
        "action 2: message-condition-timeout on ORDERS where /done = 0 for 90s -> "
        "publish-message LATE"
    )
    assert "2 actions" in done.stderr


def test_each_topic_says_what_its_message_type_can_do(tmp_path: Path) -> None:
    """The new message types check out (a .proto file is compiled by the check, so a
    broken one fails it), and each topic lists its type's capabilities."""
    (tmp_path / "o.proto").write_text('syntax = "proto3"; message O { int64 id = 1; }')
    path = tmp_path / "t.yaml"
    path.write_text(
        "topics:\n"
        "  - {name: P, message_type: protobuf, schema: o.proto, proto_type: O, key: /id}\n"
        "  - {name: M, message_type: msgpack, key: /id}\n"
        "  - {name: G, message_type: composite-global, parts: [json, binary], key: /id}\n"
        "  - {name: B, message_type: binary}\n"
    )
    done = _check(path)
    assert done.returncode == 0, done.stderr
    can = {e["topic"]: e["message_type_can"] for e in map(json.loads, done.stdout.splitlines())}
    assert "view output" in can["M"]
    assert "view output" not in can["P"]
    assert "delta publish and subscribe" not in can["G"]
    assert can["B"] == []
    (tmp_path / "o.proto").write_text('syntax = "proto3"; message O { int64 id = 1 }')
    done = _check(path)
    assert done.returncode != 0
    assert "o.proto does not compile" in done.stderr
