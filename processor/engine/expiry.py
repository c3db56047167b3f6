"""Expiration: records whose lifetime ended are removed, driven by an index of due times.

Spec 3.1: a topic's ``expiration`` gives records a lifetime (``expiration_s``; None
disables expiration, 0 enables per-message values only), a publish's ``sow.expiration``
header overrides it (0: never) and every publish restarts the lifetime
(:func:`processor.engine.headers.publish_options` computes the instant, the envelope
carries it as ``expiration_ms``).

The due index: each store partition's ``due`` index (:meth:`Store.due_keys`) holds one
key per record version that has an expiration, ``due_key(due_ms, SowKey)`` (the due time
as 8 big-endian bytes, so key order is due order). :class:`DueIndex` keeps it from the
engine's change events, in the batch of the transaction that writes the record, so it
commits with the record (:func:`processor.engine.commit.commit`); it is rebuilt with the
records when a store is restored from its changelog (:mod:`processor.engine.recovery`). Entries are
never updated in place: an update or delete leaves its record's earlier entry behind,
and a due entry is checked against the record's current envelope when it is reached
(stale ones are dropped). Nothing ever scans the records.

Expiring (:class:`Expirer`) runs in the processor's loop inside each transaction, and
when the processor is idle at least every ``Processor.IDLE_WAIT_S``: records due at
``now`` are deleted through the same logged path as ``sow_delete`` (a changelog tombstone
with ``sow.reason: expired``, no position header since no log command caused it, and the
pending delete), committed exactly once with everything else. At most ``limit`` index
entries are handled per transaction, so a flood of due records never starves publishes;
the rest follow in the next loops. Records that fell due while the processor was down
are due at its first loops after recovery.

Between a record's due time and the commit of its tombstone, queries still return it
(a few milliseconds on an idle processor, longer while a flood is worked off).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from processor.changelog import EXPIRED, expiration_of
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch, Transaction

__all__ = ["EXPIRED", "DueIndex", "Expirer", "due_key", "expiring_states", "split_due_key"]

#: Index entries handled per transaction, over all partitions.
MAX_PER_TRANSACTION = 20_000
_EXPIRE = ChangeReason.EXPIRE


def due_key(due_ms: int, sow_key: bytes) -> bytes:
    """The due index key of a record due at ``due_ms`` (negative counts as 0)."""
    return max(due_ms, 0).to_bytes(8, "big") + sow_key


def split_due_key(key: bytes) -> tuple[int, bytes]:
    """(due_ms, SowKey) of a due index key."""
    return int.from_bytes(key[:8], "big"), key[8:]


class DueIndex:
    """Indexes each record version written with an expiration (the change listener of
    every topic with expiration enabled). An instant already past counts as due at the
    transaction's time, so the entry never lands below the part of the index the expirer
    has already worked off."""

    needs_old = False

    def listen(self, batch: PartitionBatch) -> Listener:
        due, state, now_ms = batch.due, batch.state, batch.now_ms

        def index(events: Sequence[ChangeEvent]) -> None:
            for event in events:
                expiration_ms = event.expiration_ms()
                if expiration_ms is None:
                    continue
                key = due_key(max(expiration_ms, now_ms), event.sow_key)
                due[key] = b""
                if key < state.due_floor:
                    state.due_floor = b""

        return index


def expiring_states(
    states: Mapping[tuple[str, int], PartitionState], recovering: Container[tuple[str, int]]
) -> list[PartitionState]:
    """The partitions (by (topic, partition)) whose topic has expiration enabled, except
    those still recovering."""
    return [
        state
        for key, state in states.items()
        if state.topic.expiration_s is not None and key not in recovering
    ]


class Expirer:
    """Deletes due records of the partitions it is given, within a transaction: each
    through its batch (:meth:`PartitionBatch.write`, which produces the tombstone with
    ``sow.reason: expired``, the replica's ChangeReason.EXPIRE). Not thread-safe: the
    processor's loop owns it.
    """

    def __init__(self, limit: int = MAX_PER_TRANSACTION) -> None:
        self.limit = limit
        #: Records deleted as expired since start.
        self.expired = 0
        self._turn = 0

    def due(self, states: Sequence[PartitionState], now_ms: int) -> bool:
        """Whether any of the partitions has an index entry due at ``now_ms`` (one seek
        per partition with expiration enabled)."""
        before = due_key(now_ms + 1, b"")
        return any(
            state.store.due_keys(state.due_floor, before, 1)
            for state in states
            if state.topic.expiration_s is not None
        )

    def expire(self, transaction: Transaction, states: Sequence[PartitionState]) -> None:
        """Delete the records due at the transaction's time (up to ``limit`` index entries,
        taking the partitions in turn from one call to the next), in its batches."""
        if not states:
            return
        now_ms = transaction.now_ms
        before = due_key(now_ms + 1, b"")
        budget = self.limit
        first = self._turn % len(states)
        self._turn += 1
        for state in [*states[first:], *states[:first]]:
            if budget <= 0:
                break
            if state.topic.expiration_s is None:
                continue
            keys = state.store.due_keys(state.due_floor, before, budget)
            if not keys:
                continue
            budget -= len(keys)
            self.expired += self._expire_keys(transaction.batch(state), keys, now_ms)
            state.due_floor = keys[-1]

    def _expire_keys(self, batch: PartitionBatch, keys: list[bytes], now_ms: int) -> int:
        """Drop the index entries ``keys`` and delete those of their records that are
        still due (an entry whose record was since deleted, or updated to a later or no
        expiration, is stale)."""
        due, lookup, write = batch.due, batch.lookup, batch.write
        changelog = batch.state.topic.changelog_topic
        expired = 0
        for key in keys:
            due[key] = None
            sow_key = key[8:]
            envelope = lookup(sow_key)
            if envelope is None:
                continue
            expiration_ms = expiration_of(envelope)
            if expiration_ms is None or expiration_ms > now_ms:
                continue
            write(sow_key, None, _EXPIRE, changelog, -1)  # -1: no command caused it
            expired += 1
        return expired
