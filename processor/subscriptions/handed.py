"""Leases that reach the query service twice: handed over by the processor beside it
before their commit, then read from the deliveries topic once committed (a queue's
at-least-once leases, :data:`processor.queues.commands.HANDED_HEADER`, issue 34).

The handed copy is delivered and kept; its committed copy finds it and is dropped. A
lease is known by its subscription, bookmark and delivery count, so a lease whose
transaction aborted and that the restarted processor makes again, alike, is not
delivered twice either. A handed copy whose twin never comes (its transaction aborted)
is forgotten after :data:`HandedLeases.KEEP_S`. A committed copy that finds nothing is
delivered and not kept: it was handed to another service or not at all (the leases of
every processor carry the header, and only the one beside a service hands them to it),
or, rarely, the changelog brought it before the pipe did (then it is delivered twice,
which at-least-once allows). So only what was handed over is ever kept. Not
thread-safe: the hub calls it under its lock.
"""

from __future__ import annotations

from processor.queues.commands import Delivery


class HandedLeases:
    """The leases seen once, waiting for their second copy (see the module doc)."""

    #: Seconds a lease's first copy waits for its twin before it is forgotten.
    KEEP_S = 120.0

    def __init__(self) -> None:
        #: (subscription, bookmark, delivery count) -> when its first copy came, oldest
        #: first (a dict keeps insertion order).
        self._seen: dict[tuple[str, str, int], float] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def handed(self, delivery: Delivery, now: float) -> None:
        """A lease handed over before its commit (deliver it): its twin will come."""
        self._seen[(delivery.subscription, delivery.bookmark, delivery.deliveries)] = now

    def new(self, delivery: Delivery) -> bool:
        """Whether a committed copy is new (deliver it), not the twin of a handed one."""
        key = (delivery.subscription, delivery.bookmark, delivery.deliveries)
        return self._seen.pop(key, None) is None

    def forget_old(self, now: float) -> None:
        """Forget the first copies older than ``KEEP_S`` (their twins are not coming)."""
        seen, oldest = self._seen, now - self.KEEP_S
        while seen:
            key = next(iter(seen))
            if seen[key] > oldest:
                return
            del seen[key]
