"""A transaction's produce for unit tests: keeps every record it is given."""

from __future__ import annotations

from typing import Any

#: (topic, value, key, partition, headers)
Produce = tuple[str, bytes | None, bytes | None, int, Any]


class Produced:
    """Every record produced, as (topic, value, key, partition, headers)."""

    def __init__(self) -> None:
        self.records: list[Produce] = []

    def __call__(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: Any = None,
    ) -> None:
        self.records.append((topic, value, key, partition, headers))

    def to(self, topic: str) -> list[Produce]:
        """The records produced to ``topic``."""
        return [r for r in self.records if r[0] == topic]

    def tombstones(self) -> list[tuple[bytes | None, Any]]:
        """(key, headers) of every record with no value."""
        return [(k, h) for _, v, k, _, h in self.records if v is None]
