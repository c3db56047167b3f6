"""``sow serve``'s check that its gRPC port is free (processor/cli/guards.py)."""

from __future__ import annotations

import socket

import pytest

from processor.cli.guards import check_port_free
from processor.errors import ConfigurationError


def _time_wait_port() -> int:
    """A port whose listener is closed and whose one connection was closed by the
    server side first: it is left in TIME-WAIT, as after a `sow serve` stopped with
    clients connected."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server closes first: its side goes to TIME-WAIT
    listener.close()
    client.recv(1)  # sees the close
    client.close()
    return port


def test_a_port_held_only_by_connections_in_time_wait_is_free() -> None:
    port = _time_wait_port()
    with socket.socket() as plain, pytest.raises(OSError, match="in use"):
        plain.bind(("127.0.0.1", port))  # what the check did before: "taken"
    check_port_free(f"127.0.0.1:{port}")


def test_a_listening_port_is_taken() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"127.0.0.1:{port} is taken by process"):
            check_port_free(f"127.0.0.1:{port}")
