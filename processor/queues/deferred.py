"""Acknowledgements of messages a queue does not hold yet (``DeferredAckExpiration``):
kept until a time, and applied if the message arrives before it (seed 002: during
failover, or a publisher replaying its store)."""

from __future__ import annotations

import heapq

from processor.queues.model import Bookmark

#: Stale heap entries allowed beyond twice the live ones before the heap is rebuilt.
_SLACK = 1024


class DeferredAcks:
    """Bookmark -> until when its acknowledgement is kept (not thread-safe)."""

    def __init__(self) -> None:
        self._until: dict[Bookmark, int] = {}
        self._due: list[tuple[int, Bookmark]] = []

    def kept(self) -> dict[Bookmark, int]:
        """The acknowledgements kept, and until when."""
        return dict(self._until)

    def keep(self, bookmark: Bookmark, until: int) -> None:
        self._until[bookmark] = until
        heapq.heappush(self._due, (until, bookmark))
        if len(self._due) > 2 * len(self._until) + _SLACK:
            self._due = [(t, b) for b, t in self._until.items()]
            heapq.heapify(self._due)

    def take(self, bookmark: Bookmark, now_ms: int) -> bool:
        """Whether an acknowledgement of ``bookmark`` is kept at ``now_ms`` (it is used)."""
        until = self._until.pop(bookmark, None)
        return until is not None and until > now_ms

    def next_due_ms(self) -> int | None:
        """When the next one is forgotten (None: none kept)."""
        return self._due[0][0] if self._due else None

    def forget_due(self, now_ms: int) -> None:
        """Forget those kept until ``now_ms`` or before."""
        due = self._due
        while due and due[0][0] <= now_ms:
            until, bookmark = heapq.heappop(due)
            if self._until.get(bookmark) == until:
                del self._until[bookmark]
