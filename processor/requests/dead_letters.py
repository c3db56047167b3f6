"""The dead-letter topic's latest records, with their reasons, for the console."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from processor.errors import SowError
from processor.log import ChangelogReader

#: The end of a partition, asked as "the first record at or after this time".
_FAR_FUTURE_MS = 2**62


class DeadLetters:
    """Reads the last records of the dead-letter topic (one partition) on request, with
    the reason, message and source the processor wrote in their headers
    (:mod:`processor.engine.dead_letter`)."""

    def __init__(self, reader: Callable[[], ChangelogReader], topic: str) -> None:
        self._new_reader = reader
        self._reader: ChangelogReader | None = None
        self.topic = topic
        self._lock = threading.Lock()

    def recent(self, most: int = 50) -> list[dict[str, Any]]:
        """The latest ``most`` dead letters, newest first."""
        with self._lock:
            if self._reader is None:
                self._reader = self._new_reader()
            reader = self._reader
            try:
                end = reader.offset_for_time(self.topic, 0, _FAR_FUTURE_MS)
                start = max(reader.earliest_offset(self.topic, 0), end - most)
                records = [
                    r for batch in reader.read_range(self.topic, 0, start, end) for r in batch
                ]
            except SowError:
                self.close_reader()
                raise
        return [_letter(record) for record in reversed(records)]

    def close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _letter(record: Any) -> dict[str, Any]:
    headers = {
        name: bytes(value or b"").decode("utf-8", "replace")
        for name, value in record.headers() or ()
    }
    value = record.value() or b""
    return {
        "offset": record.offset(),
        "time_ms": record.timestamp()[1],
        "reason": headers.get("sow.error.reason", ""),
        "message": headers.get("sow.error.message", ""),
        "source": "/".join(
            headers.get(f"sow.source.{part}", "") for part in ("topic", "partition", "offset")
        ),
        "value": value[:2000].decode("utf-8", "replace"),
    }
