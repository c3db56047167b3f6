"""The first half of a view: its underlying topics' changes, sent to the view's
partitions inside the transactions that make them.

A :class:`ViewFeed` listens to one underlying topic
(:class:`~processor.engine.transaction.ChangeListener`). For each change of a record
(old value, new value) it sends what changed in the record's contribution to the view's
input topic (``kafka_topic`` of the view), keyed by the view record's SowKey, on that
SowKey's partition: a *retract* (null value) to the group the record left, an *upsert*
(the record's input values) to the group it is in now. Headers name the member (the
underlying topic and the record's SowKey) and the definition that computed it. A record
that moves between groups sends both; one that stays sends the upsert only (it
replaces the member). Both go in the change's transaction, so the view's partitions
see every change exactly once, in each record's order. When this processor owns the
view partition (:class:`~processor.engine.derived.Direct`), the changes go to it
directly instead, in the same transaction: no round trip through Kafka (until it has
read back its barrier, they wait in its state).
With ``Conflation`` inline, the changes one transaction makes to one record are
conflated first (its first old value, its last new one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from processor.changelog.events import ChangeEvent, Listener
from processor.engine.transaction import PartitionBatch
from processor.errors import RegexBudgetError
from processor.expr.budget import count_overrun
from processor.views.contribution import Change, GroupKey, Values, encode_values
from processor.views.definition import ViewDefinition

log = logging.getLogger(__name__)

#: Headers of a view's input records.
MEMBER_HEADER = "sow.view.member"
DIGEST_HEADER = "sow.view.definition"
#: Which side of a join step a record is (b"0": left, b"1": right).
SIDE_HEADER = "sow.view.side"
#: Which join step a record is for (absent: step 1).
STEP_HEADER = "sow.view.step"


def member_id(topic: str, sow_key: bytes) -> bytes:
    """A view member: an underlying topic's record."""
    return topic.encode() + b"\x00" + sow_key


def conflated(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    """One change per record: from its first old value to its last new one (a record
    that came and went again is left out)."""
    first: dict[bytes, ChangeEvent] = {}
    last: dict[bytes, ChangeEvent] = {}
    for event in events:
        first.setdefault(event.sow_key, event)
        last[event.sow_key] = event
    out: list[ChangeEvent] = []
    for sow_key, latest in last.items():
        old = first[sow_key].old
        if old is None and latest.new is None:
            continue
        if old is not latest.old:
            latest = ChangeEvent(  # noqa: PLW2901 - the record's change, first old to last new
                latest.topic,
                sow_key,
                old,
                latest.new,
                latest.position,
                latest.reason,
                latest.expiration_ms,
            )
        out.append(latest)
    return out


#: Entries each of a feed's memos keeps at most (cleared when full).
MEMO_SIZE = 1 << 17

#: A record's contribution as sent: its group's view SowKey and partition, its values.
Contributed = tuple[bytes, int, Values]


class ViewFeed:
    """Sends one underlying topic's changes to one view (see the module doc)."""

    needs_old = True

    def __init__(self, definition: ViewDefinition, source: str) -> None:
        self.definition = definition
        self.source = source
        #: A partition of the source feeds the view its records once per definition
        #: (:mod:`processor.engine.feeding`): a view defined after the data, or
        #: redefined, is built from what exists.
        self.feed_marker = b"fed:" + definition.name.encode()
        self.feed_version = definition.digest
        #: Group -> (its view SowKey, its partition), remembered (the processor's loop
        #: owns the feed).
        self._keys: dict[GroupKey, tuple[bytes, int]] = {}
        #: SowKey -> (the record's envelope last sent, its contribution): a change's old
        #: value is usually the envelope its previous change sent.
        self._last: dict[bytes, tuple[bytes, Contributed | None]] = {}

    def listen(self, batch: PartitionBatch) -> Listener:
        if self.definition.join_topics:
            return self._listen_joined(batch)
        definition, source, contributed = self.definition, self.source, self._contributed
        target = definition.topic.kafka_topic
        digest = definition.digest
        last = self._last
        prefix = source.encode() + b"\x00"
        view = definition.name

        def changed(events: Sequence[ChangeEvent]) -> None:
            direct: dict[int, list[Change]] = {}
            now = batch.now_ms

            def send(view_key: bytes, partition: int, values: Values | None, member: bytes) -> None:
                changes = direct.get(partition)
                if changes is None and batch.local(view, partition) is not None:
                    changes = direct[partition] = []
                if changes is not None:  # this processor's: in this transaction
                    changes.append((view_key, member, values, target, -1, now))
                    return
                headers = [(MEMBER_HEADER, member), (DIGEST_HEADER, digest)]
                value = None if values is None else encode_values(0, values)
                batch.produce(target, value, view_key, partition, headers)

            for event in conflated(events) if definition.inline else events:
                sow_key = event.sow_key
                old = None
                if event.old is not None:
                    cached = last.get(sow_key)
                    if cached is not None and cached[0] == event.old:
                        old = cached[1]
                    else:
                        old = contributed(event.old)
                new = None if event.new is None else contributed(event.new)
                if event.new is None:
                    last.pop(sow_key, None)
                else:
                    if len(last) >= MEMO_SIZE:
                        last.clear()
                    last[sow_key] = (event.new, new)
                if old is None and new is None:
                    continue
                member = prefix + sow_key
                if old is not None and (new is None or new[0] != old[0]):
                    send(old[0], old[1], None, member)
                if new is not None:
                    send(new[0], new[1], new[2], member)
            for partition, changes in direct.items():
                found = batch.local(view, partition)
                assert found is not None
                view_batch, logic = found
                logic.take(changes, view_batch)

        return changed

    def _contributed(self, envelope: bytes) -> Contributed | None:
        """An underlying record's (envelope's) group SowKey, its partition and input
        values (None: filtered out); group SowKeys are remembered. A grouping or an input
        of the view whose pattern overruns its match budget leaves the record out, counted
        (the filter's own overrun is counted in :func:`contribution`)."""
        try:
            found = self.definition.contribution_of(self.source, envelope)
        except RegexBudgetError:
            count_overrun("view")
            return None
        if found is None:
            return None
        group, values = found
        placed = self._keys.get(group)
        if placed is None:
            if len(self._keys) >= MEMO_SIZE:
                self._keys.clear()
            view_key = self.definition.view_key(group)
            placed = self._keys[group] = (view_key, self.definition.partition_of(view_key))
        return placed[0], placed[1], values

    def _listen_joined(self, batch: PartitionBatch) -> Listener:
        """A joined view's feed: each record goes to the view partition that joins its
        join key in its join step (:mod:`processor.views.join`), through the view's
        repartition topic: topic 0 is step 1's left side, topic ``k`` step ``k``'s right."""
        definition, source = self.definition, self.source
        target = definition.topic.repartition_topic
        index = definition.join_index(source)
        placed = [(DIGEST_HEADER, definition.digest), (SIDE_HEADER, b"1" if index else b"0")]
        if index > 1:
            placed.append((STEP_HEADER, str(index).encode()))

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in conflated(events) if definition.inline else events:
                old = None if event.old is None else definition.join_read(source, event.old)
                new = None if event.new is None else definition.join_read(source, event.new)
                headers = [(MEMBER_HEADER, member_id(source, event.sow_key)), *placed]
                if old is not None and (new is None or new[0] != old[0]):
                    key = old[0]
                    batch.produce(target, None, key, definition.partition_of(key), headers)
                if new is not None:
                    key = new[0]
                    value = encode_values(0, new[1])
                    batch.produce(target, value, key, definition.partition_of(key), headers)

        return changed
