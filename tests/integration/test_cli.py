"""The README's tour, run as a user would: ``sow serve`` on the embedded default, then the
``sow publish / query / delete`` commands against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson

from processor.broker import free_loopback_port

REPO = Path(__file__).resolve().parents[2]


def sow(*args: str, stdin: str | None = None) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_readme_tour_on_the_embedded_default(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_loopback_port()}"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["SOW_GRPC_ADDRESS"] = address
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "serve",
            "--no-docker",
            "--topology",
            str(REPO / "topologies"),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    banner: list[str] = []
    up = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            banner.append(line)
            if "gRPC:" in line:
                up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert up.wait(60), "".join(banner)
        text = "".join(banner)
        assert "embedded Tansu broker" in text
        assert address in text
        at = ("--server", address)
        sow("publish", "ORDERS", '{"orderId": 1, "symbol": "MSFT", "price": 50}', *at)
        first = sow("publish", "ORDERS", '{"orderId": 2, "symbol": "IBM", "price": 120}', *at)[0]
        update = sow(
            "publish", "ORDERS", *at, stdin='{"orderId": 2, "symbol": "IBM", "price": 95}\n'
        )[0]
        assert update["sow_key"] == first["sow_key"]
        assert update["position"] == "ORDERS/1/1"  # the README's tour shows this position
        lines = sow("query", "ORDERS", "--min-position", str(update["position"]), *at)
        records, end = lines[:-1], lines[-1]
        assert end["group_end"]["records_returned"] == 2  # type: ignore[index]
        prices = {r["data"]["orderId"]: r["data"]["price"] for r in records}  # type: ignore[index]
        assert prices == {1: 50, 2: 95}
        assert sow("delete", "ORDERS", "--sow-keys", str(first["sow_key"]), *at) == [
            {"records_deleted": 1}
        ]
        failed = subprocess.run(
            [sys.executable, "-m", "processor.cli", "query", "NOPE", *at],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert failed.returncode == 2
        assert "NOT_FOUND" in failed.stderr
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    assert server.returncode == 0, "".join(banner)


def test_help_explains_every_command() -> None:
    for command in ("serve", "process", "publish", "query", "delete"):
        done = subprocess.run(
            [sys.executable, "-m", "processor.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert f"usage: sow {command}" in done.stdout
        assert "--topology" in done.stdout or "--server" in done.stdout
