"""The README's tour, run as a user would: ``sow serve`` on the embedded default, then the
``sow publish / query / delete`` commands against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from processor.log.broker import free_loopback_port
from processor.log.broker.maven import kafka_version

#: Also run on the fallback Tansu broker in CI (pyproject.toml's smoke marker).
pytestmark = pytest.mark.smoke

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


class Server:
    """``sow serve`` as a user starts it, on the embedded default broker."""

    def __init__(self, tmp_path: Path, address: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
        env["SOW_GRPC_ADDRESS"] = address
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "serve",
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
        self.lines: list[str] = []
        self.up = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "gRPC:" in line:
                self.up.set()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; its exit code."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -9


def on_tansu() -> bool:
    """The session runs the Tansu smoke tier (SOW_EMBEDDED_BROKER=tansu)."""
    return os.environ.get("SOW_EMBEDDED_BROKER", "").strip().lower() == "tansu"


def eventually(
    run: Callable[[], list[dict[str, object]]],
    done: Callable[[list[dict[str, object]]], bool],
    timeout_s: float = 30,
) -> list[dict[str, object]]:
    """``run()``'s lines once ``done`` holds for them (views and a queue's browse view
    follow their topics a moment behind), asking again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = run()
        if done(lines):
            return lines
        assert time.monotonic() < deadline, lines
        time.sleep(0.2)


def test_readme_tour_on_the_embedded_default(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_loopback_port()}"
    server = Server(tmp_path, address)
    try:
        assert server.up.wait(120), server.text
        text = server.text
        if on_tansu():
            assert "embedded Tansu broker" in text
        else:
            assert f"embedded Apache Kafka {kafka_version()}" in text, text
        assert address in text
        at = ("--server", address)
        msft = sow("publish", "ORDERS", '{"orderId": 1, "symbol": "MSFT", "price": 50}', *at)[0]
        first = sow("publish", "ORDERS", '{"orderId": 2, "symbol": "IBM", "price": 120}', *at)[0]
        update = sow(
            "publish", "ORDERS", *at, stdin='{"orderId": 2, "symbol": "IBM", "price": 95}\n'
        )[0]
        assert update["sow_key"] == first["sow_key"]
        # The README's tour shows this line.
        assert update == {"sow_key": "17927390825128479335", "position": "ORDERS/1/1"}
        lines = sow("query", "ORDERS", "--min-position", str(update["position"]), *at)
        records, end = lines[:-1], lines[-1]
        assert end["group_end"]["records_returned"] == 2  # type: ignore[index]
        prices = {r["data"]["orderId"]: r["data"]["price"] for r in records}  # type: ignore[index]
        assert prices == {1: 50, 2: 95}
        # The README deletes order 1 by the SowKey its query printed.
        assert msft["sow_key"] == "3079173882856986590"
        assert sow("delete", "ORDERS", "--sow-keys", "3079173882856986590", *at) == [
            {"records_deleted": 1}
        ]
        # The README's view and queue lines.
        sow("publish", "ORDERS", '{"orderId": 3, "symbol": "MSFT", "price": 40}', *at)
        sow("publish", "ORDERS", '{"orderId": 4, "symbol": "MSFT", "price": 60}', *at)
        groups = [
            {"symbol": "IBM", "orders": 1, "total": 95},  # order 2
            {"symbol": "MSFT", "orders": 2, "total": 100},  # orders 3 and 4
        ]
        rows = eventually(
            lambda: sow("query", "ORDERS_BY_SYMBOL", "--order-by", "/symbol", *at),
            lambda lines: [r["data"] for r in lines[:-1]] == groups,  # type: ignore[index]
        )
        assert [r["sow_key"] for r in rows[:-1]] == ["15760750612572724335", "17201102046150960771"]
        assert rows[-1]["group_end"]["records_returned"] == 2  # type: ignore[index]
        tasks = [{"task": "invoice", "orderId": 3}, {"task": "ship", "orderId": 4}]
        for task in tasks:
            published = sow("publish", "WORK", orjson.dumps(task).decode(), *at)[0]
        # The queue holds both (the position: the replica has read its enqueues)...
        held = sow("query", "WORK", "--min-position", str(published["position"]), *at)
        assert [(r["sow_key"], r["data"]) for r in held[:-1]] == [
            ("WORK/0/0", tasks[0]),
            ("WORK/0/1", tasks[1]),
        ]
        consumed = sow("consume", "WORK", "--ack", "--count", "2", *at)
        assert consumed[0] == {"registered": {"queue": "WORK"}}
        assert [(c["kind"], c["bookmark"], c["deliveries"], c["data"]) for c in consumed[1:]] == [
            ("lease", "WORK/0/0", 1, tasks[0]),
            ("lease", "WORK/0/1", 1, tasks[1]),
        ]
        # ...and acknowledged, they leave it (the replica shows it a moment later).
        eventually(
            lambda: sow("query", "WORK", *at),
            lambda lines: lines[-1]["group_end"]["matches"] == 0,  # type: ignore[index]
        )
        # The README's query lines: filter, order and limit; aggregate; delete by filter.
        last: dict[str, str] = {}
        for order in (3, 40, "MSFT"), (4, 60, "MSFT"), (5, 150, "MSFT"):
            published = sow(
                "publish",
                "ORDERS",
                orjson.dumps({"orderId": order[0], "symbol": order[2], "price": order[1]}).decode(),
                *at,
            )[0]
            position = str(published["position"])
            last[position.rsplit("/", 1)[0]] = position
        waits = [arg for p in last.values() for arg in ("--min-position", p)]
        lines = sow(
            "query",
            "ORDERS",
            "--filter",
            "/price < 100 AND /symbol LIKE '^M'",
            "--order-by",
            "/price DESC",
            "--top-n",
            "5",
            *waits,
            *at,
        )
        # Order 1 (MSFT) was deleted above; order 2 is IBM.
        assert [r["data"]["orderId"] for r in lines[:-1]] == [4, 3]  # type: ignore[index]
        assert lines[-1]["group_end"]["plan"] == "memo-scan"  # type: ignore[index]
        lines = sow(
            "query",
            "ORDERS",
            "--grouping",
            "/symbol",
            "--projection",
            "/symbol, COUNT(/orderId) AS /orders",
            *at,
        )
        counts = {r["data"]["symbol"]: r["data"]["orders"] for r in lines[:-1]}  # type: ignore[index]
        assert counts == {"IBM": 1, "MSFT": 3}
        assert all("position" not in r for r in lines[:-1])  # a row comes from no one message
        # --query-id is echoed in a group_begin line; a pattern's results name their topic.
        tagged = sow("query", "ORD.*S", "--query-id", "q7", "--top-n", "1", *at)
        assert tagged[0]["group_begin"]["query_id"] == "q7"  # type: ignore[index]
        assert tagged[1]["topic"] == "ORDERS"
        assert tagged[-1]["group_end"]["query_id"] == "q7"  # type: ignore[index]
        hurried = subprocess.run(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "query",
                "ORDERS",
                "--min-position",
                "ORDERS/0/1000000000",  # a position the log never reaches
                "--timeout",
                "1",
                *at,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert hurried.returncode == 6, hurried.stderr  # timeout
        assert "DEADLINE_EXCEEDED" in hurried.stderr
        assert sow("delete", "ORDERS", "--filter", "/price > 100", *at) == [{"records_deleted": 1}]
        failed = subprocess.run(
            [sys.executable, "-m", "processor.cli", "query", "NOPE", *at],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert failed.returncode == 4  # not found
        assert "NOT_FOUND" in failed.stderr
    finally:
        code = server.stop()
    assert code == 0, server.text
    # Restarted on the same state directory: the same SOW, and on Apache Kafka the same
    # log (nothing re-published; the next publish continues the partition's offsets).
    again = Server(tmp_path, address)
    try:
        assert again.up.wait(120), again.text
        # On Tansu the SOW is re-published into the new log first: ask until it is back.
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "processor.cli",
                    "query",
                    "ORDERS",
                    "--order-by",
                    "/orderId",
                    *at,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            ids = [orjson.loads(line)["data"]["orderId"] for line in done.stdout.splitlines()[:-1]]
            if (done.returncode == 0 and ids == [2, 3, 4]) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert ids == [2, 3, 4], done.stderr
        if not on_tansu():
            assert "re-publish" not in again.text, again.text
            after = sow("publish", "ORDERS", '{"orderId": 2, "symbol": "IBM", "price": 1}', *at)
            # Partition 1 held order 2 twice and the filter delete before the restart.
            assert int(str(after[0]["position"]).rsplit("/", 1)[1]) >= 3, after
    finally:
        code = again.stop()
    assert code == 0, again.text


def test_eval_prints_the_value_as_json() -> None:
    assert sow("eval", "/price * 2", "--message", '{"price": 50}') == [100]
    assert sow("eval", "SUBSTR('fandango', -4, 2)") == ["an"]
    assert sow("eval", "/tags = 'b'", "--message", '{"tags": ["a", "b"]}') == [True]
    failed = subprocess.run(
        [sys.executable, "-m", "processor.cli", "eval", "/a = = 1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode == 3  # invalid argument
    assert "at position 5" in failed.stderr


def test_help_explains_every_command() -> None:
    for command in ("serve", "process", "publish", "query", "delete", "eval"):
        done = subprocess.run(
            [sys.executable, "-m", "processor.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert f"usage: sow {command}" in done.stdout
        assert (
            "--topology" in done.stdout or "--server" in done.stdout or "--message" in done.stdout
        )


def test_a_client_command_with_no_server_exits_unavailable_with_a_hint() -> None:
    began = time.monotonic()
    failed = subprocess.run(
        [sys.executable, "-m", "processor.cli", "query", "ORDERS", "--server", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 5  # unavailable
    assert "no query service answered at 127.0.0.1:1: start one with `sow serve`" in failed.stderr
    assert "--server HOST:PORT" in failed.stderr
    assert time.monotonic() - began < 20


def test_version_and_exit_codes_are_documented() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.startswith("kafka-sow ")
    helped = subprocess.run(
        [sys.executable, "-m", "processor.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "4 not found, 5 unavailable" in " ".join(helped.stdout.split())


def test_every_client_command_gives_up_on_a_silent_server_at_its_timeout() -> None:
    """A server that accepts the connection and never answers: publish (one message and a
    stream from stdin), query, delete, subscribe, sow-and-subscribe and status each exit
    with the timeout code, saying so, soon after their --timeout."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(silent.accept()[0])  # kept open, never read or written
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    commands = {
        "publish": (["publish", "ORDERS", '{"orderId": 1}', "--server", address], None),
        "publish stream": (["publish", "ORDERS", "--server", address], '{"orderId": 1}\n'),
        "query": (["query", "ORDERS", "--server", address], None),
        "delete": (["delete", "ORDERS", "--filter", "1=1", "--server", address], None),
        "subscribe": (["subscribe", "ORDERS", "--server", address], None),
        "sow-and-subscribe": (["sow-and-subscribe", "ORDERS", "--server", address], None),
        "status": (["status", "--metrics-address", address], None),
    }
    try:
        runs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "processor.cli", *args, "--timeout", "2"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, (args, _) in commands.items()
        }
        for name, run in runs.items():
            feed = commands[name][1]
            # the stream's stdin stays open: waiting for input must never count
            if feed is not None:
                assert run.stdin is not None
                run.stdin.write(feed)
                run.stdin.flush()
        began = time.monotonic()
        for name, run in runs.items():
            _, err = run.communicate(timeout=60)
            assert run.returncode == 6, (name, err)  # timeout
            assert "2s" in err or "DEADLINE_EXCEEDED" in err, (name, err)
        # all ran side by side: each gave up within seconds of its 2 s (start-up included)
        assert time.monotonic() - began < 30
    finally:
        silent.close()
        for connection in held:
            connection.close()
