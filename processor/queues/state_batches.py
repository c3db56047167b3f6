"""Which states batch holds each message's state, for one queue partition
(:mod:`processor.queues.state`): a transaction's changed states become one record, a
batch that no longer holds any message's latest state is deleted.

Not thread-safe: the partition's loop owns it. What it knows is rebuilt from the store
after an aborted transaction (:meth:`StateBatches.restore`), like the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from processor.engine.transaction import PartitionBatch
from processor.queues.state import (
    MessageState,
    batch_key,
    batch_number,
    decode_states,
    encode_states,
)

#: A states batch grows past this many bytes only with a single state.
BATCH_BYTES = 512 * 1024
#: A state's bytes in a batch besides its bookmark and holder (lengths, counts, deadline).
_ENTRY_BYTES = 20


class StateBatches:
    """The states batches of one queue partition (see the module doc)."""

    def __init__(self) -> None:
        #: Bookmark -> the number of the batch holding its latest state.
        self._batch_of: dict[bytes, int] = {}
        #: Batch number -> how many messages' latest states it holds.
        self._live: dict[int, int] = {}
        #: The states changed since the last :meth:`flush`, by bookmark.
        self._pending: dict[bytes, MessageState] = {}
        self._next = 0

    def __len__(self) -> int:
        """How many batches hold a state."""
        return len(self._live)

    def restore(
        self, items: Iterable[tuple[bytes, bytes]], held: Callable[[bytes], bool]
    ) -> tuple[dict[bytes, MessageState], list[int]]:
        """Take back the committed batches (their state keys, with or without
        ``STATE_PREFIX``, and values): each held message's latest state, and the numbers
        of batches that hold none (to delete, :meth:`delete`)."""
        batches = sorted((batch_number(key), raw) for key, raw in items)
        states: dict[bytes, MessageState] = {}
        for number, raw in batches:
            for bookmark, encoded in decode_states(raw):
                if held(bookmark):
                    states[bookmark] = MessageState.decode(encoded)
                    self._batch_of[bookmark] = number
        for number in self._batch_of.values():
            self._live[number] = self._live.get(number, 0) + 1
        self._next = batches[-1][0] + 1 if batches else 0
        return states, [number for number, _ in batches if number not in self._live]

    def change(self, bookmark: bytes, state: MessageState) -> None:
        """A message's state changed: it goes in the next batch."""
        self._pending[bookmark] = state

    def drop(self, bookmark: bytes, batch: PartitionBatch) -> None:
        """A message left the queue: its state is no longer kept."""
        self._pending.pop(bookmark, None)
        number = self._batch_of.pop(bookmark, None)
        if number is not None:
            self._release(number, batch)

    def flush(self, batch: PartitionBatch) -> None:
        """Write the states changed since the last flush as one batch (nothing if none;
        more than one when they pass :data:`BATCH_BYTES` together)."""
        pending = self._pending
        if not pending:
            return
        self._pending = {}
        chunk: dict[bytes, MessageState] = {}
        size = 0
        for bookmark, state in pending.items():
            grown = len(bookmark) + _ENTRY_BYTES + len(state.holder or "")
            if chunk and size + grown > BATCH_BYTES:
                self._write(chunk, batch)
                chunk, size = {}, 0
            chunk[bookmark] = state
            size += grown
        self._write(chunk, batch)

    def _write(self, states: dict[bytes, MessageState], batch: PartitionBatch) -> None:
        number = self._next
        self._next += 1
        batch.put_state(batch_key(number), encode_states(states))
        batch_of = self._batch_of
        self._live[number] = len(states)
        for bookmark in states:
            earlier = batch_of.get(bookmark)
            batch_of[bookmark] = number
            if earlier is not None:
                self._release(earlier, batch)

    def delete(self, numbers: Iterable[int], batch: PartitionBatch) -> None:
        """Delete batches that hold no state (found by :meth:`restore`)."""
        for number in numbers:
            batch.put_state(batch_key(number), None)

    def _release(self, number: int, batch: PartitionBatch) -> None:
        left = self._live[number] - 1
        if left:
            self._live[number] = left
        else:
            del self._live[number]
            batch.put_state(batch_key(number), None)
