"""A queue's figures, for monitoring (``sow_queue_*`` metrics, ``sow status``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class QueueFigures:
    """What a queue holds and has done (``sow_queue_*`` metrics, ``sow status``):
    messages held and leased now, subscriptions and each one's unacknowledged leases
    (``backlogs``), and counts since start: leases and barrier deliveries (``delivered``),
    those of a message leased before (``redelivered``), acknowledged, returned and
    expired messages."""

    messages: int = 0
    leased: int = 0
    subscriptions: int = 0
    delivered: int = 0
    redelivered: int = 0
    acked: int = 0
    returned: int = 0
    expired: int = 0
    backlogs: dict[str, int] = field(default_factory=dict)

    def counters(self) -> QueueFigures:
        """Its counts since start only (what a closed partition still contributes)."""
        return QueueFigures(**{name: getattr(self, name) for name in COUNTERS})

    def add(self, other: QueueFigures) -> None:
        for name in COUNTED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for subscription, held in other.backlogs.items():
            self.backlogs[subscription] = self.backlogs.get(subscription, 0) + held


COUNTED = (
    "messages",
    "leased",
    "subscriptions",
    "delivered",
    "redelivered",
    "acked",
    "returned",
    "expired",
)
#: The fields of :data:`COUNTED` that only grow (the others are gauges: what is now).
COUNTERS = ("delivered", "redelivered", "acked", "returned", "expired")
