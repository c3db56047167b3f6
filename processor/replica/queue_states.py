"""The states of the queues' messages as the replica reads them from the changelogs (a
``sow`` query over a queue shows them; :mod:`processor.queues.state`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from processor.queues.state import MessageState, decode_states

log = logging.getLogger(__name__)

#: The entry of a queue's exported table state (a replica snapshot) that holds its
#: messages' encoded states by bookmark.
SNAPSHOT_ENTRY = "queue_states"


class QueueStates:
    """Each queue partition's messages' states, by bookmark, kept encoded (decoded when
    read). Written by the replica's applier only; a read from another thread sees a
    state as of some applied transaction."""

    def __init__(self) -> None:
        self._states: dict[str, dict[int, dict[bytes, bytes]]] = {}

    def note(self, queue: str, partition: int, bookmark: bytes, value: bytes | None) -> None:
        """A message's state (None: the message left the queue)."""
        states = self._states.setdefault(queue, {}).setdefault(partition, {})
        if value is None:
            states.pop(bookmark, None)
        else:
            states[bookmark] = value

    def note_batch(self, queue: str, partition: int, value: bytes) -> None:
        """A batch of states (:mod:`processor.queues.state`): each one its message's
        latest. (A batch deleted holds none that is: nothing to do then.) An unreadable
        batch is left out with a warning."""
        try:
            states = decode_states(value)
        except ValueError as exc:
            log.warning("queue %s[%d]: a states record left out: %s", queue, partition, exc)
            return
        kept = self._states.setdefault(queue, {}).setdefault(partition, {})
        for bookmark, encoded in states:
            kept[bookmark] = encoded

    def forget(self, queue: str, partition: int) -> None:
        """A partition of the queue started afresh (RESET): its states are gone."""
        self._states.get(queue, {}).pop(partition, None)

    def get(self, queue: str, bookmark: bytes) -> MessageState | None:
        """A queue message's counts and lease, as its partition last committed them (None:
        never leased)."""
        for states in self._states.get(queue, {}).values():
            raw = states.get(bookmark)
            if raw is not None:
                return MessageState.decode(raw)
        return None

    def export(self, tables: Mapping[str, dict[str, Any]]) -> None:
        """Add a copy of each queue's states, as plain data, to its exported table state
        (under :data:`SNAPSHOT_ENTRY`) for a replica snapshot (the applier thread's)."""
        for queue, partitions in self._states.items():
            if queue in tables:
                tables[queue][SNAPSHOT_ENTRY] = {p: dict(s) for p, s in partitions.items() if s}

    def restore(self, tables: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace every state by what :meth:`export` added to a loaded snapshot's tables
        (a snapshot written before queues kept theirs has none). Entries that are not
        what :meth:`export` writes are left out with a warning: those states show again
        as their messages change."""
        try:
            self._states = {
                queue: {int(p): _encoded(states) for p, states in entry}
                for queue, entry in (
                    (queue, state[SNAPSHOT_ENTRY].items())
                    for queue, state in tables.items()
                    if SNAPSHOT_ENTRY in state
                )
            }
        except (AttributeError, TypeError, ValueError) as exc:
            log.warning("the replica snapshot's queue states are unreadable (%r): not kept", exc)
            self._states = {}


def _encoded(states: Mapping[Any, Any]) -> dict[bytes, bytes]:
    """One partition's states as a snapshot holds them (TypeError: they are not)."""
    if not all(type(b) is bytes and type(v) is bytes for b, v in states.items()):
        raise TypeError("a queue state in the snapshot is not bytes by bytes")
    return dict(states)
