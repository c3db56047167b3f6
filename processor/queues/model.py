"""The values a queue's :class:`~processor.queues.ledger.Ledger` works with: messages,
subscriptions, the rules it applies and the outcomes it returns."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from processor.topology.queue_spec import FairnessModel, Leasing, QueueSemantics

#: A message's id: its underlying topic, partition and offset, encoded (its bookmark).
Bookmark = bytes
#: Which messages a subscription takes (its content filter).
MessageFilter = Callable[["QueueMessage"], bool]

_U64 = 1 << 64


def priority_of(value: Any) -> int | None:
    """A ``Priority`` value as the queue orders it: an unsigned 64-bit integer (None:
    NULL or not a number, the lowest)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        return int(value) % _U64 if math.isfinite(value) else None
    number: int = value
    return number % _U64


@dataclass(slots=True)
class QueueMessage:
    """A message of the queue: its place, its data, its counts and its lease."""

    bookmark: Bookmark
    sequence: int
    data: Any = None
    priority: int | None = None
    barrier: bool = False
    expires_ms: int | None = None
    deliveries: int = 0
    cancels: int = 0
    #: The subscription holding its lease (None: available), and the lease's deadline.
    holder: str | None = None
    deadline_ms: int | None = None

    def order(self) -> tuple[int, int]:
        """Its place in the delivery order (smallest first)."""
        return (1 if self.priority is None else -self.priority, self.sequence)


@dataclass(slots=True)
class Subscription:
    """A subscriber of the queue: its filter, its backlog and what it holds."""

    id: str
    backlog: int
    matches: MessageFilter = lambda _message: True
    #: Leases not yet acknowledged (at-most-once: delivered, the message already gone).
    held: set[Bookmark] = field(default_factory=set)
    #: Restored after a restart and not heard from since: it may be gone with the
    #: service that held it, so nothing is delivered to it until it is heard again.
    paused: bool = False

    @property
    def free(self) -> int:
        return 0 if self.paused else self.backlog - len(self.held)


class Change(Enum):
    """What an outcome did to a message."""

    LEASED = "leased"
    RETURNED = "returned"
    ACKED = "acked"
    EXPIRED = "expired"
    BARRIER = "barrier"  # delivered to every matching subscription, then removed


@dataclass(frozen=True, slots=True)
class Outcome:
    """One change of one message (``subscriptions``: to whom it was delivered;
    ``reason``: why it expired; ``message``: the message, as the ledger held it, when
    the change took it out of the ledger or leased it; not compared)."""

    change: Change
    bookmark: Bookmark
    subscriptions: tuple[str, ...] = ()
    deadline_ms: int | None = None
    reason: str = ""
    message: QueueMessage | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class QueueRules:
    """The options of a queue the ledger applies (from its QueueSpec)."""

    semantics: QueueSemantics = QueueSemantics.AT_LEAST_ONCE
    fairness: FairnessModel = FairnessModel.PROPORTIONAL
    leasing: Leasing = Leasing.SUBLET
    lease_period_ms: int | None = None
    max_backlog: int | None = None
    #: Only the oldest this many messages are active (deliverable); None: all.
    target_queue_depth: int | None = None
    max_per_subscription_backlog: int = 1
    max_deliveries: int = 0
    max_cancels: int = 0
    deferred_ack_ms: int = 86_400_000
