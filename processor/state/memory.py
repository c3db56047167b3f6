"""In-memory store: transient SOW topics and the query service's read replica."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from processor.state import Changes


class MemoryStore:
    """A dict-backed :class:`~processor.state.Store`. Not thread-safe; callers lock.

    The due index is a set of keys plus a heap over them for key order; a deleted key
    stays in the heap until it reaches the top, where ``due_keys`` discards it.
    """

    def __init__(self) -> None:
        self._records: dict[bytes, bytes] = {}
        self._meta: dict[bytes, bytes] = {}
        self._due: set[bytes] = set()
        self._due_heap: list[bytes] = []

    def get(self, sow_key: bytes) -> bytes | None:
        return self._records.get(sow_key)

    def items(self, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if start is None:
            return iter(list(self._records.items()))
        return iter(sorted((k, v) for k, v in self._records.items() if k >= start))

    def count(self) -> int:
        return len(self._records)

    def get_meta(self, key: bytes) -> bytes | None:
        return self._meta.get(key)

    def meta_items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iter([(k, v) for k, v in self._meta.items() if k.startswith(prefix)])

    def due_keys(self, start: bytes, before: bytes, limit: int) -> list[bytes]:
        heap, live = self._due_heap, self._due
        found: list[bytes] = []
        taken: set[bytes] = set()
        while heap and len(found) < limit and heap[0] < before:
            key = heapq.heappop(heap)
            if key in live and key not in taken:
                taken.add(key)
                found.append(key)
        for key in found:  # still in the index until a write deletes them
            heapq.heappush(heap, key)
        return found

    def write(self, records: Changes, meta: Changes, due: Changes | None = None) -> None:
        target = self._records
        for key, value in records.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
        self._put_meta(meta)
        if due:
            live, heap = self._due, self._due_heap
            for key, value in due.items():
                if value is None:
                    live.discard(key)
                elif key not in live:
                    live.add(key)
                    heapq.heappush(heap, key)

    def compact(self) -> tuple[int, int]:
        return 0, 0  # a dict holds nothing of what it deleted

    def clear(self, meta: Mapping[bytes, bytes | None]) -> None:
        self._records.clear()
        self._due.clear()
        self._due_heap.clear()
        self._put_meta(meta)

    def _put_meta(self, meta: Mapping[bytes, bytes | None]) -> None:
        for key, value in meta.items():
            if value is None:
                self._meta.pop(key, None)
            else:
                self._meta[key] = value

    def begin_rebuild(self) -> None:
        """Nothing to prepare: a memory store has no write-ahead log to skip."""

    def end_rebuild(self) -> None:
        """Nothing to make durable."""

    def close(self) -> None:
        """Nothing to release."""
