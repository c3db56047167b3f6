"""`sow serve` on the embedded broker as a user runs it: Ctrl-C at any moment, a clean
start/restart/stop, and a clear refusal when its port or state directory is taken."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

READY = "stop with Ctrl-C"
#: Lines a normal start, restart or stop must not print.
NOISE = ("Traceback", "WARNING", "ERROR", "%3|", "%4|", "FAIL")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))}
    return {**env, "PYTHONUNBUFFERED": "1"}


def _serve(directory: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "processor.cli", "serve", "--grpc-address", "127.0.0.1:0", *args],
        cwd=directory,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _serve_at(directory: Path, address: str, broker: str) -> subprocess.Popen[str]:
    """`sow serve` on a given gRPC address (the same one across a restart)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "serve",
            "--grpc-address",
            address,
            "--embedded-broker",
            broker,
        ],
        cwd=directory,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until_ready(server: subprocess.Popen[str]) -> list[str]:
    assert server.stderr is not None
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        assert line, "sow serve exited before it was ready:\n" + "".join(lines)
        lines.append(line)
        if READY in line:
            return lines
    raise AssertionError("sow serve was not ready within 90s:\n" + "".join(lines))


def _interrupt(server: subprocess.Popen[str], within_s: float = 10) -> str:
    """Ctrl-C the server and return the rest of its output; one that does not exit in
    time is killed (its processor child dies with it) and the test fails."""
    server.send_signal(signal.SIGINT)
    try:
        _, rest = server.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        server.kill()  # its processor child follows (it dies with its parent)
        _, rest = server.communicate(timeout=30)
        stuck = f"sow serve did not stop within {within_s}s of Ctrl-C:\n{rest}"
        raise AssertionError(stuck) from None
    return rest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(Path("topologies"), tmp_path / "topologies")
    return tmp_path


@pytest.mark.parametrize("after_s", [0.8, 1.5, 2.5])
def test_ctrl_c_during_start_up_stops_cleanly(workdir: Path, after_s: float) -> None:
    """From the moment ``sow`` runs (its first ~0.3 s are Python loading it), through the
    broker's start, topic creation and the processor's restore."""
    server = _serve(workdir)
    time.sleep(after_s)
    began = time.monotonic()
    output = _interrupt(server)
    assert server.returncode == 0, output
    assert time.monotonic() - began < 10
    assert not [line for line in output.splitlines() if any(n in line for n in NOISE)], output
    # Nothing half-written: the next start on the same state directory gets ready.
    again = _serve(workdir)
    _until_ready(again)
    _interrupt(again)
    assert again.returncode == 0


def test_a_start_a_restart_and_a_stop_print_no_warning_and_no_broker_noise(
    workdir: Path,
) -> None:
    for _ in range(2):  # the restart finds a store whose log the old broker took along
        server = _serve(workdir)
        output = "".join(_until_ready(server))
        output += _interrupt(server)
        assert server.returncode == 0, output
        noise = [line for line in output.splitlines() if any(n in line for n in NOISE)]
        assert noise == [], output
        # The processor child keeps quiet about what its parent says already.
        assert output.count("waiting for the processor") == 1, output
        assert output.count("stopping...") == 1, output


def test_a_taken_port_or_state_directory_is_refused_at_once_in_one_line(
    workdir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    first = subprocess.Popen(
        [sys.executable, "-m", "processor.cli", "serve", "--grpc-address", "127.0.0.1:0"],
        cwd=workdir,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _until_ready(first)
        address = next(line.split()[1] for line in lines if "gRPC:" in line)
        other = tmp_path_factory.mktemp("other")
        for args, holder in (
            (["--grpc-address", address, "--state-dir", str(other / "state")], "is taken by"),
            (["--grpc-address", "127.0.0.1:0"], "is in use by"),
        ):
            began = time.monotonic()
            second = subprocess.run(
                [sys.executable, "-m", "processor.cli", "serve", *args],
                cwd=workdir,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert second.returncode == 3
            assert time.monotonic() - began < 5
            assert len(second.stderr.strip().splitlines()) == 1, second.stderr
            assert holder in second.stderr
            assert f"process {first.pid}" in second.stderr
    finally:
        _interrupt(first)


def test_sow_serve_metrics_include_its_processor_child(workdir: Path) -> None:
    """Metrics are served without being asked for (loopback, a free port), and
    `sow status` run beside the server finds them."""
    server = _serve(workdir)
    try:
        lines = _until_ready(server)
        grpc_address = next(line.split()[1] for line in lines if "gRPC:" in line)
        metrics = next(
            line.split("http://")[1].split("/")[0] for line in lines if "metrics:" in line
        )
        subprocess.run(
            [sys.executable, "-m", "processor.cli", "publish", "ORDERS", '{"orderId": 1}'],
            env={**_env(), "SOW_GRPC_ADDRESS": grpc_address},
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as reply:
                text = reply.read().decode()
            figures = {
                sample.name: sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if not sample.labels
            }
            if figures.get("sow_processor_records_total", 0) >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # From the processor child (the parent applies nothing). Not just the publish: the
        # queue WORK's heartbeats (every 3 s) and the view's feed are input records too.
        assert figures["sow_processor_records_total"] >= 1
        assert figures["sow_processor_ready"] == 1
        assert figures["sow_replica_caught_up"] == 1  # from the parent
        status = subprocess.run(
            [sys.executable, "-m", "processor.cli", "status"],
            cwd=workdir,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        table = {
            " ".join(line.split()[:-1]): line.split()[-1] for line in status.stdout.splitlines()
        }
        assert table["ready"] == "yes", status.stdout
        assert int(table["input records applied"]) >= 1, status.stdout
        brokers = [line for line in status.stdout.splitlines() if line.startswith("broker ")]
        assert len(brokers) == 1, status.stdout  # the parent's, not the child's view of it
        assert "embedded Apache Kafka" in brokers[0], status.stdout
        helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
        assert len(helps) == len(set(helps)), "a metric family is exported twice"
        # Beside it, `sow publish` can write straight to its broker, and `sow query` finds
        # its gRPC address, with no address given to either.
        beside = {"cwd": workdir, "env": _env(), "capture_output": True, "text": True}
        published = subprocess.run(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "publish",
                "ORDERS",
                "--via",
                "kafka",
                "--wait",
            ],
            input="".join(f'{{"orderId": {i}}}\n' for i in range(1000, 1500)),
            timeout=120,
            check=False,
            **beside,  # type: ignore[call-overload]
        )
        assert published.returncode == 0, published.stderr
        assert orjson.loads(published.stdout.splitlines()[-1])["published"] == 500
        queried = subprocess.run(
            [sys.executable, "-m", "processor.cli", "query", "ORDERS"],
            timeout=60,
            check=True,
            **beside,  # type: ignore[call-overload]
        )
        assert orjson.loads(queried.stdout.splitlines()[-1])["group_end"]["matches"] == 501
    finally:
        _interrupt(server)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_a_restart_never_answers_a_partial_or_empty_sow(workdir: Path, broker: str) -> None:
    """Issue 18 item 3: polled every 20 ms from the moment `sow serve` starts again (its
    embedded broker restarts with it), a query either fails (UNAVAILABLE, not ready) or
    answers the whole SOW; never fewer records. On Tansu the log does not survive the
    restart: the processor re-publishes the SOW into the new one, which the query service
    must not answer from before it is whole (it answered 0, then 1,449 of 3,000)."""
    from processor.client.sow_client import SowClient

    address = f"127.0.0.1:{_free_port()}"
    first = _serve_at(workdir, address, broker)
    try:
        _until_ready(first)
        lines = "".join(f'{{"orderId": {i}, "v": 1}}\n' for i in range(3000))
        subprocess.run(
            [sys.executable, "-m", "processor.cli", "publish", "ORDERS", "--wait"],
            input=lines,
            env={**_env(), "SOW_GRPC_ADDRESS": address},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    finally:
        _interrupt(first, within_s=30)
    second = _serve_at(workdir, address, broker)
    answers: list[int] = []
    refusals: set[str] = set()
    snapshot: list[int] = []
    try:
        started = time.monotonic()
        with SowClient(address) as client:
            while time.monotonic() - started < 40 and len(answers) < 50:
                try:
                    records, _, _ = client.query("ORDERS", timeout=5)
                    answers.append(len(records))
                except Exception as exc:  # not up yet, or not ready: both are fine
                    refusals.add(type(exc).__name__ + ": " + str(exc).splitlines()[0][:80])
                    if "catching up" in str(exc) and not snapshot:
                        # A sow_and_subscribe started during catch-up waits for it.
                        snapshot.append(_snapshot_size(client))
                time.sleep(0.02)
    finally:
        _interrupt(second, within_s=30)
    assert answers, f"no query answered within 40 s: {refusals}"
    assert set(answers) == {3000}, (sorted(set(answers)), refusals)
    assert snapshot in ([], [3000]), (snapshot, refusals)  # [] when never catching up


def _snapshot_size(client: Any) -> int:
    """The number of records in a sow_and_subscribe's snapshot (up to its group end)."""
    stream = client.sow_and_subscribe("ORDERS", sub_id="probe")
    size = 0
    try:
        for message in stream:
            part = message.WhichOneof("part")
            if part == "batch":
                size += len(message.batch.records)
            elif part == "group_end":
                return size
    finally:
        stream.cancel()
    raise AssertionError("the subscription ended before its snapshot")
