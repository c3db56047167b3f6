"""A user's AMPS configuration with a view, a conflated topic and queues (issue 20):
``sow check-config`` says what each will do, and ``sow serve`` refuses the file in one line
naming each entry it does not serve and why, rather than start and answer NOT_FOUND for
them (the view and the conflated topic are served since issue 21, a queue over plain
topics since issue 22; a queue over plain and SOW topics together is not)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from processor.log.broker import free_loopback_port

CONFIG = """<AMPSConfig>
  <TransactionLog>
    <Topic><Name>ORDERS_DIRECT</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
  <SOW>
    <Topic>
      <Name>orders</Name>
      <MessageType>json</MessageType>
      <Key>/orderId</Key>
      <SlabSize>8MB</SlabSize>
    </Topic>
    <View>
      <Name>CompleteByRegion</Name>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <MessageType>json</MessageType>
      <Projection>
        <Field>COUNT(/orderId) AS /completedOrders</Field>
        <Field>/region AS /region</Field>
      </Projection>
      <Grouping><Field>/region</Field></Grouping>
      <Filter>/status = 'complete'</Filter>
    </View>
    <ConflatedTopic>
      <Name>orders-C</Name>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <Interval>1s</Interval>
    </ConflatedTopic>
    <Queue>
      <Name>MQ</Name>
      <MessageType>json</MessageType>
      <UnderlyingTopic>ORDERS_.*</UnderlyingTopic>
      <DefaultPublishTarget>ORDERS_DIRECT</DefaultPublishTarget>
      <LeasePeriod>60s</LeasePeriod>
    </Queue>
    <Queue>
      <Name>MIXED</Name>
      <MessageType>json</MessageType>
      <UnderlyingTopic>^(ORDERS_DIRECT|orders)$</UnderlyingTopic>
      <DefaultPublishTarget>ORDERS_DIRECT</DefaultPublishTarget>
    </Queue>
  </SOW>
</AMPSConfig>"""


def _sow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["SOW_GRPC_ADDRESS"] = f"127.0.0.1:{free_loopback_port()}"
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=cwd,
    )


def test_check_config_says_what_each_entry_will_do(tmp_path: Path) -> None:
    path = tmp_path / "amps.xml"
    path.write_text(CONFIG)
    done = _sow("check-config", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    by_name = {
        line.get("topic")
        or line.get("view")
        or line.get("conflated_topic")
        or line.get("queue"): line
        for line in lines
    }
    assert list(by_name) == [
        "orders",
        "ORDERS_DIRECT",
        "CompleteByRegion",
        "orders-C",
        "MQ",
        "MIXED",
    ]
    orders = by_name["orders"]
    assert orders["not_applied"][0]["element"] == "SlabSize"
    assert "RocksDB" in orders["not_applied"][0]["reason"]
    view = by_name["CompleteByRegion"]
    assert view["element"] == "AMPSConfig/SOW/View[1]"
    assert view["served"] == "served: a SOW topic whose records the processor derives"
    assert view["does"].startswith("aggregates orders where /status = 'complete' grouped by")
    assert view["filter"] == "/status = 'complete'"
    conflated = by_name["orders-C"]
    assert (conflated["interval"], conflated["message_type"]) == ("1s", "json")
    assert conflated["served"] == "served: a SOW topic whose records the processor derives"
    queue = by_name["MQ"]
    assert (queue["kind"], queue["lease_period"], queue["underlying_topics"]) == (
        "Queue",
        "1m",
        ["ORDERS_DIRECT"],
    )
    assert queue["served"] == "served: a SOW topic whose records the processor derives"
    assert by_name["MIXED"]["served"] == (
        "refused by sow serve: it reads 2 topics, 1 of them without a SOW; a queue reads "
        "plain topics or SOW topics, not both"
    )
    assert "1 entries sow serve refuses for now" in done.stderr
    assert "1 SOW topics, 2 views and conflated topics, 2 queues" in done.stderr


def test_sow_serve_refuses_the_file_in_one_line_and_exits_invalid(tmp_path: Path) -> None:
    path = tmp_path / "amps.xml"
    path.write_text(CONFIG)
    done = _sow(
        "serve", "--topology", str(path), "--state-dir", str(tmp_path / "state"), cwd=tmp_path
    )
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("sow serve: error:")]
    assert len(errors) == 1, done.stderr
    (line,) = errors
    assert f"Queue 'MIXED' at {path}: AMPSConfig/SOW/Queue[2] (it reads 2 topics" in line
    assert "'MQ'" not in line  # a queue over plain topics is served
    assert "CompleteByRegion" not in line  # a view of one topic is served
    assert "orders-C" not in line  # and so is a conflated topic
    assert "kafka-sow is ready" not in done.stderr
    assert "broker" not in done.stderr.lower()
