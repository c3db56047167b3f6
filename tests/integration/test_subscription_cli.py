"""``sow subscribe`` and ``sow sow-and-subscribe`` as a user runs them."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson

from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/orderId",))


def _start(*args: str) -> tuple[subprocess.Popen[str], queue.Queue[dict[str, Any]]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "processor.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(orjson.loads(line))

    threading.Thread(target=read, daemon=True).start()
    return process, lines


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(20)


def test_cli_sow_and_subscribe_and_subscribe_print_json_lines(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(bootstrap, topology, tmp_path, unique) as (app, client):
        first = client.publish("ORDERS", b'{"orderId": 1, "price": 20}')
        client.query("ORDERS", min_position=[first.position])
        server = ("--server", app.grpc_address)
        both, both_lines = _start(
            "sow-and-subscribe", "ORDERS", "--filter", "/price > 10", "--oof", *server
        )
        live, live_lines = _start("subscribe", "ORDERS", *server)
        try:
            sow_line = both_lines.get(timeout=30)
            assert sow_line["kind"] == "sow"
            assert sow_line["data"] == {"orderId": 1, "price": 20}
            assert "group_end" in both_lines.get(timeout=10)
            assert "registered" in live_lines.get(timeout=30)
            client.publish("ORDERS", b'{"orderId": 1, "price": 5}')
            oof = both_lines.get(timeout=20)
            assert (oof["kind"], oof["reason"]) == ("oof", "match")
            assert oof["data"] == {"orderId": 1, "price": 5}  # the new state, as AMPS sends it
            assert "current" not in oof
            publish = live_lines.get(timeout=20)
            assert (publish["kind"], publish["data"]) == ("publish", {"orderId": 1, "price": 5})
            assert publish["sow_key"] == first.sow_key
        finally:
            codes = [_stop(both), _stop(live)]
        assert codes == [0, 0]


def test_cli_aggregated_sow_and_subscribe(tmp_path: Path, unique: str) -> None:
    """``--grouping`` and ``--projection``: each group's row, then its live updates."""
    topology = namespaced(unique, ORDERS)
    with running_sow("memory", topology, tmp_path, unique) as (app, client):
        client.publish("ORDERS", b'{"orderId": 1, "sym": "IBM", "qty": 5}', ack="processed")
        client.publish("ORDERS", b'{"orderId": 2, "sym": "IBM", "qty": 7}', ack="processed")
        process, lines = _start(
            "sow-and-subscribe",
            "ORDERS",
            "--grouping",
            "/sym",
            "--projection",
            "/sym, SUM(/qty) AS /qty, COUNT(/orderId) AS /n",
            "--oof",
            "--server",
            app.grpc_address,
        )
        try:
            row = lines.get(timeout=30)
            assert (row["kind"], row["data"]) == ("sow", {"sym": "IBM", "qty": 12, "n": 2})
            assert "group_end" in lines.get(timeout=10)
            client.publish("ORDERS", b'{"orderId": 2, "sym": "SAP", "qty": 7}')
            changes = {lines.get(timeout=20)["data"]["sym"]: None for _ in range(2)}
            assert set(changes) == {"IBM", "SAP"}  # the record moved: both groups changed
        finally:
            code = _stop(process)
        assert code == 0
