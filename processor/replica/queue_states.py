"""The states of the queues' messages as the replica reads them from the changelogs (a
``sow`` query over a queue shows them; :mod:`processor.queues.state`)."""

from __future__ import annotations

from processor.queues.state import MessageState


class QueueStates:
    """Each queue's messages' states, by bookmark. Written by the replica's applier only;
    a read from another thread sees a state as of some applied transaction."""

    def __init__(self) -> None:
        self._states: dict[str, dict[bytes, MessageState]] = {}

    def note(self, queue: str, bookmark: bytes, value: bytes | None) -> None:
        """A message's state record (None: the message left the queue)."""
        states = self._states.setdefault(queue, {})
        if value is None:
            states.pop(bookmark, None)
        else:
            states[bookmark] = MessageState.decode(value)

    def forget(self, queue: str) -> None:
        """A partition of the queue started afresh (RESET): its states may be gone."""
        self._states.pop(queue, None)

    def get(self, queue: str, bookmark: bytes) -> MessageState | None:
        """A queue message's counts and lease, as its partition last committed them (None:
        never leased, or not known here: a replica snapshot does not keep them)."""
        return self._states.get(queue, {}).get(bookmark)
