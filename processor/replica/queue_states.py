"""The states of the queues' messages as the replica reads them from the changelogs (a
``sow`` query over a queue shows them; :mod:`processor.queues.state`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from processor.queues.state import MessageState

#: The entry of a queue's exported table state (a replica snapshot) that holds its
#: messages' encoded states by bookmark.
SNAPSHOT_ENTRY = "queue_states"


class QueueStates:
    """Each queue's messages' states, by bookmark, kept encoded (decoded when read).
    Written by the replica's applier only; a read from another thread sees a state as
    of some applied transaction."""

    def __init__(self) -> None:
        self._states: dict[str, dict[bytes, bytes]] = {}

    def note(self, queue: str, bookmark: bytes, value: bytes | None) -> None:
        """A message's state record (None: the message left the queue)."""
        states = self._states.setdefault(queue, {})
        if value is None:
            states.pop(bookmark, None)
        else:
            states[bookmark] = value

    def forget(self, queue: str) -> None:
        """A partition of the queue started afresh (RESET): its states may be gone."""
        self._states.pop(queue, None)

    def get(self, queue: str, bookmark: bytes) -> MessageState | None:
        """A queue message's counts and lease, as its partition last committed them (None:
        never leased)."""
        raw = self._states.get(queue, {}).get(bookmark)
        return None if raw is None else MessageState.decode(raw)

    def export(self, tables: Mapping[str, dict[str, Any]]) -> None:
        """Add a copy of each queue's states, as plain data, to its exported table state
        (under :data:`SNAPSHOT_ENTRY`) for a replica snapshot (the applier thread's)."""
        for queue, states in self._states.items():
            if states and queue in tables:
                tables[queue][SNAPSHOT_ENTRY] = dict(states)

    def restore(self, tables: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace every state by what :meth:`export` added to a loaded snapshot's tables
        (a snapshot written before queues kept theirs has none)."""
        self._states = {
            queue: dict(state[SNAPSHOT_ENTRY])
            for queue, state in tables.items()
            if SNAPSHOT_ENTRY in state
        }
