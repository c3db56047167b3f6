"""Actions (docs/actions.md; issue 36), end to end on the memory log and the session's
broker: each action type acts on what a user publishes, and each test fails without it
(nothing else writes the topics it reads, or deletes what it deletes).

Durations are one or two seconds and every bound is loose: the tests assert what is
done, not how fast.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from processor.changelog.commands import FILTER_DELETE_KEY
from processor.client.sow_client import SowClient
from processor.topology.model import Topology
from processor.topology.yaml_loader import parse_yaml
from tests.conftest import MEMORY
from tests.integration.harness import read_topic, running_sow


def topology(unique: str, actions: str, expiration: str = "") -> Topology:
    """ORDERS (keyed by /id) and RESULTS (keyed by /id), with ``actions`` (YAML)."""
    text = f"""
topics:
  - {{name: ORDERS, key: /id, kafka_topic: {unique}.ORDERS{expiration}}}
  - {{name: RESULTS, key: /id, kafka_topic: {unique}.RESULTS}}
actions:
{actions}
"""
    return parse_yaml(text, "actions.yaml")


def _ids(client: SowClient, topic: str) -> set[int]:
    records, _, _ = client.query(topic)
    return {json.loads(r.data)["id"] for r in records}


def _wait(client: SowClient, topic: str, expected: set[int], within_s: float = 20) -> None:
    deadline = time.monotonic() + within_s
    while (held := _ids(client, topic)) != expected:
        assert time.monotonic() < deadline, f"{topic} holds {held}, expected {expected}"
        time.sleep(0.05)


def _publish(client: SowClient, id_: int, status: str, **options: Any) -> Any:
    return client.publish("ORDERS", json.dumps({"id": id_, "status": status}).encode(), **options)


def test_expired_records_are_published_with_their_reason(
    backend: str, tmp_path: Path, unique: str
) -> None:
    actions = """
  - on: {module: sow-expire-message, topic: ORDERS, filter: "/status = 'open'"}
    do: {module: publish-message, topic: RESULTS}
"""
    with running_sow(backend, topology(unique, actions, ", expiration: 1s"), tmp_path, unique) as (
        _,
        client,
    ):
        _publish(client, 1, "open")
        _publish(client, 2, "closed")  # expires too, but the filter leaves it out
        _publish(client, 3, "open", expiration=-1)  # never expires
        _wait(client, "RESULTS", {1})
        _wait(client, "ORDERS", {3})
        time.sleep(0.3)
        assert _ids(client, "RESULTS") == {1}
    if backend != "memory":
        (record,) = read_topic(backend, f"{unique}.RESULTS", timeout_s=5)
        headers = dict(record.headers())  # type: ignore[attr-defined]
        assert headers["sow.action.reason"] == b"time_limit"
        assert headers["sow.action.event"] == b"sow-expire-message"
        assert headers["sow.action.topic"] == b"ORDERS"
        assert json.loads(record.value()) == {"id": 1, "status": "open"}  # type: ignore[attr-defined]


def test_an_expiry_fills_amps_variables_and_an_oof_action_takes_its_type(
    backend: str, tmp_path: Path, unique: str
) -> None:
    text = f"""
topics:
  - {{name: ORDERS, key: /id, kafka_topic: {unique}.ORDERS, expiration: 1s}}
  - {{name: RESULTS, key: /id, kafka_topic: {unique}.RESULTS}}
  - {{name: GONE, key: /id, kafka_topic: {unique}.GONE}}
actions:
  - on: {{module: sow-expire-message, topic: ORDERS, reason: "time_limit, max_cancels"}}
    do:
      module: publish-message
      topic: RESULTS
      data: '{{"id": {{{{AMPS_SOW_KEY}}}}, "why": "{{{{AMPS_REASON}}}}", "of": "{{{{AMPS_TOPIC}}}}",
        "length": {{{{AMPS_DATA_LENGTH}}}}, "cid": "{{{{AMPS_CORRELATION_ID}}}}",
        "byte": "{{{{AMPS_BYTE_41}}}}"}}'
  - on: {{module: oof-message, topic: ORDERS, filter: "/status = 'open'", type: match}}
    do: {{module: publish-message, topic: GONE}}
"""
    with running_sow(backend, parse_yaml(text, "t.yaml"), tmp_path, unique) as (_, client):
        first = b'{"id": 1, "status": "open"}'
        one = int(client.publish("ORDERS", first, correlation_id="c1").sow_key)
        two = int(_publish(client, 2, "open").sow_key)
        _publish(client, 2, "closed")  # out of focus by an update: a match OOF
        _wait(client, "GONE", {2})
        _wait(client, "ORDERS", set())  # both expire: 1 while it matched (an expired OOF)
        _wait(client, "RESULTS", {one, two})
        records, _, _ = client.query("RESULTS")
        found = {json.loads(r.data)["id"]: json.loads(r.data) for r in records}
        assert found[one] == {
            "id": one,
            "why": "time_limit",
            "of": "ORDERS",
            "length": len(first),
            "cid": "c1",
            "byte": "A",
        }
        assert found[two]["why"] == "time_limit"
        assert found[two]["cid"] == ""
        time.sleep(0.3)
        assert _ids(client, "GONE") == {2}  # the type leaves expired and deleted OOFs out


def test_deleted_records_are_published(backend: str, tmp_path: Path, unique: str) -> None:
    actions = """
  - on: {module: amps-action-on-sow-delete-message, topic: ORDERS}
    do: {module: amps-action-do-publish-message, topic: RESULTS}
"""
    with running_sow(backend, topology(unique, actions), tmp_path, unique) as (_, client):
        for id_ in (1, 2, 3):
            _publish(client, id_, "open" if id_ < 3 else "closed")
        client.delete("ORDERS", filter="/status = 'open'")
        _wait(client, "RESULTS", {1, 2})
        _wait(client, "ORDERS", {3})


def test_a_delta_publish_merges_into_the_target(backend: str, tmp_path: Path, unique: str) -> None:
    actions = """
  - on: {module: sow-delete-message, topic: ORDERS}
    do: {module: publish-message, topic: RESULTS, data: "{{AMPS_DATA}}", delta: true}
"""
    with running_sow(backend, topology(unique, actions), tmp_path, unique) as (_, client):
        client.publish("RESULTS", b'{"id": 1, "note": "kept"}')
        _publish(client, 1, "open")
        client.delete("ORDERS", filter="1=1")
        deadline = time.monotonic() + 20
        while True:
            records, _, _ = client.query("RESULTS")
            if records and "status" in json.loads(records[0].data):
                break
            assert time.monotonic() < deadline, "the delta was not merged"
            time.sleep(0.05)
        assert json.loads(records[0].data) == {"id": 1, "note": "kept", "status": "open"}


def test_records_out_of_focus_are_published(backend: str, tmp_path: Path, unique: str) -> None:
    actions = """
  - on: {module: oof-message, topic: ORDERS, filter: "/status = 'open'"}
    do:
      module: publish-message
      topic: RESULTS
      data: '{"id": {{AMPS_SOW_KEY}}, "why": "{{AMPS_REASON}}"}'
"""
    with running_sow(backend, topology(unique, actions), tmp_path, unique) as (_, client):
        one = _publish(client, 1, "open")
        two = _publish(client, 2, "open")
        _publish(client, 3, "closed")
        _publish(client, 1, "closed")  # no longer matches
        client.delete("ORDERS", [two.sow_key])  # deleted while it matched
        client.delete("ORDERS", filter="/id = 3")  # never matched: no OOF
        _wait(client, "RESULTS", {int(one.sow_key), int(two.sow_key)})
        records, _, _ = client.query("RESULTS")
        why = {json.loads(r.data)["id"]: json.loads(r.data)["why"] for r in records}
        assert why == {int(one.sow_key): "match", int(two.sow_key): "deleted"}


def test_a_condition_held_past_its_duration_is_published_once(
    backend: str, tmp_path: Path, unique: str
) -> None:
    actions = """
  - on:
      {module: message-condition-timeout, topic: ORDERS, filter: "/status='pending'", duration: 1s}
    do: {module: publish-message, topic: RESULTS}
"""
    with running_sow(backend, topology(unique, actions), tmp_path, unique) as (_, client):
        _publish(client, 1, "pending")
        _publish(client, 2, "pending")
        _publish(client, 2, "done")  # stopped matching in time
        _publish(client, 1, "pending")  # still matching: its Duration counts from before
        _wait(client, "RESULTS", {1})
        time.sleep(1.5)
        assert _ids(client, "RESULTS") == {1}
        _publish(client, 1, "pending")  # still matching: not again
        time.sleep(1.5)
        records, _, _ = client.query("RESULTS")
        assert len(records) == 1


def test_a_schedule_deletes_by_filter(backend: str, tmp_path: Path, unique: str) -> None:
    # AMPS's maintenance form: the Filter compares with the tick's time
    actions = """
  - name: purge
    on: {module: schedule, every: 1s}
    do:
      module: delete-sow
      topic: ORDERS
      filter: "/status = 'closed' AND LAST_UPDATED() > {{AMPS_UNIX_TIMESTAMP}} - 60"
"""
    with running_sow(backend, topology(unique, actions), tmp_path, unique) as (_, client):
        for id_ in range(6):
            _publish(client, id_, "closed" if id_ % 2 else "open")
        _wait(client, "ORDERS", {0, 2, 4}, within_s=10)
        _publish(client, 7, "closed")
        _wait(client, "ORDERS", {0, 2, 4}, within_s=10)


def test_a_schedule_compacts_the_store(
    bootstrap: str, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    actions = """
  - name: compact
    on: {module: schedule, every: 1s}
    do: {module: compact-sow, topic: ORDERS}
"""
    with (
        caplog.at_level(logging.INFO, logger="processor.actions.scheduled"),
        running_sow(bootstrap, topology(unique, actions), tmp_path, unique) as (_, client),
    ):
        for id_ in range(60):
            _publish(client, id_, "x" * 5000)
        client.delete("ORDERS", filter="1=1")
        deadline = time.monotonic() + 15
        sizes: list[tuple[int, int]] = []
        while not any(before > 100_000 and after < before / 4 for before, after in sizes):
            assert time.monotonic() < deadline, f"no compaction reclaimed the deletes: {sizes}"
            time.sleep(0.2)
            sizes = [
                (int(r.args[3]), int(r.args[4]))  # type: ignore[index]
                for r in caplog.records
                if r.getMessage().startswith("action compact: compacted ORDERS")
            ]


def test_two_processors_run_each_partitions_ticks_once(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Each partition's owner runs its ticks; a partition that moves to the other
    processor (the second one joins) goes on from the tick its state notes: no tick
    of a partition runs twice."""
    actions = """
  - name: purge
    on: {module: schedule, every: 1s}
    do: {module: delete-sow, topic: ORDERS, filter: "/status = 'closed'"}
"""
    text = topology(unique, actions)
    topic = text.topic("ORDERS")
    four = replace(text, topics={**text.topics, "ORDERS": replace(topic, partitions=4)})
    a, b = {"instance_id": "a"}, {"instance_id": "b"}
    with running_sow(bootstrap, four, tmp_path / "a", unique, a) as (first, client):
        time.sleep(1.5)
        with running_sow(bootstrap, four, tmp_path / "b", unique, b, service=False) as (second, _):
            deadline = time.monotonic() + 30
            while not all(
                app.processor and app.processor.owned_partitions for app in (first, second)
            ):
                assert time.monotonic() < deadline, "the partitions were not shared"
                time.sleep(0.1)
            for id_ in range(8):
                _publish(client, id_, "closed" if id_ % 2 else "open")
            _wait(client, "ORDERS", {0, 2, 4, 6}, within_s=15)
            time.sleep(2.5)
    ticks: dict[int, list[int]] = {}
    for record in read_topic(bootstrap, topic.kafka_topic, partitions=4, timeout_s=10):
        if record.key() == FILTER_DELETE_KEY:  # type: ignore[attr-defined]
            stamp = record.timestamp()[1]  # type: ignore[attr-defined]
            ticks.setdefault(record.partition(), []).append(stamp)  # type: ignore[attr-defined]
    assert sorted(ticks) == [0, 1, 2, 3]
    for partition, stamps in ticks.items():
        # the timer runs 1s after the partition's last run, whoever owns it
        gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
        assert min(gaps) > 900, f"a tick of partition {partition} ran twice: {gaps}"
        assert len(stamps) >= 3


def test_an_action_record_the_target_cannot_key_is_dead_lettered(
    tmp_path: Path, unique: str
) -> None:
    text = f"""
topics:
  - {{name: ORDERS, key: /id, kafka_topic: {unique}.ORDERS}}
  - {{name: BY_REF, key: /ref, kafka_topic: {unique}.BY_REF}}
actions:
  - on: {{module: sow-delete-message, topic: ORDERS}}
    do: {{module: publish-message, topic: BY_REF}}
"""
    with running_sow(MEMORY, parse_yaml(text, "t.yaml"), tmp_path, unique) as (app, client):
        _publish(client, 1, "open")  # no /ref: BY_REF cannot key it
        client.publish("ORDERS", b'{"id": 2, "ref": "r2"}')
        client.delete("ORDERS", filter="1=1")
        deadline = time.monotonic() + 10
        while app.processor is None or app.processor.dead_lettered < 1:
            assert time.monotonic() < deadline, "nothing was dead-lettered"
            time.sleep(0.05)
        _wait(client, "BY_REF", {2})
        assert app.processor.dead_lettered == 1
