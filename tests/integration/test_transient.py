"""Transient topics keep state in memory and rebuild from the log per RecoveryPoint."""

from __future__ import annotations

from pathlib import Path

import orjson

from processor.topology.model import Durability, RecoveryKind, RecoveryPoint, SowTopic
from tests.integration.harness import namespaced, running_sow


def _ids(records: list[object]) -> list[int]:
    return sorted(orjson.loads(r.data)["id"] for r in records)  # type: ignore[attr-defined]


def _transient(kind: RecoveryKind) -> SowTopic:
    return SowTopic(
        "TICKS",
        keys=("/id",),
        durability=Durability.TRANSIENT,
        recovery_point=RecoveryPoint(kind),
    )


def test_transient_epoch_rebuilds_everything(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, _transient(RecoveryKind.EPOCH))
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        client.publish("TICKS", b'{"id": 1}')
        last = client.publish("TICKS", b'{"id": 2}')
        records, _, _ = client.query("TICKS", min_position=[last.position])
        assert _ids(records) == [1, 2]
    assert not any(tmp_path.rglob("CURRENT")), "a transient topic wrote a RocksDB store"
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        again = client.publish("TICKS", b'{"id": 3}')
        records, _, _ = client.query("TICKS", min_position=[again.position])
        assert _ids(records) == [1, 2, 3]


def test_transient_now_starts_empty(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, _transient(RecoveryKind.NOW))
    with running_sow(backend, topology, tmp_path, unique) as (_, client):
        last = client.publish("TICKS", b'{"id": 1}')
        records, _, _ = client.query("TICKS", min_position=[last.position])
        assert _ids(records) == [1]
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        assert app.processor is not None
        assert app.processor.ready.wait(60)
        fresh = client.publish("TICKS", b'{"id": 2}')
        records, _, _ = client.query("TICKS", min_position=[fresh.position])
        assert _ids(records) == [2]
