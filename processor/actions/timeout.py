"""Message condition timeouts (``amps-action-on-message-condition-timeout``): a record of
the watched topic that matches the Filter and keeps matching it for the Duration is
published (reason ``timeout``) once; it is again only after it stopped matching and
matched anew for a whole Duration.

:class:`ConditionTimeout` is a change listener of the topic and a timer of the processor
(:class:`~processor.engine.derived.Timed`). When a change makes a record match (it did
not, or did not exist), the partition's state notes the record's due time, twice under
the action's prefix (``put_state``: changelog control records, restored with the store):
``k`` + SowKey -> due, and ``d`` + due + SowKey (the due order). A change that makes it
stop matching, or deletes it, drops both. When the due time comes, the owner of the
partition drops them and publishes the record, in one transaction: exactly once (timers
run before the transaction's expiries, so a record whose Duration ended before it expired
is published even when both were due while no processor ran). The
records that already match when the action is first defined count from then (the
listener is a :class:`~processor.engine.feeding.Feeding`: each partition hands it its
records once).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from processor.actions.publish import ActionPublisher, Watched
from processor.changelog import STATE_PREFIX, expiration_of
from processor.changelog.events import ChangeEvent, Listener
from processor.engine.derived import Owned
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch, Transaction
from processor.topology.actions import ActionSpec

_TIMEOUT = b"timeout"
#: Due records handled per partition and transaction at most (the rest follow).
MAX_PER_TRANSACTION = 10_000


class ConditionTimeout:
    """One condition-timeout action (module doc). Not thread-safe (the processor's
    loop owns it)."""

    needs_old = True

    def __init__(
        self, action: ActionSpec, watched: Watched, publishers: Sequence[ActionPublisher]
    ) -> None:
        self.action, self.watched, self.publishers = action, watched, tuple(publishers)
        self.topic = action.on.topic
        self.duration_ms = action.on.duration_ms
        prefix = b"action:" + action.name.encode() + b"\x00"
        self._by_key, self._by_due = prefix + b"k", prefix + b"d"
        self.feed_marker = prefix + b"fed"
        self.feed_version = (
            hashlib.sha256(f"{action.on.filter}\x00{self.duration_ms}".encode())
            .hexdigest()
            .encode()
        )
        #: The earliest due time per partition, as far as known (None: scan its state);
        #: kept with the state it was read from, so a reopened partition reads again.
        self._next: dict[tuple[str, int], tuple[PartitionState, int]] = {}

    def listen(self, batch: PartitionBatch) -> Listener:
        matches, duration_ms = self.watched.matches, self.duration_ms
        by_key, by_due = self._by_key, self._by_due
        state = batch.state
        place = (state.topic.name, state.partition)

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in events:
                now = matches(event.new)
                key = by_key + event.sow_key
                if now and (event.old is None or not matches(event.old)):
                    if batch.get_state(key) is not None:
                        continue  # already counting (a feed of a record seen before)
                    due = (batch.now_ms + duration_ms).to_bytes(8, "big")
                    batch.put_state(key, due)
                    batch.put_state(by_due + due + event.sow_key, b"")
                    known = self._next.get(place)
                    if known is not None and known[0] is state:
                        self._next[place] = (state, min(known[1], int.from_bytes(due, "big")))
                elif not now:
                    noted = batch.get_state(key)
                    if noted is not None:
                        batch.put_state(key, None)
                        batch.put_state(by_due + noted + event.sow_key, None)

        return changed

    def _pending(self, state: PartitionState) -> list[tuple[int, bytes]]:
        """(due, SowKey) of the partition's committed entries, in due order."""
        full = STATE_PREFIX + self._by_due
        entries = [
            (int.from_bytes(key[len(full) : len(full) + 8], "big"), key[len(full) + 8 :])
            for key, _ in state.store.meta_items(full)
        ]
        entries.sort()
        return entries

    def _next_due(self, state: PartitionState) -> int:
        place = (state.topic.name, state.partition)
        known = self._next.get(place)
        if known is None or known[0] is not state:
            pending = self._pending(state)
            known = self._next[place] = (state, pending[0][0] if pending else 1 << 62)
        return known[1]

    def due(self, owned: Owned, now_ms: int) -> bool:
        return any(
            self._next_due(state) <= now_ms
            for (topic, _), state in owned.items()
            if topic == self.topic
        )

    def run(self, transaction: Transaction, owned: Owned) -> None:
        now_ms = transaction.now_ms
        for (topic, partition), state in owned.items():
            if topic != self.topic or self._next_due(state) > now_ms:
                continue
            batch = transaction.batch(state)
            for due, sow_key in self._pending(state)[:MAX_PER_TRANSACTION]:
                if due > now_ms:
                    break
                self._fire(batch, due, sow_key)
            # Read again once this commits: what it did is then in the store (were the
            # transaction to abort, the entries it took are still due).
            self._next.pop((topic, partition), None)

    def _fire(self, batch: PartitionBatch, due: int, sow_key: bytes) -> None:
        """The Duration of a record ended: drop its entries; publish it if it matches."""
        due_bytes = due.to_bytes(8, "big")
        key = self._by_key + sow_key
        batch.put_state(self._by_due + due_bytes + sow_key, None)
        if batch.get_state(key) != due_bytes:
            return  # stale: the record stopped matching (and maybe matched again since)
        batch.put_state(key, None)
        envelope = batch.lookup(sow_key)
        if envelope is None or not self.watched.matches(envelope):
            return
        expiration_ms = expiration_of(envelope)
        if expiration_ms is not None and expiration_ms <= due:
            return  # it expired before its Duration ended (its expiry is still to be made)
        for publisher in self.publishers:
            publisher.publish(batch, self.topic, sow_key, envelope, _TIMEOUT)
