"""The query services a queue partition hears from, and when it takes one for dead.

A query service holds subscriptions of the queue for its consumers and keeps them alive
with commands (a heartbeat every :data:`HEARTBEAT_S`). The partition takes a service for
dead, and disconnects its subscriptions (their leases return), in two cases:

* **Silence**: it has not been heard from for :data:`SERVICE_TIMEOUT_MS`, measured in the
  apply times of this partition's commands, not the clock (a partition catching up a
  backlog applies the heartbeats queued in it first).
* **A later incarnation** of the same instance is heard (a query service restarted,
  :func:`~processor.queues.commands.service_id`): the earlier run is gone for certain, so
  its subscriptions end at once, and the new run's consumers get the leases they held
  without waiting for the timeout.

After a processor restart the partition has not heard anyone yet: the subscriptions it
restores are paused in the ledger (nothing is delivered to a subscription that may have
died with the restart) until their service is heard again.
"""

from __future__ import annotations

from processor.queues.commands import incarnation_of

#: A query service not heard from for this long is gone: its subscriptions disconnect.
SERVICE_TIMEOUT_MS = 15_000
#: How often a query service sends its heartbeat to every partition of its queues.
HEARTBEAT_S = 3.0


class Services:
    """Who holds each subscription and when each service was last heard (not
    thread-safe: the partition's loop owns it)."""

    def __init__(self) -> None:
        #: Query service -> when its last command was applied.
        self._heard: dict[str, int] = {}
        #: Subscription -> its service.
        self._service_of: dict[str, str] = {}
        #: When the partition last applied a command of any service.
        self._commanded_ms = 0

    def reset(self, now_ms: int) -> None:
        """Forget everything (the ledger is rebuilt from the store)."""
        self._heard.clear()
        self._service_of.clear()
        self._commanded_ms = now_ms

    def restored(self, subscription_id: str, service: str, now_ms: int) -> None:
        """A subscription kept in the partition's state, held by ``service``."""
        self.held(subscription_id, service)
        self._heard[service] = now_ms

    def held(self, subscription_id: str, service: str) -> None:
        """``service`` holds ``subscription_id`` (it subscribed)."""
        self._service_of[subscription_id] = service

    def dropped(self, subscription_id: str) -> None:
        self._service_of.pop(subscription_id, None)

    def commanded(self, now_ms: int) -> None:
        """A command was applied (of any service, or none)."""
        self._commanded_ms = now_ms

    def heard(self, service: str, now_ms: int) -> tuple[list[str], list[str]]:
        """``service`` sent a command: (its subscriptions, to resume; the subscriptions
        of earlier incarnations of its instance, to disconnect now)."""
        first = service not in self._heard
        self._heard[service] = now_ms
        ended: list[str] = []
        known = incarnation_of(service) if first else None
        if known is not None:
            for other in {*self._heard, *self._service_of.values()}:
                earlier = incarnation_of(other)
                if earlier is not None and earlier[0] == known[0] and earlier[1] < known[1]:
                    ended.extend(self.forget(other))
        return self.subscriptions_of(service), ended

    def subscriptions_of(self, service: str) -> list[str]:
        return [sub for sub, owner in self._service_of.items() if owner == service]

    def forget(self, service: str) -> list[str]:
        """Take ``service`` for dead: its subscriptions, to disconnect."""
        self._heard.pop(service, None)
        return self.subscriptions_of(service)

    def gone(self, now_ms: int) -> set[str]:
        """The services taken for dead by silence (see the module doc)."""
        if now_ms - self._commanded_ms >= SERVICE_TIMEOUT_MS:
            return set(self._heard)
        latest = self._commanded_ms
        return {s for s, heard in self._heard.items() if latest - heard >= SERVICE_TIMEOUT_MS}
