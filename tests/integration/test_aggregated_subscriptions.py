"""Aggregated subscriptions (issue 36, spec 3.17): a sow_and_subscribe with projection and
grouping keeps one live row per group. Under a random stream of publishes, updates that
move records between groups, deletes and expirations, the subscriber's rows equal, at
every checkpoint, both a from-scratch aggregation of a model of the records and the
service's own aggregated query. Both backends."""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from processor.client.sow_client import SowClient
from processor.errors import SowError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/id",), partitions=2, expiration_s=0)
PROJECTION = (
    "/sym, COUNT(/id) AS /n, SUM(/qty) AS /total, MIN(/px) AS /lo, MAX(/px) AS /hi, "
    "COUNT_DISTINCT(/venue) AS /venues, AVG(/px) AS /avg, STDDEV_POP(/qty) AS /sd, "
    "STDDEV_SAMP(/qty) AS /sds"
)
GROUPING = "/sym"
FILTER = "/qty > 2"
SYMBOLS = ("IBM", "MSFT", "AAPL", "ORCL", "SAP")


class Follower:
    """A sow_and_subscribe stream's rows by SowKey, kept as its messages arrive."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.rows: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        try:
            for message in self.stream:
                part = message.WhichOneof("part")
                if part == "batch":
                    with self.lock:
                        for record in message.batch.records:
                            self.rows[record.sow_key] = json.loads(record.data)
                elif part in ("change", "changes"):
                    changes = [message.change] if part == "change" else message.changes.changes
                    with self.lock:
                        for change in changes:
                            self._apply(change)
        except SowError as exc:
            self.error = exc
        except Exception as exc:  # the stream cancelled at the end of a test
            if "CANCELLED" not in str(exc) and "cancelled" not in str(exc):
                self.error = exc
        finally:
            self.ended.set()

    def _apply(self, change: Any) -> None:
        key = change.record.sow_key
        if change.kind == 0:  # CHANGE_PUBLISH
            self.rows[key] = json.loads(change.record.data)
        else:
            assert change.oof_reason == "deleted", change
            self.rows.pop(key)

    def by_group(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {row["sym"]: row for row in self.rows.values()}


def expected(records: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The aggregation from scratch, over the model's records that pass the filter."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records.values():
        if record["qty"] > 2:
            groups.setdefault(record["sym"], []).append(record)
    return {
        sym: {
            "sym": sym,
            "n": len(members),
            "total": sum(m["qty"] for m in members),
            "lo": min(m["px"] for m in members),
            "hi": max(m["px"] for m in members),
            "venues": len({m["venue"] for m in members}),
            "avg": statistics.fmean(m["px"] for m in members),
            "sd": statistics.pstdev(m["qty"] for m in members),
            "sds": statistics.stdev(m["qty"] for m in members) if len(members) > 1 else None,
        }
        for sym, members in groups.items()
    }


def queried(client: SowClient, topic: str) -> dict[str, dict[str, Any]]:
    records, _, _ = client.query(
        topic, filter=FILTER, projection=PROJECTION, grouping=GROUPING, text_form=True
    )
    return {row["sym"]: row for row in (json.loads(r.data) for r in records)}


def same(rows: dict[str, dict[str, Any]], model: dict[str, dict[str, Any]]) -> bool:
    if rows.keys() != model.keys():
        return False
    for sym, row in rows.items():
        for field, value in model[sym].items():
            if field not in row:
                return False
            if isinstance(value, float) and row[field] != pytest.approx(value, rel=1e-9):
                return False
            if not isinstance(value, float) and row[field] != value:
                return False
    return True


def settle(follower: Follower, model: dict[str, dict[str, Any]], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert follower.error is None, follower.error
        if same(follower.by_group(), model):
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: subscriber rows {follower.by_group()} != model {model}")


def publish(client: SowClient, topic: str, record: dict[str, Any], **options: Any) -> None:
    client.publish(topic, json.dumps(record).encode(), ack="persisted", **options)


def random_record(rng: random.Random, record_id: int) -> dict[str, Any]:
    return {
        "id": record_id,
        "sym": rng.choice(SYMBOLS),
        "qty": rng.randint(0, 20),
        "px": round(rng.uniform(10, 500), 2),
        "venue": rng.choice(("XNYS", "XNAS", "BATS")),
    }


def test_rows_equal_a_from_scratch_aggregation_under_a_random_stream(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    topic = next(iter(topology.topics))
    rng = random.Random(36)
    records: dict[int, dict[str, Any]] = {}
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        for record_id in range(30):
            records[record_id] = random_record(rng, record_id)
            publish(client, topic, records[record_id])
        stream = client.sow_and_subscribe(
            topic, filter=FILTER, projection=PROJECTION, grouping=GROUPING, oof=True
        )
        follower = Follower(stream)
        second = Follower(
            client.sow_and_subscribe(
                topic, filter=FILTER, projection=PROJECTION, grouping=GROUPING, oof=True
            )
        )
        settle(follower, expected(records), "the query phase")
        hub = app.subscriptions
        assert hub is not None
        assert len(hub._aggregations.feeds()) == 1  # the two share one state
        for checkpoint in range(3):
            for _ in range(50):
                roll = rng.random()
                if roll < 0.5 or not records:  # a new record or an update (maybe regrouped)
                    record_id = rng.randrange(60)
                    records[record_id] = random_record(rng, record_id)
                    publish(client, topic, records[record_id])
                elif roll < 0.8:
                    record_id = rng.choice(sorted(records))
                    del records[record_id]
                    client.delete(topic, filter=f"/id = {record_id}")
                else:  # a whole group deleted: its row goes as an OOF
                    sym = rng.choice(SYMBOLS)
                    records = {k: r for k, r in records.items() if r["sym"] != sym}
                    client.delete(topic, filter=f"/sym = '{sym}'")
            model = expected(records)
            settle(follower, model, f"checkpoint {checkpoint}")
            settle(second, model, f"checkpoint {checkpoint} (second subscriber)")
            assert same(queried(client, topic), model)
        # Expirations leave the groups too.
        expiring = {i: dict(random_record(rng, i), qty=10, sym="EXP") for i in range(100, 106)}
        for record in expiring.values():
            publish(client, topic, record, expiration=2.0)
        settle(follower, expected(records | expiring), "before the expirations")
        settle(follower, expected(records), "after the expirations")
        stream.cancel()
        second.stream.cancel()
        deadline = time.monotonic() + 10
        while hub._aggregations.feeds() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub._aggregations.feeds() == []  # the state goes with its last subscriber


def test_subscribe_sharing_and_refusals(tmp_path: Path, unique: str) -> None:
    """A subscribe gets the updates only; subscribers with another filter get a state of
    their own; what cannot go with an aggregation is refused with the reason."""
    topology = namespaced(unique, ORDERS)
    topic = next(iter(topology.topics))
    with running_sow("memory", topology, tmp_path, unique) as (app, client):
        publish(client, topic, {"id": 1, "sym": "IBM", "qty": 5, "px": 10.0, "venue": "X"})
        hub = app.subscriptions
        assert hub is not None
        live = Follower(client.subscribe(topic, projection=PROJECTION, grouping=GROUPING))
        other = Follower(
            client.sow_and_subscribe(
                topic, filter="/qty > 6", projection=PROJECTION, grouping=GROUPING
            )
        )
        deadline = time.monotonic() + 10
        while len(hub._aggregations.feeds()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(hub._aggregations.feeds()) == 2  # one per filter
        assert len(hub.subscriptions()) == 2  # the subscribers, not their shared feeds
        publish(client, topic, {"id": 2, "sym": "IBM", "qty": 7, "px": 30.0, "venue": "Y"})
        settle(live, {"IBM": {"sym": "IBM", "n": 2, "total": 12, "lo": 10.0, "hi": 30.0}}, "")
        settle(other, {"IBM": {"sym": "IBM", "n": 1, "total": 7}}, "the other filter")
        # Without oof (nor send_deletes) an emptied group is not announced, as in AMPS.
        client.delete(topic, filter="/id = 2")
        settle(other, {"IBM": {"sym": "IBM", "n": 1}}, "no OOF without oof")
        live.stream.cancel()
        other.stream.cancel()
        refused = {
            "projection alone": {"projection": PROJECTION},
            "a select list": {"projection": PROJECTION, "grouping": GROUPING, "select": "[+/a]"},
            "a bookmark": {"projection": PROJECTION, "grouping": GROUPING, "bookmark": "0"},
            "a window": {"projection": PROJECTION, "grouping": GROUPING, "top_n": 2, "skip_n": 0},
            "a time filter": {
                "projection": PROJECTION,
                "grouping": GROUPING,
                "filter": "/px < UNIX_TIMESTAMP()",
            },
        }
        for what, options in refused.items():
            with pytest.raises(SowError, match="aggregat") as caught:
                next(iter(client.sow_and_subscribe(topic, **options)))
            assert getattr(caught.value, "code", "") == "INVALID_ARGUMENT", what
        regex = client.sow_and_subscribe(".*", projection=PROJECTION, grouping=GROUPING)
        with pytest.raises(SowError, match="one literal SOW topic"):
            next(iter(regex))


def test_a_row_with_a_binary_value_is_json() -> None:
    """A projected field JSON lacks (a binary field's bytes) is Base64 in the row, for an
    aggregated query and subscription alike (it made the row fail to build)."""
    from processor.query.sow import aggregated_envelope

    envelope = aggregated_envelope(ORDERS, "1", {"sym": "IBM", "blob": b"\x00\x01"}, 0)
    assert json.loads(envelope.data) == {"sym": "IBM", "blob": "AAE="}
