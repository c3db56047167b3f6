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
    topics = [json.loads(line) for line in done.stdout.splitlines()]
    assert topics
    assert all(
        t["source"] == str(path) and t["kafka_topic"] and t["partitions"] >= 1 for t in topics
    )
    assert f"{path}: OK" in done.stderr


def test_the_whole_directory_checks_out_as_sow_serve_loads_it() -> None:
    done = _check(Path("topologies"))
    assert done.returncode == 0, done.stderr
    names = {json.loads(line)["topic"] for line in done.stdout.splitlines()}
    assert {"ORDERS", "BLOBS", "INVOICES"} <= names


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
