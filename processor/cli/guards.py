"""Refusing to start, within a second and in one line, when another process holds what
``sow serve`` needs: its gRPC port or its state directory."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import IO

from processor.errors import ConfigurationError

LOCK_FILE = "sow.lock"
#: Where a running ``sow serve`` records its addresses, for ``sow status`` run beside it.
SERVED_FILE = "serve.json"

#: The state directory locks this process holds (kept open: closing one releases it).
_HELD: list[IO[str]] = []


def hold_state_dir(state_dir: Path) -> None:
    """Take the state directory for the rest of this process's life (an exclusive lock
    on ``sow.lock`` in it); raise a ConfigurationError naming the holder when another
    process has it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = (state_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigurationError(
            f"state directory {state_dir} is in use by {holder}: stop it, or give this one "
            "its own with --state-dir or SOW_STATE_DIR"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()} (sow serve)\n")
    handle.flush()
    _HELD.append(handle)


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
