"""A plain implementation of the log's :class:`~processor.log.Record` protocol, for
feeding the processor's applier and the query service's replica without a broker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LogRecord:
    """One record of a Kafka topic partition, as the engine and the replica read it."""

    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None
    value_: bytes | None
    headers_: list[tuple[str, bytes]] | None = None
    timestamp_ms: int = 1000

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.headers_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)

    def error(self) -> None:
        return None
