"""Reading subscription streams in tests: a thread collects a stream's messages."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from processor.client.sow_client import ServiceError, SubscriptionStream


class Collector:
    """Reads one subscription stream on a thread, keeping every message and the error
    that ended it (None while it runs or after a clean cancel). With ``pause``, it stops
    reading at the first change until the event is set (a slow consumer)."""

    def __init__(self, stream: SubscriptionStream, pause: threading.Event | None = None) -> None:
        self.stream = stream
        self.messages: list[Any] = []
        self.received_at: list[float] = []
        self.error: ServiceError | None = None
        self.pause = pause
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self.stream:
                if self.pause is not None and message.WhichOneof("part") == "change":
                    self.pause.wait()
                self.messages.append(message)
                self.received_at.append(time.monotonic())
        except ServiceError as exc:
            self.error = exc
        finally:
            self.done.set()

    def changes(self) -> list[Any]:
        return [m.change for m in self.messages if m.WhichOneof("part") == "change"]

    def query_records(self) -> list[Any]:
        return [
            r for m in self.messages if m.WhichOneof("part") == "batch" for r in m.batch.records
        ]

    def group_end(self) -> Any:
        for m in self.messages:
            if m.WhichOneof("part") == "group_end":
                return m.group_end
        return None

    def wait_for(self, condition: Callable[[Collector], bool], timeout_s: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition(self):
                return True
            time.sleep(0.02)
        return condition(self)

    def stop(self) -> None:
        self.stream.cancel()
        self.done.wait(10)


def data(record: Any) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(record.data)
    return value
