"""Refusing to start, within a second and in one line, when another process holds what
``sow serve`` needs: its gRPC port or its state directory.

The state directory's lock is held by ``sow serve`` and by its processor child
(:func:`processor.worker.share_state_lock`), which may outlive a killed parent by a few
seconds while it stops: a new ``sow serve`` then waits for it, saying so, rather than
refusing or starting a processor whose stores are still open elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO

from processor.errors import ConfigurationError, StartCancelledError
from processor.worker import ORPHAN_GRACE_S, share_state_lock

LOCK_FILE = "sow.lock"
#: Where a running ``sow serve`` records its addresses, for ``sow status`` run beside it.
SERVED_FILE = "serve.json"

#: How long ``sow serve`` waits for the processor of an ended ``sow serve`` to stop and
#: release the state directory (it exits by itself ``ORPHAN_GRACE_S`` after its parent).
LEFTOVER_WAIT_S = ORPHAN_GRACE_S + 20.0
#: How often that wait says it still waits.
WAIT_REPORT_EVERY_S = 2.0

#: The state directory locks this process holds (kept open: closing one releases it).
_HELD: list[IO[str]] = []
_HOLDER = re.compile(r"process (\d+) \(([^)]*)\)")


def hold_state_dir(
    state_dir: Path, stop: threading.Event | None = None, wait_s: float = LEFTOVER_WAIT_S
) -> None:
    """Take the state directory for the rest of this process's life (an exclusive lock
    on ``sow.lock`` in it, which its processor children hold too); raise a
    ConfigurationError naming the holder when another process has it. Processes of a
    ``sow serve`` that has ended (its processor, still stopping) are waited for, with a
    line on stderr every ``WAIT_REPORT_EVERY_S``, up to ``wait_s``; StartCancelledError
    when ``stop`` is set meanwhile."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = (state_dir / LOCK_FILE).open("a+")
    began, reported = time.monotonic(), 0.0
    while not _try_lock(handle):
        handle.seek(0)
        serve, *others = _holders(handle.read()) or [(0, "")]
        if not serve[0] or _alive(serve[0]):
            handle.close()
            raise ConfigurationError(
                f"state directory {state_dir} is in use by "
                f"{_named(*serve) if serve[0] else 'another process'}: stop it, or give this "
                "one its own with --state-dir or SOW_STATE_DIR"
            )
        # Its sow serve has ended: what holds the lock is one of its children, stopping.
        leftovers = [(pid, what) for pid, what in others if _alive(pid)]
        names = ", ".join(_named(pid, what) for pid, what in leftovers) or (
            f"a process of sow serve {serve[0]}"
        )
        waited = time.monotonic() - began
        if waited >= wait_s:
            handle.close()
            pids = " ".join(str(pid) for pid, _ in leftovers) or "PID"
            raise ConfigurationError(
                f"state directory {state_dir} is still held by {names}, left by a sow serve "
                f"that has ended, after {waited:.0f}s: stop it with `kill {pids}` "
                f"(`kill -9 {pids}` if it does not end), then start again"
            )
        if not reported or time.monotonic() - reported >= WAIT_REPORT_EVERY_S:
            sys.stderr.write(
                f"  still waiting for {names} after {waited:.0f}s\n"
                if reported
                else f"waiting for {names} to stop: it holds the state directory "
                f"{state_dir}, left by a sow serve that has ended (up to {wait_s:.0f}s)\n"
            )
            reported = time.monotonic()
        if stop is not None and stop.wait(0.1):
            handle.close()
            raise StartCancelledError("stopped while waiting for the state directory")
        if stop is None:
            time.sleep(0.1)
    if reported:
        sys.stderr.write(f"  it has ended after {time.monotonic() - began:.1f}s\n")
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()} (sow serve)\n")
    handle.flush()
    _HELD.append(handle)
    share_state_lock(handle.fileno())


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _holders(text: str) -> list[tuple[int, str]]:
    """The processes a lock file names, ``sow serve`` first: ``[(pid, what)]``."""
    return [(int(pid), what) for pid, what in _HOLDER.findall(text)]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs a ``sow`` command (not an id taken by another)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"processor.cli" in command or b"sow" in command


def _named(pid: int, what: str) -> str:
    """ "process N (what)", with its command line when it can be read."""
    with contextlib.suppress(OSError):
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        command = " ".join(os.path.basename(w) for w in words.split("\0")[:4]).strip()
        return f"process {pid} ({what}: {command})"
    return f"process {pid} ({what})"


def check_port_free(address: str) -> None:
    """Raise a ConfigurationError naming the holder when ``host:port`` is taken (port 0
    is always free)."""
    host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigurationError(
            f"gRPC address {address!r} is not HOST:PORT; fix --grpc-address or SOW_GRPC_ADDRESS"
        ) from None
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the gRPC server binds: connections of a stopped server that linger in
        # TIME-WAIT do not hold the port, a listening socket does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]") or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return  # not ours to judge (e.g. a name to resolve): gRPC will say
            raise ConfigurationError(
                f"gRPC address {address} is taken by {_holder(port)}: stop it, or pick "
                "another with --grpc-address or SOW_GRPC_ADDRESS"
            ) from None


def _holder(port: int) -> str:
    """ "process N (command)" listening on ``port``, found through /proc (Linux), or
    "another process"."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc") if inodes else []):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:  # one descriptor closed meanwhile must not hide the rest of the process
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                with contextlib.suppress(OSError):
                    words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                    command = " ".join(os.path.basename(w) for w in words.split("\0")[:4])
                    return f"process {pid} ({command.strip()})"
                return f"process {pid}"
    return "another process"


def record_served(
    state_dir: Path,
    grpc_address: str | None,
    metrics_address: str | None,
    bootstrap: str | None = None,
    topology: Path | None = None,
) -> None:
    """Note this process's addresses (gRPC, metrics, the broker) and topology in the state
    directory it holds (``SERVED_FILE``), for the commands run beside it."""
    served = {
        "pid": os.getpid(),
        "grpc": grpc_address,
        "metrics": metrics_address,
        "bootstrap": bootstrap,
        "topology": None if topology is None else str(topology.resolve()),
    }
    path = state_dir / SERVED_FILE
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(served) + "\n")
    partial.replace(path)


def served(state_dir: Path) -> dict[str, str]:
    """What a ``sow serve`` that still runs recorded in ``state_dir`` (its non-empty
    entries), or {} (no record, or its process has ended)."""
    try:
        record = json.loads((state_dir / SERVED_FILE).read_text())
        os.kill(int(record["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: v for k, v in record.items() if isinstance(v, str) and v}


def served_metrics_address(state_dir: Path) -> str | None:
    """The metrics address a ``sow serve`` that still runs recorded in ``state_dir``."""
    return served(state_dir).get("metrics")
