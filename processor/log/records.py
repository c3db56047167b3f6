"""A log record held in memory: the :class:`processor.log.Record` protocol over plain
values, for the broker-free log and for records the engine rebuilds (a conflated topic's
input record, from its pending state, for the dead-letter topic)."""

from __future__ import annotations

from processor.log import Headers

#: Kafka's "no timestamp" (TIMESTAMP_NOT_AVAILABLE, -1).
NO_TIMESTAMP = (0, -1)


class LogRecord:
    """One record: where it is, its key, value and headers, and its (type, ms) timestamp."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: tuple[int, int] = NO_TIMESTAMP,
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers
        self._timestamp = timestamp

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> None:
        return None
