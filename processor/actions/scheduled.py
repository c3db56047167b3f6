"""Actions on a schedule (``amps-action-on-schedule``): delete SOW records by filter
(``amps-action-do-delete-sow``) and compact a SOW topic's store
(``amps-action-do-compact-sow``).

Who runs a tick: each store partition of the topics the steps name is acted on by the
processor that owns it, once per tick. The last tick done is kept in the partition's
state (``put_state``: a changelog control record, restored with the store), written in
the transaction of the tick's work, so a processor killed before that transaction
commits does the tick again after its restart (or its successor does), and one killed
after it does not. A new action (or a partition that never ran it) only notes the
current time at first: its first run is at the next tick. Ticks missed while no
processor ran collapse into one run.

* **delete-sow** writes a filter delete (the command a ``sow_delete`` by filter writes,
  :mod:`processor.changelog.commands`) to the partition's input, in the tick's
  transaction, its Filter's ``{{AMPS_UNIX_TIMESTAMP}}``/``{{AMPS_DATETIME}}`` the tick's
  time: exactly once per tick; the processor applies it as it applies any
  sow_delete, in log order (so ``on-sow-delete-message`` actions see its deletes).
* **compact-sow** compacts the partition's RocksDB store (:meth:`Store.compact`: the
  space of deleted and replaced records is reclaimed now). The broker compacts the
  changelog topic by itself (``cleanup.policy=compact``). Compaction changes no data,
  so it may run again if its transaction aborts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from processor.changelog import STATE_PREFIX
from processor.changelog.commands import FILTER_DELETE_KEY, FILTER_HEADER
from processor.engine.derived import Owned
from processor.engine.partition import PartitionState
from processor.engine.transaction import Transaction
from processor.topology.actions import ActionSpec, DoModule, substitute, time_variables
from processor.topology.schedule import Schedule

log = logging.getLogger(__name__)

ACTION_HEADER = "sow.action"


def tick_key(action: ActionSpec) -> bytes:
    """Where a partition notes the last tick of ``action`` (under ``STATE_PREFIX``)."""
    return b"action:" + action.name.encode() + b"\x00tick"


class ScheduledAction:
    """One action on a schedule, a :class:`~processor.engine.derived.Timed` of the
    processor (module doc). Not thread-safe (the processor's loop owns it)."""

    def __init__(self, action: ActionSpec) -> None:
        assert action.on.every is not None
        self.action = action
        self.schedule: Schedule = action.on.every
        self.topics = frozenset(action.topics)
        self._key = tick_key(action)
        self._full_key = STATE_PREFIX + self._key
        self._next: dict[bytes, int] = {}  # last tick noted -> the next tick (a memo)
        #: Ticks done (per partition) and compactions since start (monitoring, tests).
        self.runs = 0
        self.compactions = 0

    def _mine(self, owned: Owned) -> list[PartitionState]:
        return [state for (topic, _), state in owned.items() if topic in self.topics]

    def _due_at(self, state: PartitionState) -> int:
        """When the partition's next run is due (0: now, it never noted a tick)."""
        noted = state.store.get_meta(self._full_key)
        if noted is None:
            return 0
        due = self._next.get(noted)
        if due is None:
            if len(self._next) > 4096:
                self._next.clear()
            due = self._next[noted] = self.schedule.next_after(int(noted))
        return due

    def due(self, owned: Owned, now_ms: int) -> bool:
        return any(self._due_at(state) <= now_ms for state in self._mine(owned))

    def run(self, transaction: Transaction, owned: Owned) -> None:
        now_ms = transaction.now_ms
        for state in self._mine(owned):
            due = self._due_at(state)
            if due > now_ms:
                continue
            batch = transaction.batch(state)
            batch.put_state(self._key, str(now_ms).encode())
            if due == 0:
                continue  # first sight: the first run is at the next tick
            self.runs += 1
            for step in self.action.do:
                if step.topic != state.topic.name:
                    continue
                if step.module is DoModule.DELETE_SOW:
                    text = substitute(step.filter, time_variables(now_ms))
                    self._delete(transaction, state, text)
                elif step.module is DoModule.COMPACT_SOW:
                    self._compact(state)

    def _delete(self, transaction: Transaction, state: PartitionState, text: str) -> None:
        topic = state.topic
        headers = [(FILTER_HEADER, text.encode()), (ACTION_HEADER, self.action.name.encode())]
        transaction.batch(state).produce(
            topic.kafka_topic, None, FILTER_DELETE_KEY, state.partition, headers
        )
        log.info(
            "action %s: deleting the records of %s[%d] matching %s",
            self.action.name,
            topic.name,
            state.partition,
            text,
        )

    def _compact(self, state: PartitionState) -> None:
        before, after = state.store.compact()
        self.compactions += 1
        log.info(
            "action %s: compacted %s[%d]: %d bytes before, %d after",
            self.action.name,
            state.topic.name,
            state.partition,
            before,
            after,
        )


def scheduled(actions: Sequence[ActionSpec]) -> list[ScheduledAction]:
    """The timers of the actions on a schedule."""
    return [ScheduledAction(action) for action in actions if action.on.every is not None]
