"""The query service's side of a queue command's answer (:mod:`processor.queues.answers`):
acknowledgements waiting for the number of messages they removed.

The hub registers an acknowledgement before it writes it (:meth:`AwaitedAnswers.expect`:
a request id and the partitions it goes to), its deliveries thread hands every answer
record over (:meth:`AwaitedAnswers.take`), and the caller waits for all of them
(:meth:`AwaitedAnswers.wait`). Thread-safe.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from processor.log import Record
from processor.queues.answers import decode_answer


class Acknowledged(NamedTuple):
    """What an acknowledgement did: the messages it removed, the command records it took
    (one per queue partition reached)."""

    removed: int
    commands: int


class _Awaited:
    def __init__(self, partitions: frozenset[int]) -> None:
        self.partitions = partitions
        self.counts: dict[int, int] = {}
        self.done = threading.Event()


class AwaitedAnswers:
    """The answers one query service waits for (see the module doc)."""

    def __init__(self, service_id: str) -> None:
        # Never a subscription id ("<service>/<n>"): no hub takes an answer for its own.
        self._prefix = f"{service_id}#"
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._awaited: dict[str, _Awaited] = {}

    def __len__(self) -> int:
        return len(self._awaited)

    def expect(self, partitions: Iterable[int]) -> str:
        """A new request id, awaiting one answer from each of ``partitions``."""
        request = f"{self._prefix}{next(self._numbers)}"
        with self._lock:
            self._awaited[request] = _Awaited(frozenset(partitions))
        return request

    def take(self, record: Record) -> bool:
        """Whether ``record`` (of a deliveries topic) is an answer; one awaited here is
        counted (ValueError: an answer without a count)."""
        count = decode_answer(record.value(), record.headers())
        if count is None:
            return False
        with self._lock:
            awaited = self._awaited.get((record.key() or b"").decode(errors="replace"))
            if awaited is not None and record.partition() in awaited.partitions:
                awaited.counts[record.partition()] = count
                if len(awaited.counts) == len(awaited.partitions):
                    awaited.done.set()
        return True

    def wait(self, request: str, deadline: float) -> tuple[int, frozenset[int]]:
        """The sum of the answers to ``request`` and the partitions that did not answer
        by ``deadline`` (a ``time.monotonic()`` value); the request is forgotten."""
        with self._lock:
            awaited = self._awaited[request]
        try:
            awaited.done.wait(max(deadline - time.monotonic(), 0.0))
            with self._lock:
                missing = awaited.partitions - awaited.counts.keys()
                return sum(awaited.counts.values()), missing
        finally:
            self.forget(request)

    def forget(self, request: str) -> None:
        with self._lock:
            self._awaited.pop(request, None)
