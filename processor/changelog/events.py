"""Change events: each change of a record, as the engine makes it and the replica applies it.

The engine hands them to its listeners inside the transaction that makes the change
(:mod:`processor.engine.transaction`: expiry's due index, and views and queues to come).
Its changelog carries them to the read replica, the one place that turns changelog
records back into changes (ARCHITECTURE.md, "The live path"); subscriptions,
out-of-focus notifications and conflation listen to the replica instead of re-reading
Kafka. See :class:`~processor.replica.replica.Replica` for when those events are
delivered and under which lock.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from enum import Enum

from processor import changelog

log = logging.getLogger(__name__)

#: (changelog topic, partition, offset) of the changelog record behind a change.
ChangelogPosition = tuple[str, int, int]


class ChangeReason(Enum):
    """Why a record changed: published (inserted or updated), deleted, or expired.

    A tombstone's ``sow.reason`` header decides between delete and expire; a changelog
    partition restarting empty (a transient topic's RESET, a lost log) deletes.
    """

    PUBLISH = "publish"
    DELETE = "delete"
    EXPIRE = "expire"

    @classmethod
    def of_tombstone(cls, reason: bytes | None) -> ChangeReason:
        """The reason a tombstone's ``sow.reason`` header gives (delete if none)."""
        return cls.EXPIRE if reason in (b"expired", b"expire") else cls.DELETE


_UNREAD: object = object()


class ChangeEvent:
    """One change of one record: what the engine does as it applies a command
    (:mod:`processor.engine.transaction`), and what the read replica applies from the
    changelog. Immutable by contract; compared and hashed by its six fields.

    ``old`` is the record's envelope before the change (None: it did not exist; in the
    engine, read only for listeners that need it), ``new`` after it (None: deleted).
    Envelopes are the changelog's encoded bytes; ``new_envelope`` decodes the new one.
    ``position`` is the log record behind the change: in the replica the changelog record
    (for a partition restart, the record or position where it was seen); in the engine
    the input command, or the changelog partition with offset -1 for an expiry.
    """

    __slots__ = ("_expiration", "new", "old", "position", "reason", "sow_key", "topic")

    def __init__(
        self,
        topic: str,
        sow_key: bytes,
        old: bytes | None,
        new: bytes | None,
        position: ChangelogPosition,
        reason: ChangeReason,
        expiration_ms: int | object | None = _UNREAD,
    ) -> None:
        self.topic, self.sow_key, self.old, self.new = topic, sow_key, old, new
        self.position, self.reason, self._expiration = position, reason, expiration_ms

    def _fields(self) -> tuple[object, ...]:
        return (self.topic, self.sow_key, self.old, self.new, self.position, self.reason)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChangeEvent):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"ChangeEvent({self.topic!r}, {self.sow_key!r}, old={self.old!r}, "
            f"new={self.new!r}, {self.position!r}, {self.reason.name})"
        )

    def expiration_ms(self) -> int | None:
        """The new record's expiration instant (ms since the epoch; None: never, or
        deleted). Known without decoding when the engine made the event."""
        if self._expiration is _UNREAD:
            self._expiration = None if self.new is None else changelog.expiration_of(self.new)
        return self._expiration  # type: ignore[return-value]

    def new_envelope(self) -> changelog.Envelope | None:
        """The decoded record after the change, or None."""
        return None if self.new is None else changelog.decode(self.new)


#: Called with the events of one applied unit (one processor transaction of one
#: changelog partition), in order.
Listener = Callable[[Sequence[ChangeEvent]], None]


class ListenerHandle:
    """Returned by ``Replica.listen``: ``close()`` unregisters the listener (idempotent;
    after it returns, the listener is called at most once more, with a unit whose
    delivery had already begun)."""

    __slots__ = ("_close", "closed")

    def __init__(self, close: Callable[[], object]) -> None:
        self._close = close
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._close()

    def __enter__(self) -> ListenerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Listeners:
    """The replica's registered listeners.

    ``register`` and ``current`` run under the replica's lock (so a registration is
    atomic with a read); ``deliver`` runs outside it, on the applier thread, and skips
    listeners unregistered meanwhile.
    """

    def __init__(self) -> None:
        self._listeners: dict[int, Listener] = {}
        self._numbers = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def register(self, listener: Listener) -> ListenerHandle:
        number = next(self._numbers)
        self._listeners[number] = listener
        return ListenerHandle(lambda: self._listeners.pop(number, None))

    def current(self) -> list[tuple[int, Listener]]:
        """The listeners registered now (the ones a unit being applied goes to)."""
        return list(self._listeners.items())

    def deliver(
        self, to: Sequence[tuple[int, Listener]], units: Sequence[Sequence[ChangeEvent]]
    ) -> None:
        """Call each listener of ``to`` that is still registered with each unit's
        events, in order; a listener that raises is logged and unregistered."""
        for events in units:
            for number, listener in to:
                if number not in self._listeners:
                    continue
                try:
                    listener(events)
                except Exception:  # one broken listener must not starve the others
                    log.exception("a replica listener failed; unregistering it")
                    self._listeners.pop(number, None)
