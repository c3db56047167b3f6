"""Change events: what the read replica tells its listeners about each applied change.

The replica is the one place that turns changelog records into changes (ARCHITECTURE.md,
"The live path"); subscriptions, out-of-focus notifications, conflation and views listen
to it instead of re-reading Kafka. See :class:`~processor.replica.replica.Replica` for when
events are delivered and under which lock.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change of one record, as the replica applied it.

    ``old`` is the record's envelope before the change (None: it did not exist), ``new``
    after it (None: deleted). Envelopes are the changelog's encoded bytes;
    ``new_envelope`` decodes the new one. ``position`` is the changelog record that made the
    change (for a partition restart, the record or position where the restart was seen).
    """

    topic: str
    sow_key: bytes
    old: bytes | None
    new: bytes | None
    position: ChangelogPosition
    reason: ChangeReason

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
