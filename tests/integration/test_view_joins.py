"""Views of several Joins through gRPC on both backends (issue 21): a chain over three
topics (``orders -> customers -> regions``), a star whose second Join relates two fields
(``orders -> customers``, ``orders -> prices`` on symbol and venue, prices fanning out),
both left outer with the first Join's left-hand topic preserved, stay equal to the same
joins and aggregations computed in plain Python after every checked step of a random
stream of inserts, updates (join fields included) and deletes on every topic, with
several partitions; and across a restart."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from processor.client.sow_client import SowClient
from processor.messages import codec_for
from processor.topology import load_topology
from processor.topology.model import Topology
from tests.conftest import MEMORY
from tests.integration.harness import namespaced_topology, running_sow
from tests.integration.test_views import wait_until_exact

JOINED_VIEWS = """
topics:
  - {name: orders, key: /id}
  - {name: customers, key: /id}
  - {name: regions, key: /code}
  - {name: prices, key: /id}
views:
  - name: DeskTotals
    message_type: json
    joins: ["[orders]./cust = [customers]./id", "[customers]./region = [regions]./code"]
    projection:
      - "[regions]./desk AS /desk"
      - "SUM([orders]./qty) AS /qty"
      - "COUNT([orders]./id) AS /rows"
    grouping: ["[regions]./desk"]
  - name: PricedByName
    message_type: json
    joins:
      - "[orders]./cust = [customers]./id"
      - "[prices]./sym = [orders]./sym"
      - "[orders]./venue = [prices]./venue"
    projection:
      - "[customers]./name AS /name"
      - "SUM([orders]./qty) AS /qty"
      - "COUNT([prices]./px) AS /priced"
      - "MAX([prices]./px) AS /top"
    grouping: ["[customers]./name"]
"""

Record = dict[str, Any]


class Joined:
    """The four topics' current records (plain Python) and the views recomputed."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.records: dict[str, dict[int, tuple[str, Record]]] = {
            "orders": {},
            "customers": {},
            "regions": {},
            "prices": {},
        }

    def message(self, topic: str, key: int) -> Record:
        pick = self.random.choice
        if topic == "orders":
            return {
                "id": key,
                "cust": pick(["c0", "c1", "c2", "c3", ""]),
                "sym": pick(["IBM", "MSFT"]),
                "venue": pick(["X", "Y", ""]),
                "qty": self.random.randint(1, 9),
            }
        if topic == "customers":
            message: Record = {"id": f"c{key % 4}", "name": pick(["ann", "bob", "cy"])}
            if self.random.random() < 0.8:
                message["region"] = pick(["r0", "r1", "r2"])
            return message
        if topic == "regions":
            return {"code": f"r{key % 3}", "desk": pick(["D1", "D2"])}
        return {
            "id": key,
            "sym": pick(["IBM", "MSFT"]),
            "venue": pick(["X", "Y", ""]),
            "px": self.random.randint(10, 99),
        }

    def step(self, client: SowClient, operations: int) -> None:
        for _ in range(operations):
            topic = self.random.choice(list(self.records))
            current = self.records[topic]
            key = self.random.randrange(8)
            if topic == "customers":
                key %= 4
            elif topic == "regions":
                key %= 3
            if key in current and self.random.random() < 0.3:
                sow_key, _ = current.pop(key)
                client.delete(topic, [sow_key])
                continue
            message = self.message(topic, key)
            published = client.publish(topic, json.dumps(message).encode())
            current[key] = (published.sow_key, message)

    def _rows(self) -> tuple[list[dict[str, Record | None]], list[dict[str, Record | None]]]:
        def found(topic: str) -> list[Record]:
            return [message for _, message in self.records[topic].values()]

        def matches(left: Record | None, left_field: str, right: Record, right_field: str) -> bool:
            value = None if left is None else left.get(left_field)
            return value not in (None, "") and str(value) == str(right.get(right_field))

        def outer(
            rows: list[dict[str, Record | None]], topic: str, pairs: list[tuple[str, str, str]]
        ) -> list[dict[str, Record | None]]:
            joined: list[dict[str, Record | None]] = []
            for row in rows:
                hits: list[Record | None] = [
                    record
                    for record in found(topic)
                    if all(matches(row[lt], lf, record, rf) for lt, lf, rf in pairs)
                ]
                joined.extend({**row, topic: hit} for hit in hits or [None])
            return joined

        orders: list[dict[str, Record | None]] = [{"orders": o} for o in found("orders")]
        with_customers = outer(orders, "customers", [("orders", "cust", "id")])
        chain = outer(with_customers, "regions", [("customers", "region", "code")])
        star = outer(
            with_customers, "prices", [("orders", "sym", "sym"), ("orders", "venue", "venue")]
        )
        return chain, star

    def expected(self) -> dict[str, dict[Any, Record]]:
        chain, star = self._rows()
        desks: dict[Any, Record] = {}
        for row in chain:
            region, order = row["regions"], row["orders"]
            assert order is not None
            desk = None if region is None else region["desk"]
            group = desks.setdefault(desk, {"qty": 0, "rows": 0} | ({"desk": desk} if desk else {}))
            group["qty"] += order["qty"]
            group["rows"] += 1
        names: dict[Any, Record] = {}
        for row in star:
            customer, order, price = row["customers"], row["orders"], row["prices"]
            assert order is not None
            name = None if customer is None else customer["name"]
            group = names.setdefault(
                name, {"qty": 0, "priced": 0} | ({"name": name} if name else {})
            )
            group["qty"] += order["qty"]
            if price is not None:
                group["priced"] += 1
                group["top"] = max(group.get("top", 0), price["px"])
        return {"DeskTotals": desks, "PricedByName": names}


GROUPS = {"DeskTotals": "desk", "PricedByName": "name"}


def contents(client: SowClient, topology: Topology, view: str) -> dict[Any, Record]:
    codec = codec_for(topology.topics[view])
    records, _, _ = client.query(view)
    messages = [{k: v for k, v in codec.decode(r.data).items() if v is not None} for r in records]
    by_group = {message.get(GROUPS[view]): message for message in messages}
    assert len(by_group) == len(messages), messages
    return by_group


def _topology(unique: str, tmp_path: Path, partitions: int) -> Topology:
    (tmp_path / "joins.yaml").write_text(JOINED_VIEWS)
    return namespaced_topology(unique, load_topology(tmp_path / "joins.yaml"), partitions)


def test_views_of_several_joins_equal_their_recomputation_after_every_step(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _topology(unique, tmp_path, 3)
    joined = Joined(seed=23)
    steps = 30 if backend == MEMORY else 12
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        for _ in range(steps):
            joined.step(client, operations=10)
            wait_until_exact(client, topology, joined.expected(), reader=contents)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        wait_until_exact(client, topology, joined.expected(), reader=contents)
        for _ in range(3):  # the join stages' records were restored
            joined.step(client, operations=10)
            wait_until_exact(client, topology, joined.expected(), reader=contents)
