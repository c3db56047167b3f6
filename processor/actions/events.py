"""The actions on message events of one SOW topic: a record expired
(``amps-action-on-sow-expire-message``), deleted (``amps-action-on-sow-delete-message``)
or out of focus (``amps-action-on-oof-message``: it matched the Filter and no longer
does, because it was updated, deleted or expired).

:class:`EventActions` is a :class:`~processor.engine.transaction.ChangeListener` of the
topic: the engine hands it each partition batch's changes as the commit begins, and it
publishes each matching event's record (:class:`~processor.actions.publish.ActionPublisher`)
in that batch's transaction. The record is thus produced exactly once per event: an
aborted transaction (a crash, a SIGKILL) takes the record with it, and the event is made
again, with its record, when the input is applied again.

What the record holds: the record as it was before the event (the deleted or expired
message; for an OOF by update, the message that no longer matches). Its reason is AMPS's:
``time_limit`` for an expiry (``AMPS_REASON`` of ``amps-action-on-sow-expire-message``),
``deleted`` for a delete, and an OOF message's ``match``, ``deleted`` or ``expired``.
"""

from __future__ import annotations

from collections.abc import Sequence

from processor.actions.publish import ActionPublisher, Watched
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.transaction import PartitionBatch
from processor.topology.actions import OnModule

_EXPIRE, _DELETE = ChangeReason.EXPIRE, ChangeReason.DELETE
_EXPIRED, _DELETED, _MATCH, _TIME_LIMIT = b"expired", b"deleted", b"match", b"time_limit"


class EventAction:
    """One action on a message event: what it watches, the OOF reasons it acts on (its
    ``Type``; empty: all), and its publish steps."""

    def __init__(
        self,
        module: OnModule,
        watched: Watched,
        publishers: Sequence[ActionPublisher],
        oof_reasons: Sequence[str] = (),
    ) -> None:
        self.module, self.watched, self.publishers = module, watched, tuple(publishers)
        self.oof_reasons = frozenset(reason.encode() for reason in oof_reasons)

    def take(self, event: ChangeEvent, batch: PartitionBatch) -> None:
        """Publish the event's record if the event is this action's."""
        old = event.old
        if old is None:
            return
        module, new, matches = self.module, event.new, self.watched.matches
        if module is OnModule.OOF:
            if not matches(old) or (new is not None and matches(new)):
                return
            reason = (
                _MATCH if new is not None else _EXPIRED if event.reason is _EXPIRE else _DELETED
            )
            if self.oof_reasons and reason not in self.oof_reasons:
                return
            body = new if new is not None else old
        elif new is not None:
            return
        elif module is OnModule.SOW_EXPIRE:
            if event.reason is not _EXPIRE or not matches(old):
                return
            reason, body = _TIME_LIMIT, old
        else:
            if event.reason is not _DELETE or not matches(old):
                return
            reason, body = _DELETED, old
        for publisher in self.publishers:
            publisher.publish(batch, event.topic, event.sow_key, body, reason)


class EventActions:
    """The message-event actions watching one SOW topic (module doc)."""

    #: The deleted or expired message is the record's value before the event.
    needs_old = True

    def __init__(self, actions: Sequence[EventAction]) -> None:
        self.actions = tuple(actions)

    def listen(self, batch: PartitionBatch) -> Listener:
        actions = self.actions

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in events:
                if event.old is None:
                    continue  # an insert is no action's event
                for action in actions:
                    action.take(event, batch)

        return changed
