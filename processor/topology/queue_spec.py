"""A queue of the topology (AMPS's ``<Queue>``; issue 22, docs/queues.md): its kind,
semantics, fairness, leasing and expiration models, and its recovery point. Re-exported
by :mod:`processor.topology.model`, where every loader finds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Literal


class QueueKind(Enum):
    """Which element declared a queue: distributed, this instance only, or a group's."""

    QUEUE = "Queue"
    LOCAL = "LocalQueue"
    GROUP_LOCAL = "GroupLocalQueue"


class QueueSemantics(Enum):
    """``Semantics``: leased until acknowledged, or removed when sent."""

    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


class FairnessModel(Enum):
    """``FairnessModel``: how a message picks among the subscriptions that can take it."""

    FAST = "fast"
    ROUND_ROBIN = "round-robin"
    PROPORTIONAL = "proportional"


class Leasing(Enum):
    """``Leasing``: who may acknowledge a leased message (``strict``: its lease holder)."""

    STRICT = "strict"
    SUBLET = "sublet"


class ExpirationModel(Enum):
    """``ExpirationModel``: which expiration wins, the queue's or the message's."""

    DEFAULT = "default"
    QUEUE = "queue"
    LATEST = "latest"
    EARLIEST = "earliest"


@dataclass(frozen=True, slots=True)
class QueueRecoveryPoint:
    """A queue's ``RecoveryPoint``: ``epoch``, ``now``, ``creation``, an AMPS bookmark
    (``bookmark``) or a timestamp (``timestamp``, UTC)."""

    kind: Literal["epoch", "now", "creation", "bookmark", "timestamp"] = "epoch"
    timestamp: datetime | None = None
    bookmark: str | None = None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """An AMPS ``<Queue>``, ``<LocalQueue>`` or ``<GroupLocalQueue>`` (issue 22): every
    message published to the underlying topics, delivered to one subscriber at a time.

    ``underlying`` is a topic name or, when ``underlying_pattern``, a regular expression
    over topic names (``underlying_topics``: the topics of the file it names);
    ``default_publish_target`` takes publishes addressed to the queue. None for a limit
    means unlimited; ``max_deliveries``/``max_cancels`` 0 means no maximum.
    """

    name: str
    message_type: str
    underlying: str
    default_publish_target: str
    underlying_topics: tuple[str, ...] = ()
    underlying_pattern: bool = False
    kind: QueueKind = QueueKind.QUEUE
    schema: str | None = None
    lease_period_s: float | None = None
    semantics: QueueSemantics = QueueSemantics.AT_LEAST_ONCE
    max_backlog: int | None = None
    max_per_subscription_backlog: int = 1
    target_queue_depth: int | None = None
    expiration_s: float | None = None
    expiration_model: ExpirationModel = ExpirationModel.DEFAULT
    filter: str | None = None
    recovery_point: QueueRecoveryPoint = field(default_factory=QueueRecoveryPoint)
    fairness_model: FairnessModel = FairnessModel.PROPORTIONAL
    leasing: Leasing = Leasing.SUBLET
    max_deliveries: int = 0
    max_cancels: int = 0
    priority: str | None = None
    barrier_expression: str | None = None
    deferred_ack_expiration_s: float = 86400.0
    file_backed_metadata: bool = False
    initial_owner: str | None = None
    group_local_queue_domain: str | None = None
    source: str = ""
    where: str = ""
