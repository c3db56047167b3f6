"""Stopping an application with queues: the queues' thread (heartbeats) ends before the
log writer closes. A heartbeat written after it closed ended that thread with an error
("Producer has been closed"), and ``sow serve`` exited 1 on Ctrl-C (seen in the README
tour's test on Tansu once topologies/ had a queue)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from processor.log import LogRecord, LogWriter
from processor.subscriptions import queues
from processor.testing import MemoryBackend, start_memory
from processor.topology.yaml_loader import parse_yaml

TOPOLOGY = """
topics:
  - {name: ORDERS, key: /orderId}
  - {name: WORK, sow: false}
queues:
  - {name: WORK, message_type: json, lease_period: 30s}
"""


class ClosingWriter:
    """A writer that, as the Kafka one, refuses records once closed; its close takes a
    while, so a heartbeat due meanwhile is written then."""

    def __init__(self, inner: LogWriter) -> None:
        self._inner = inner
        self.max_record_bytes = inner.max_record_bytes
        self.closed = threading.Event()

    def submit(self, records: Iterable[LogRecord]) -> object:
        if self.closed.is_set():
            raise RuntimeError("Producer has been closed")
        return self._inner.submit(records)

    def close(self) -> None:
        self.closed.set()
        time.sleep(0.5)  # several heartbeats' worth (HEARTBEAT_S is patched below)
        self._inner.close()


class Backend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.writers: list[ClosingWriter] = []

    def log_writer(self) -> LogWriter:
        writer = ClosingWriter(super().log_writer())
        self.writers.append(writer)
        return writer  # type: ignore[return-value]


def test_the_queues_thread_ends_before_the_writer_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queues, "HEARTBEAT_S", 0.05)
    backend = Backend()
    app = start_memory(parse_yaml(TOPOLOGY, "work.yaml"), tmp_path, backend=backend)
    assert app.queues is not None
    assert app.queues.wait_ready(30)
    time.sleep(0.2)  # a few heartbeats
    app.stop()
    assert backend.writers
    assert app.errors == []
    assert app.failures == []
