"""A queue across `sow serve` SIGKILLed and restarted at once (issue 31 item 1): the
restarted processor restores the dead run's subscriptions, and must neither lease to them
(at-most-once: what it sends them is gone) nor keep their leases from the new run's
consumers (at-least-once: redelivered within a second of the new subscription)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import SowClient
from tests.integration.queue_helpers import Consumer

READY = "stop with Ctrl-C"
WAIT_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(workdir: Path, address: str, bootstrap: str) -> subprocess.Popen[str]:
    """`sow serve` in its own process group (SIGKILLed as a whole, as a container is)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "serve",
            "--grpc-address",
            address,
            "--bootstrap-servers",
            bootstrap,
            "--topology",
            str(workdir / "queues.yaml"),
            "--state-dir",
            str(workdir / "sow-state"),
        ],
        cwd=workdir,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert server.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        assert line, "sow serve exited before it was ready:\n" + "".join(lines)
        lines.append(line)
        if READY in line:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # drain
            return server
    raise AssertionError("sow serve was not ready in time:\n" + "".join(lines))


def _kill(server: subprocess.Popen[str]) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=30)


@pytest.mark.parametrize("semantics", ["at-most-once", "at-least-once"])
def test_a_queue_loses_and_delays_nothing_across_a_sigkill_of_sow_serve(
    bootstrap: str, unique: str, tmp_path: Path, semantics: str
) -> None:
    (tmp_path / "queues.yaml").write_text(
        "topics:\n"
        f"  - {{name: jobs, sow: false, kafka_topic: {unique}.jobs, partitions: 1}}\n"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: jobs, semantics: {semantics}, "
        "max_per_subscription_backlog: 10}\n"
    )
    address = f"127.0.0.1:{_free_port()}"
    server = _serve(tmp_path, address, bootstrap)
    try:
        with SowClient(address) as client:
            for i in range(6):
                client.publish("Q", orjson.dumps({"id": i}))
            first = Consumer(client, max_backlog=2)
            assert first.until(2) == [0, 1]
            time.sleep(0.5)  # the leases are committed; nothing more is leased to it
            assert first.ids() == [0, 1]
    finally:
        _kill(server)
    server = _serve(tmp_path, address, bootstrap)
    try:
        with SowClient(address) as client:
            second = Consumer(client, max_backlog=10)
            if semantics == "at-most-once":
                # 0 and 1 were delivered (removed when leased); 2..5 never were
                assert second.until(4) == [2, 3, 4, 5]
            else:
                assert second.until(6) == [0, 1, 2, 3, 4, 5]
                redelivered = [at for i, at in zip(second.ids(), second.at, strict=True) if i < 2]
                assert max(redelivered) - second.since < 1.0, "redelivery waited"
            time.sleep(1.0)
            assert len(second.ids()) == len(set(second.ids())), second.ids()
            second.stream.ack(second.bookmarks())
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill(server)
