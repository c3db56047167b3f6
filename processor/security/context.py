"""The request context: who calls, until when, and what it may see and change.

Every transport builds one :class:`RequestContext` per call (gRPC: ``server/auth.py``)
and passes it down; nothing below a transport looks at metadata, certificates or
tokens. With security off the context is :data:`OPEN`: the anonymous principal with
every right, so the default ``sow serve`` behaves as it always has.

:class:`Rights` is what the entitlements resolved for a principal: per topic, may it
read (and through which *entitlement filter*, AND-ed into every read), write (and which
*write filter* every published message must match) and acknowledge queue messages. The
checks raise :class:`~processor.errors.NotEntitledError` naming the principal, the
right and the topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. ``method``: how it proved it (``certificate``, ``token``,
    ``password``; ``none`` when security is off)."""

    name: str
    roles: frozenset[str] = frozenset()
    method: str = "none"

    def __str__(self) -> str:
        return self.name


#: The caller when security is off.
ANONYMOUS = Principal("anonymous")


class Rights(Protocol):
    """What one principal may do (:mod:`processor.security.entitlements` resolves it)."""

    @property
    def restricted(self) -> bool:
        """Whether any right is restricted (False: every check passes, every filter is
        None)."""

    def check_logon(self) -> None:
        """Raise NotEntitledError when the principal may not use the service at all."""

    def read_filter(self, topic: str) -> str | None:
        """The entitlement filter AND-ed into reads of ``topic`` (None: every record);
        raise NotEntitledError when the principal may not read it."""

    def pattern_read_filter(self) -> str | None:
        """The entitlement filter of a read over the topics a regular expression names
        (each record through its own topic's grants); raise NotEntitledError when the
        principal may read nothing."""

    def write_filter(self, topic: str) -> str | None:
        """The filter every message written to ``topic`` must match (None: any);
        raise NotEntitledError when the principal may not write it."""

    def check_acknowledge(self, queue: str) -> None:
        """Raise NotEntitledError when the principal may not acknowledge on ``queue``."""


class _AllRights:
    """Every right: security off."""

    restricted = False

    def check_logon(self) -> None:
        return None

    def read_filter(self, topic: str) -> str | None:
        return None

    def pattern_read_filter(self) -> str | None:
        return None

    def write_filter(self, topic: str) -> str | None:
        return None

    def check_acknowledge(self, queue: str) -> None:
        return None


ALL_RIGHTS: Rights = _AllRights()


class RightsSource(Protocol):
    """Resolves a principal's rights (:class:`processor.security.entitlements.Entitlements`
    when entitlements are configured); ``generation`` grows with every reload."""

    @property
    def generation(self) -> int: ...

    def rights_for(self, principal: Principal) -> Rights:
        """The rights of ``principal`` under the current definitions."""


class _Everyone:
    """Every principal has every right (no entitlements configured)."""

    generation = 0

    def rights_for(self, principal: Principal) -> Rights:
        return ALL_RIGHTS


#: The rights source when no entitlements are configured.
EVERYONE: RightsSource = _Everyone()


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One call: its principal, its rights, and its deadline (``time.monotonic()``
    seconds; None: no deadline). ``generation`` is the entitlements' version the rights
    came from (a reload makes open subscriptions re-resolve theirs)."""

    principal: Principal = ANONYMOUS
    rights: Rights = field(default=ALL_RIGHTS)
    deadline: float | None = None
    generation: int = 0


#: The context of every call when security is off.
OPEN = RequestContext()
