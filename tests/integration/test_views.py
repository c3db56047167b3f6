"""Views through gRPC on both backends (issue 21): seed 002's View examples, loaded from
their XML text, stay equal to their aggregation recomputed from scratch in plain Python
after every checked step of a random stream of inserts, updates and deletes on their
underlying topics, with several partitions; a view survives a restart and a rebuild of
its stores from the changelog; a sow_and_subscribe on a view sees its changes and an
out-of-focus notification when a group is emptied; a view refuses publishes."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.app import Application, start
from processor.client.sow_client import ServiceError, SowClient
from processor.config import Settings
from processor.messages import codec_for
from processor.topology import load_topology
from processor.topology.model import Topology
from processor.wire import sow_pb2
from tests.conftest import MEMORY
from tests.integration.harness import namespaced_topology, running_sow
from tests.integration.subscription_helpers import Collector

SEED = Path(__file__).resolve().parents[1] / "data" / "seeds" / "seed002_view_example.xml"


def _seed_topology(
    unique: str, partitions: int, tmp_path: Path, conflation: str = "none"
) -> Topology:
    """Seed 002's views, with one change: the printed fix topic /ett/order keys by
    /orderId, a named tag, which a FIX message cannot carry (its tags are numbers); it
    keys by tag 11 (ClOrdID) here. ``conflation``: every view's Conflation."""
    text = SEED.read_text().replace("<Key>/orderId</Key>", "<Key>/11</Key>", 1)
    assert "<Key>/11</Key>" in text
    text = text.replace("</View>", f"<Conflation>{conflation}</Conflation></View>")
    (tmp_path / "views.xml").write_text(text)
    return namespaced_topology(unique, load_topology(tmp_path / "views.xml"), partitions)


class Underlying:
    """The underlying topics' current records, as published (plain Python)."""

    def __init__(self, seed: int, topics: tuple[str, ...] = ()) -> None:
        self.random = random.Random(seed)
        #: topic -> key -> (SowKey, fields)
        self.records: dict[str, dict[int, tuple[str, dict[str, Any]]]] = {
            "/ett/order": {},
            "orders": {},
            "source-for-hash-sample": {},
            "[json].[example]": {},
            "ORDERS": {},
            "COMPANIES": {},
        }
        #: The topics the stream changes (default: all).
        self.topics = list(topics or self.records)

    def message(self, topic: str, key: int) -> tuple[dict[str, Any], bytes]:
        pick = self.random.choice
        if topic == "/ett/order":
            qty, price = self.random.randint(0, 20), pick([1, 2.5, 0.5])
            fields = {"109": pick("ABC"), "14": qty, "6": price}
            text = f"11={key}\x01109={fields['109']}\x0114={fields['14']}\x016={fields['6']}\x01"
            return fields, text.encode()
        if topic == "orders":
            fields = {"region": pick(["EU", "US", "APAC"]), "status": pick(["complete", "open"])}
            return fields, (
                f'{{"orderId":{key},"region":"{fields["region"]}","status":"{fields["status"]}"}}'
            ).encode()
        if topic == "source-for-hash-sample":
            fields = {
                "customerName": pick(["ann", "bob"]),
                "orderType": pick(["buy", "sell"]),
                "qty": self.random.randint(-3, 10),
            }
            return fields, (
                f'{{"id":{key},"customerName":"{fields["customerName"]}",'
                f'"orderType":"{fields["orderType"]}","qty":{fields["qty"]}}}'
            ).encode()
        if topic == "ORDERS":
            fields = {"Tick": f"T{self.random.randrange(5)}", "Shares": self.random.randint(1, 9)}
            return (
                fields,
                f"OrderID={key}\x01Tick={fields['Tick']}\x01Shares={fields['Shares']}\x01".encode(),
            )
        if topic == "COMPANIES":  # one company per Tick: the joined rows' last one is known
            fields = {"CompanyId": key, "Tick": f"T{key}", "Name": pick(["Acme", "Initech"])}
            text = f"CompanyId={key}\x01Tick=T{key}\x01Name={fields['Name']}\x01"
            return fields, text.encode()
        return {"id": key}, f'{{"id":{key}}}'.encode()

    def step(self, client: SowClient, operations: int) -> None:
        """Publish, update and delete at random."""
        for _ in range(operations):
            topic = self.random.choice(self.topics)
            current = self.records[topic]
            key = self.random.randrange(8)
            if key in current and self.random.random() < 0.3:
                sow_key, _ = current.pop(key)
                client.delete(topic, [sow_key])
                continue
            fields, data = self.message(topic, key)
            published = client.publish(topic, data)
            current[key] = (published.sow_key, fields)

    def expected(self, status: str = "complete") -> dict[str, dict[Any, dict[str, Any]]]:
        """Each view recomputed from scratch, by group (CompleteByRegion counting the
        orders of ``status``)."""
        total: dict[Any, dict[str, Any]] = {}
        for _, fields in self.records["/ett/order"].values():
            group = total.setdefault(fields["109"], {"109": fields["109"], "71406": 0})
            group["71406"] += fields["14"] * fields["6"]
        complete: dict[Any, dict[str, Any]] = {}
        for _, fields in self.records["orders"].values():
            if fields["status"] == status:
                region = fields["region"]
                group = complete.setdefault(region, {"completedOrders": 0, "region": region})
                group["completedOrders"] += 1
        hashed: dict[Any, dict[str, Any]] = {}
        for _, fields in self.records["source-for-hash-sample"].values():
            key = (fields["customerName"], fields["orderType"])
            group = hashed.setdefault(
                key, {"quantity": 0, "customerName": key[0], "orderType": key[1]}
            )
            group["quantity"] += fields["qty"]
        example = {key: {"id": key} for key in self.records["[json].[example]"]}
        companies = {f["Tick"]: f for _, f in self.records["COMPANIES"].values()}
        volume: dict[str, int] = {}
        for _, fields in self.records["ORDERS"].values():  # ORDERS is preserved (left join)
            volume[fields["Tick"]] = volume.get(fields["Tick"], 0) + fields["Shares"]
        joined: dict[Any, Any] = {}
        for tick, shares in volume.items():
            row: dict[str, Any] = {"TotalVolume": shares}
            if tick in companies:
                company = companies[tick]
                row |= {"CompanyId": company["CompanyId"], "Tick": tick, "Name": company["Name"]}
            joined[_canonical(row)] = joined.get(_canonical(row), 0) + 1
        return {
            "TOTAL_VALUE": total,
            "CompleteByRegion": complete,
            "hash-sample-view": hashed,
            "[nvfix].[example]": example,
            "TOTAL_COMPANY_VOLUME": joined,
        }


def _canonical(message: dict[str, Any]) -> str:
    return repr(sorted(message.items()))


GROUP_OF: dict[str, Callable[[dict[str, Any]], Any]] = {
    "TOTAL_VALUE": lambda m: m["109"],
    "CompleteByRegion": lambda m: m["region"],
    "hash-sample-view": lambda m: (m["customerName"], m["orderType"]),
    "[nvfix].[example]": lambda m: m["id"],
    "RegionsByCount": lambda m: m["completedOrders"],
}


def view_contents(client: SowClient, topology: Topology, view: str) -> dict[Any, dict[str, Any]]:
    """A view's records through a sow query, decoded, by group."""
    codec = codec_for(topology.topics[view])
    records, _, _ = client.query(view)
    messages = [
        {k: v for k, v in codec.decode(r.data).items() if v not in (None, "")} for r in records
    ]
    if view not in GROUP_OF:  # a group without a company has no Tick: count equal records
        counted: dict[Any, Any] = {}
        for message in messages:
            counted[_canonical(message)] = counted.get(_canonical(message), 0) + 1
        return counted
    by_group = {GROUP_OF[view](m): m for m in messages}
    assert len(by_group) == len(messages), messages
    return by_group


def wait_until_exact(
    client: SowClient,
    topology: Topology,
    expected: dict[str, Any],
    timeout_s: float = 30.0,
    reader: Callable[[SowClient, Topology, str], dict[Any, Any]] = view_contents,
) -> None:
    """Every view equals its recomputation (within ``timeout_s``: a view follows its
    underlying topics through its own input); ``reader`` reads a view by group."""
    deadline = time.monotonic() + timeout_s
    while True:
        actual = {view: reader(client, topology, view) for view in expected}
        if actual == expected:
            return
        if time.monotonic() > deadline:
            for view, wanted in expected.items():
                assert actual[view] == wanted, view
        time.sleep(0.05)


@pytest.mark.parametrize("conflation", ["none", "inline"])
def test_seed_views_equal_their_recomputation_after_every_step(
    backend: str, tmp_path: Path, unique: str, conflation: str
) -> None:
    topology = _seed_topology(unique, 3, tmp_path, conflation)
    underlying = Underlying(seed=21)
    steps = 30 if backend == MEMORY else 12
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        for _ in range(steps):
            underlying.step(client, operations=10)
            wait_until_exact(client, topology, underlying.expected())
        # Grouping fields are indexed: an exact match uses the automatic hash index.
        _, _, end = client.query("hash-sample-view", filter="/customerName = 'ann'")
        assert "hash" in end.plan, end.plan
        with pytest.raises(ServiceError, match="is a view"):
            client.publish("CompleteByRegion", b'{"region":"EU"}')


def test_views_survive_a_restart_and_a_rebuild_from_their_changelogs(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _seed_topology(unique, 2, tmp_path)
    underlying = Underlying(seed=7)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        for _ in range(4):
            underlying.step(client, operations=15)
        wait_until_exact(client, topology, underlying.expected())
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        wait_until_exact(client, topology, underlying.expected())
        for _ in range(3):  # the groups' members were restored: retractions stay exact
            underlying.step(client, operations=15)
            wait_until_exact(client, topology, underlying.expected())
    if backend == MEMORY:
        return
    for view in ("TOTAL_VALUE", "CompleteByRegion"):  # stores lost: rebuilt from changelogs
        for store in (tmp_path / view).glob("*"):
            for item in sorted(store.rglob("*"), reverse=True):
                item.unlink() if item.is_file() else item.rmdir()
            store.rmdir()
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        wait_until_exact(client, topology, underlying.expected())
        for _ in range(3):
            underlying.step(client, operations=15)
            wait_until_exact(client, topology, underlying.expected())


def test_a_view_subscription_sees_changes_and_an_emptied_group_goes_out_of_focus(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = _seed_topology(unique, 2, tmp_path)
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        eu = client.publish("orders", b'{"orderId":1,"region":"EU","status":"complete"}')
        client.publish("orders", b'{"orderId":2,"region":"US","status":"complete"}')
        wait_until_exact(
            client,
            topology,
            {
                "CompleteByRegion": {
                    "EU": {"completedOrders": 1, "region": "EU"},
                    "US": {"completedOrders": 1, "region": "US"},
                }
            },
        )
        collector = Collector(client.sow_and_subscribe("CompleteByRegion", oof=True))
        assert collector.wait_for(lambda c: c.group_end() is not None), collector.error
        assert len(collector.query_records()) == 2
        client.publish("orders", b'{"orderId":3,"region":"EU","status":"complete"}')
        assert collector.wait_for(lambda c: len(c.changes()) >= 1), collector.error
        client.delete("orders", [eu.sow_key])
        client.publish("orders", b'{"orderId":3,"region":"EU","status":"open"}')  # EU empties
        assert collector.wait_for(
            lambda c: any(ch.kind == sow_pb2.CHANGE_OOF for ch in c.changes())
        ), collector.changes()
        collector.stop()
        changes = collector.changes()
        counts = [
            codec_for(topology.topics["CompleteByRegion"]).decode(c.record.data)
            for c in changes
            if c.kind == sow_pb2.CHANGE_PUBLISH
        ]
        assert {"completedOrders": 2, "region": "EU"} in counts
        [oof] = [c for c in changes if c.kind == sow_pb2.CHANGE_OOF]
        assert oof.oof_reason == "deleted"
        # no gap, no duplicate: the EU changes seen are 2, (1), then out of focus
        eu_counts = [c["completedOrders"] for c in counts if c["region"] == "EU"]
        assert eu_counts in ([2, 1], [2]), eu_counts


def test_a_view_defined_after_its_data_is_built_from_it_and_rebuilt_when_redefined(
    backend: str, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with_views = _seed_topology(unique, 2, tmp_path)
    topics_only = replace(
        with_views,
        topics={n: t for n, t in with_views.topics.items() if t.view is None},
        views={},
    )
    underlying = Underlying(seed=3)
    with running_sow(backend, topics_only, tmp_path, unique) as (_, client):
        for _ in range(3):
            underlying.step(client, operations=20)
    with running_sow(backend, with_views, tmp_path, unique) as (_, client):
        wait_until_exact(client, with_views, underlying.expected())
        underlying.step(client, operations=20)
        wait_until_exact(client, with_views, underlying.expected())
    assert "feeding its" in caplog.text  # progress of the build
    caplog.clear()
    spec = with_views.views["CompleteByRegion"]
    redefined_spec = replace(spec, filter="/status = 'open'")
    topics = dict(with_views.topics)
    topics["CompleteByRegion"] = replace(topics["CompleteByRegion"], view=redefined_spec)
    redefined = replace(
        with_views, topics=topics, views={**with_views.views, "CompleteByRegion": redefined_spec}
    )
    with running_sow(backend, redefined, tmp_path, unique) as (_, client):
        wait_until_exact(client, redefined, underlying.expected(status="open"))
        underlying.step(client, operations=20)
        wait_until_exact(client, redefined, underlying.expected(status="open"))
    assert "starting it afresh" in caplog.text
    # Only the redefined view was rebuilt: the others kept their state.
    fed = [line for line in caplog.text.splitlines() if "feeding its" in line]
    assert fed
    assert all("CompleteByRegion" in line for line in fed), fed


VIEWS_OF_VIEWS = """
topics:
  - {name: orders, key: /orderId}
views:
  - name: CompleteByRegion
    message_type: json
    underlying: orders
    projection: ["COUNT(/orderId) AS /completedOrders", "/region AS /region"]
    grouping: [/region]
    filter: "/status = 'complete'"
  - name: RegionsByCount
    message_type: json
    underlying: CompleteByRegion
    projection: ["/completedOrders AS /completedOrders", "COUNT(/region) AS /regions"]
    grouping: [/completedOrders]
"""


def test_a_view_of_a_view_follows_it(backend: str, tmp_path: Path, unique: str) -> None:
    (tmp_path / "views.yaml").write_text(VIEWS_OF_VIEWS)
    topology = namespaced_topology(unique, load_topology(tmp_path / "views.yaml"), 3)
    underlying = Underlying(seed=11, topics=("orders",))
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        for _ in range(8 if backend == MEMORY else 4):
            underlying.step(client, operations=12)
            by_region = underlying.expected()["CompleteByRegion"]
            histogram: dict[Any, dict[str, Any]] = {}
            for row in by_region.values():
                count = row["completedOrders"]
                histogram.setdefault(count, {"completedOrders": count, "regions": 0})
                histogram[count]["regions"] += 1
            wait_until_exact(
                client,
                topology,
                {"CompleteByRegion": by_region, "RegionsByCount": histogram},
            )


def test_views_stay_exact_while_processors_join_and_leave(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Two processors share the partitions (group assignment): a view partition gets
    changes through its input from the other processor's underlying partitions, and
    directly from its own; as one leaves and comes back, partitions move and every view
    stays exact (the barrier keeps an earlier owner's changes from being overtaken)."""
    topology = _seed_topology(unique, 4, tmp_path)
    underlying = Underlying(seed=5)

    def settings(instance: str) -> Settings:
        return Settings(
            bootstrap_servers=bootstrap,
            state_dir=tmp_path / f"state-{instance}",
            grpc_address="127.0.0.1:0",
            group_id=f"{unique}-group",
            instance_id=instance,
            dead_letter_topic=f"{unique}.dead-letter",
        )

    first = start(settings("0"), topology=topology)
    client = SowClient(first.grpc_address)
    second: Application | None = None
    try:
        _until_ready(first)
        for _round in range(3):
            second = start(settings("1"), topology=topology, service=False)
            _until_ready(second)
            for _ in range(3):
                underlying.step(client, operations=12)
                wait_until_exact(client, topology, underlying.expected())
            assert second.processor is not None
            assert second.processor.owned_partitions, "the second processor took none"
            second.stop()
            second = None
            for _ in range(2):
                underlying.step(client, operations=12)
                wait_until_exact(client, topology, underlying.expected())
    finally:
        client.close()
        if second is not None:
            second.stop()
        first.stop()


def _until_ready(app: Application) -> None:
    deadline = time.monotonic() + 60
    while app.readiness() is not None:
        assert time.monotonic() < deadline, app.readiness()
        time.sleep(0.05)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), partitions=st.integers(1, 4))
def test_seed_views_are_exact_for_generated_streams(
    tmp_path_factory: pytest.TempPathFactory, seed: int, partitions: int
) -> None:
    """The same property, its streams and partition counts generated by hypothesis, on
    the broker-free driver (each example starts a fresh kafka-sow)."""
    tmp_path = tmp_path_factory.mktemp("views")
    unique = f"hyp-{seed}-{partitions}"
    topology = _seed_topology(unique, partitions, tmp_path)
    underlying = Underlying(seed=seed)
    with running_sow(MEMORY, topology, tmp_path, unique) as (_, client):
        for _ in range(6):
            underlying.step(client, operations=8)
            wait_until_exact(client, topology, underlying.expected())
