"""A queue consumer for tests: a `Consume` stream read on a thread, its leases in the
order they came (with when), acknowledged as they come when asked."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson

from processor.client.queues import QueueStream
from processor.client.sow_client import SowClient
from processor.errors import ServiceError

WAIT_S = 30.0


class Consumer:
    """A queue stream read on a thread: its leases, in order, as they come; with ``ack``
    each lease (not a barrier message) is acknowledged as it comes."""

    def __init__(
        self, client: SowClient, queue: str = "Q", *, ack: bool = False, **options: Any
    ) -> None:
        self.stream: QueueStream = client.consume(queue, **options)
        self.leases: list[Any] = []
        #: ``time.monotonic()`` when each lease came, and when the stream was registered.
        self.at: list[float] = []
        self.registered = threading.Event()
        self.error: ServiceError | None = None
        self._ack = ack
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.registered.wait(WAIT_S), "not registered"
        self.since = time.monotonic()

    def _read(self) -> None:
        try:
            for message in self.stream:
                if message.WhichOneof("part") == "registered":
                    self.registered.set()
                    continue
                lease = message.lease
                self.leases.append(lease)
                self.at.append(time.monotonic())
                if self._ack and not lease.barrier:
                    self.stream.ack([lease.bookmark])
        except ServiceError as exc:  # the test is over: its client closed
            self.error = exc
        except Exception:  # the server was killed under it: the test reads what came
            return

    def ids(self) -> list[int]:
        return [orjson.loads(lease.record.data)["id"] for lease in self.leases]

    def bookmarks(self) -> list[str]:
        return [lease.bookmark for lease in self.leases]

    def until(self, count: int, timeout_s: float = WAIT_S) -> list[int]:
        """The ids, sorted, once ``count`` leases came (or the time is up)."""
        deadline = time.monotonic() + timeout_s
        while len(self.leases) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return sorted(self.ids())

    def quiet(self, seconds: float = 0.5) -> list[int]:
        """The ids once nothing more has come for ``seconds``."""
        count = -1
        while count != len(self.leases):
            count = len(self.leases)
            time.sleep(seconds)
        return self.ids()

    def close(self) -> None:
        self.stream.close()
