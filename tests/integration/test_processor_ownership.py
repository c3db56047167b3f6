"""Every documented way of running processors gives each partition exactly one owner
(issue 31 point 3), as OS processes on the session's broker.

The README's "Point it at a real Kafka": ``sow serve --bootstrap-servers`` plus ``sow
process --instance-id 1`` in the same group. ``sow serve``'s processor used to take every
partition statically, outside the group, while the group gave the ``sow process`` all of
them too: both wrote the same changelogs (false "transaction a crash left open" warnings,
a view wrong for minutes). Now both are members of one group, and a view computed from
the records is exact. A static processor (``SOW_ASSIGNMENT=static``) beside group
members is refused at start when it comes second, and fenced when it came first
(processor/log/kafka/ownership.py).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import SowClient
from tests.integration.scale_cluster import Member

PARTITIONS = 4
REGIONS = ("EU", "US", "APAC")
#: What recovery logs when a changelog holds records past the committed input offsets:
#: with one owner per partition, only after a crash.
CRASH_LEFT_OPEN = "a crash left open"


def _topology(tmp_path: Path, unique: str) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(
        f"""
topics:
  - name: ORDERS
    key: /orderId
    partitions: {PARTITIONS}
    kafka_topic: {unique}.orders
views:
  - name: SalesByRegion
    message_type: json
    underlying: ORDERS
    projection: ["/region AS /region", "SUM(/qty) AS /total", "COUNT(/orderId) AS /orders"]
    grouping: [/region]
    partitions: {PARTITIONS}
    kafka_topic: {unique}.sales
"""
    )
    return path


class Orders:
    """The ORDERS records as published (a model), and the view they make."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.records: dict[int, tuple[str, dict[str, Any]]] = {}

    def step(self, client: SowClient, operations: int) -> None:
        """Publish, update and delete at random over 60 orders."""
        for _ in range(operations):
            key = self.random.randrange(60)
            if key in self.records and self.random.random() < 0.2:
                sow_key, _ = self.records.pop(key)
                client.delete("ORDERS", [sow_key])
                continue
            fields = {
                "orderId": key,
                "region": self.random.choice(REGIONS),
                "qty": self.random.randint(1, 9),
            }
            published = client.publish("ORDERS", orjson.dumps(fields))
            self.records[key] = (published.sow_key, fields)

    def view(self) -> dict[str, dict[str, Any]]:
        expected: dict[str, dict[str, Any]] = {}
        for _, fields in self.records.values():
            row = expected.setdefault(
                fields["region"], {"region": fields["region"], "total": 0, "orders": 0}
            )
            row["total"] += fields["qty"]
            row["orders"] += 1
        return expected


def _view(client: SowClient) -> dict[str, dict[str, Any]]:
    records, _, _ = client.query("SalesByRegion")
    rows = [orjson.loads(r.data) for r in records]
    return {row["region"]: row for row in rows}


def _sow(client: SowClient) -> dict[str, dict[str, Any]]:
    records, _, _ = client.query("ORDERS")
    return {r.sow_key: orjson.loads(r.data) for r in records}


def _until_exact(
    client: SowClient, orders: Orders, members: list[Member], timeout_s: float
) -> None:
    """The SOW and the view equal the model (within ``timeout_s``); else the members' logs."""
    deadline = time.monotonic() + timeout_s
    expected_sow = {sow_key: fields for sow_key, fields in orders.records.values()}
    while True:
        view, sow = _view(client), _sow(client)
        if view == orders.view() and sow == expected_sow:
            return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {m.name}\n{m.log()}" for m in members)
            assert (view, len(sow)) == (orders.view(), len(expected_sow)), logs
            assert sow == expected_sow, logs
        time.sleep(0.1)


def _common(bootstrap: str, topology: Path, state: Path, group: str) -> list[str]:
    return [
        *("--bootstrap-servers", bootstrap, "--topology", str(topology)),
        *("--state-dir", str(state), "--group-id", group),
    ]


def _serve(bootstrap: str, topology: Path, work: Path, group: str, unique: str) -> Member:
    argv = ["serve", *_common(bootstrap, topology, work / "serve", group)]
    return Member("serve", [*argv, "--grpc-address", "127.0.0.1:0"], {}, f"{unique}.orders")


def _process(
    bootstrap: str, topology: Path, work: Path, group: str, unique: str, instance: int, **env: str
) -> Member:
    argv = [
        "process",
        *_common(bootstrap, topology, work / f"process-{instance}", group),
        *("--instance-id", str(instance)),
    ]
    return Member(f"process-{instance}", argv, env, f"{unique}.orders")


def _until(condition: Any, timeout_s: float, members: list[Member], what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {m.name}\n{m.log()}" for m in members)
            raise AssertionError(f"{what} not within {timeout_s}s:\n{logs}")
        time.sleep(0.05)


def test_the_readme_serve_and_process_share_the_partitions_and_the_view_is_exact(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology, group = _topology(tmp_path, unique), f"{unique}-group"
    serve = _serve(bootstrap, topology, tmp_path, group, unique)
    process: Member | None = None
    orders = Orders(seed=31)
    try:
        serve.wait_ready(120)
        client = SowClient(serve.grpc_address)
        orders.step(client, operations=120)  # serve alone
        process = _process(bootstrap, topology, tmp_path, group, unique, instance=1)
        process.wait_ready(120)
        members = [serve, process]

        def shared() -> bool:  # each partition one owner, both own some
            owned = [m.owned or frozenset() for m in members]
            return all(owned) and sum(map(len, owned)) == PARTITIONS == len(owned[0] | owned[1])

        orders.step(client, operations=240)  # while the group settles, and after
        _until_exact(client, orders, members, timeout_s=60)
        for member in members:
            assert CRASH_LEFT_OPEN not in member.log(), member.log()
            assert "Fenced" not in member.log(), member.log()
        _until(shared, 30, members, "the two processors sharing the partitions out")
        client.close()
    finally:
        codes = {m.name: m.stop() for m in (serve, process) if m is not None}
    assert codes == {"serve": 0, "process-1": 0}


def test_a_static_processor_beside_group_members_is_refused_at_start(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology, group = _topology(tmp_path, unique), f"{unique}-group"
    member = _process(bootstrap, topology, tmp_path, group, unique, instance=1)
    try:
        member.wait_ready(120)
        static = _process(
            bootstrap, topology, tmp_path, group, unique, instance=2, SOW_ASSIGNMENT="static"
        )
        assert static.process.wait(120) == 3, static.log()
        static.stop()
        errors = [line for line in static.lines if "error" in line.lower()]
        assert len(errors) == 1, static.log()
        assert errors[0].startswith("sow process: error: consumer group "), errors
        assert "run it with SOW_ASSIGNMENT=group" in errors[0]
        assert member.alive
        assert member.owned == frozenset(range(PARTITIONS))
    finally:
        member.stop()


@pytest.mark.heavy
def test_a_static_processor_is_fenced_by_a_member_that_joins_after_it(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """A static processor started first cannot know of a later member: the member's fence
    ends it (at its next transaction) and takes every partition; the view stays exact."""
    topology, group = _topology(tmp_path, unique), f"{unique}-group"
    static = _process(bootstrap, topology, tmp_path, group, unique, 1, SOW_ASSIGNMENT="static")
    serve: Member | None = None
    orders = Orders(seed=7)
    try:
        static.wait_ready(120)
        serve = _serve(bootstrap, topology, tmp_path, group, unique)
        serve.wait_ready(120)
        client = SowClient(serve.grpc_address)
        orders.step(client, operations=150)
        assert static.process.wait(60) == 1, static.log()
        assert "SOW_ASSIGNMENT=static must be its group's only processor" in static.log()
        _until_exact(client, orders, [serve, static], timeout_s=60)
        assert serve.owned == frozenset(range(PARTITIONS))
        client.close()
    finally:
        static.stop()
        if serve is not None:
            assert serve.stop() == 0, serve.log()
