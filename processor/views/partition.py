"""The second half of a view: one partition of the view's records, computed from its
input (:mod:`processor.views.feed`) inside the processor's transactions.

Its state keys (under ``STATE_PREFIX``; each prefix is its own, none a prefix of
another): ``m<view SowKey>\\0<member>`` a group's member, ``j<len><join value>...`` the
join stage's records (:mod:`processor.views.join`), ``sequence`` the members' update
sequence, ``deferred:<sequence>`` a change taken before the barrier was read back,
``definition`` the digest its state was computed by.

The partition keeps each group's members in its state (``put_state``: changelog control
records and the store's meta column, so recovery and standbys restore them with the
records): the member's input values and the partition's update sequence at its latest
update (its place in the group's update order). A group is loaded
from there the first time a transaction touches it and kept in memory (at most
``MAX_GROUPS`` between transactions; an aborted transaction drops them all). A group
changed in the current transaction always stays in memory, emptied or not: the store
holds only what was committed.

Each input record updates its group, which then writes its output message (when it
differs from the one written last) or, for a group that lost its last member, a delete
of the view record: with ``Conflation`` none after each record, so every update of the
view reaches its changelog and subscribers in order; with ``inline`` once per run of
records (the latest state of each group the run changed). A record computed by another
definition of the view (its digest differs) is skipped: the view is rebuilt from its
underlying topics when its definition changes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from processor import changelog
from processor.changelog.events import ChangeReason
from processor.engine.derived import Rejects
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.errors import MessageError
from processor.log import Record
from processor.state import Store
from processor.views.contribution import Change, Values, decode_values, encode_values
from processor.views.definition import ViewDefinition
from processor.views.feed import DIGEST_HEADER, MEMBER_HEADER
from processor.views.grouped import Group
from processor.views.join import JoinStage

log = logging.getLogger(__name__)

#: Groups kept in memory between transactions, at most.
MAX_GROUPS = 100_000

#: The state key of the partition's member update sequence.
_SEQUENCE = b"sequence"
#: The state keys of changes kept until the barrier is read back (then the sequence).
_DEFERRED = b"deferred:"
#: A barrier record's key and header (:class:`~processor.engine.derived.Direct`).
BARRIER_KEY = b"\x00barrier"
BARRIER_HEADER = "sow.view.barrier"


def _member_prefix(view_key: bytes) -> bytes:
    return b"m" + view_key + b"\x00"


class ViewPartition:
    """One view partition (see the module doc); not thread-safe."""

    def __init__(self, definition: ViewDefinition, state: PartitionState) -> None:
        self.definition = definition
        self.state = state
        #: Its state is of this definition (else it starts afresh: engine/feeding.py).
        self.version = (b"definition", definition.digest)
        self._groups: dict[bytes, Group] = {}
        self._stale_digests: set[bytes] = set()
        #: A joined view's join stage: it reads the view's repartition topic.
        self._join = JoinStage(definition) if definition.join_topics else None
        #: Whether changes may be applied directly (Direct): once the last barrier asked
        #: for is read back; never for a joined view.
        self.ready = False
        self.barrier_due = False
        self._barrier: bytes | None = None
        #: The update sequence of the members (their order in their groups), as kept.
        self._sequence: int | None = None
        #: Changes taken before the barrier was read back (None: not loaded).
        self._deferred: list[tuple[bytes, Change]] | None = None

    def discard(self) -> None:
        self._groups.clear()
        self._sequence = None
        self._deferred = None
        if self._join is not None:
            self._join.discard()

    def barrier(self) -> tuple[bytes, list[tuple[str, bytes]]]:
        self._barrier = os.urandom(8).hex().encode()
        self.ready = False
        return BARRIER_KEY, [(BARRIER_HEADER, self._barrier)]

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        if self._join is not None and records[0].topic() == self.state.topic.repartition_topic:
            self._join.apply(records, batch, reject)
            return
        changes: list[Change] = []
        for record in records:
            if record.key() == BARRIER_KEY:
                token = dict(record.headers() or ()).get(BARRIER_HEADER)
                if token is not None and token == self._barrier and self._join is None:
                    changes.extend(self._take_deferred(batch))  # after what came before
                    self.ready = True
                continue
            try:
                view_key, member, values = self._read(record)
            except MessageError as exc:
                reject(record, exc)
                continue
            if view_key is not None:
                stamp = record.timestamp()[1]
                changes.append((view_key, member, values, record.topic(), record.offset(), stamp))
        self.change(changes, batch)

    def take(self, changes: Sequence[Change], batch: PartitionBatch) -> None:
        """Take changes made by this processor in the transaction of ``batch`` (Direct):
        applied now when ready, else kept in its state, in order, until it is."""
        if self.ready:
            self.change(changes, batch)
            return
        deferred = self._deferred_of(batch)
        sequence = self._sequence_of(batch)
        for change in changes:
            sequence += 1
            key = _DEFERRED + sequence.to_bytes(8, "big")
            view_key, member, values = change[0], change[1], change[2]
            value = _encode_deferred(view_key, member, values)
            batch.put_state(key, value)
            deferred.append((key, change))
        self._sequence = sequence
        batch.put_state(_SEQUENCE, str(sequence).encode())

    def _deferred_of(self, batch: PartitionBatch) -> list[tuple[bytes, Change]]:
        """The changes kept until the barrier is read back (loaded from the state)."""
        if self._deferred is None:
            prefix = changelog.STATE_PREFIX + _DEFERRED
            topic = self.state.topic.kafka_topic
            self._deferred = [
                (key[len(changelog.STATE_PREFIX) :], (*_decode_deferred(raw), topic, -1, 0))
                for key, raw in self.state.store.meta_items(prefix)
            ]
        return self._deferred

    def _take_deferred(self, batch: PartitionBatch) -> list[Change]:
        deferred = self._deferred_of(batch)
        for key, _ in deferred:
            batch.put_state(key, None)
        now = batch.now_ms
        taken = [(*change[:5], now) for _, change in deferred]
        deferred.clear()
        return taken

    def change(self, changes: Sequence[Change], batch: PartitionBatch) -> None:
        """Apply members' changes, in order, into the partition's ``batch``: read from its
        input, or taken directly from a feed in the transaction that makes them."""
        number = batch.number
        if len(self._groups) > MAX_GROUPS:  # a group changed in this transaction stays
            self._groups = {k: g for k, g in self._groups.items() if g.touched == number}
        changed: dict[bytes, tuple[str, int, int]] = {}
        kept: dict[bytes, bytes | None] = {}
        inline = self.definition.inline
        sequence = self._sequence_of(batch)
        for view_key, member, values, log_topic, offset, stamp in changes:
            group = self._group(view_key, batch)
            state_key = _member_prefix(view_key) + member
            if values is None:
                if not group.retract(member):
                    continue
                kept[state_key] = None
            else:
                sequence += 1
                if group.upsert(member, values):
                    kept[state_key] = encode_values(sequence, values)
                elif member not in group.members:  # left out (a pattern over its budget)
                    kept[state_key] = None
            group.touched = number
            if inline:
                changed[view_key] = (log_topic, offset, stamp)
            else:
                self._write(view_key, (log_topic, offset, stamp), batch)
        for view_key, position in changed.items():
            self._write(view_key, position, batch)
        for state_key, value in kept.items():  # a member's latest state, once per run
            batch.put_state(state_key, value)
        if sequence != self._sequence:
            self._sequence = sequence
            batch.put_state(_SEQUENCE, str(sequence).encode())

    def _sequence_of(self, batch: PartitionBatch) -> int:
        if self._sequence is None:
            kept = batch.get_state(_SEQUENCE)
            self._sequence = int(kept) if kept else 0
        return self._sequence

    def _read(self, record: Record) -> tuple[bytes | None, bytes, Values | None]:
        """A record's view SowKey (None: skip it), member and values (None: retract)."""
        headers = dict(record.headers() or ())
        member = headers.get(MEMBER_HEADER)
        digest = headers.get(DIGEST_HEADER)
        view_key = record.key()
        if not member or not digest or not view_key:
            raise MessageError(
                f"a record of view {self.definition.name}'s input needs its key and headers "
                f"{MEMBER_HEADER} and {DIGEST_HEADER}: only the processor writes this topic"
            )
        if digest != self.definition.digest:
            if digest not in self._stale_digests:
                self._stale_digests.add(digest)
                log.info(
                    "view %s[%d]: skipping input computed by another definition of the view",
                    self.definition.name,
                    self.state.partition,
                )
            return None, member, None
        value = record.value()
        if value is None:
            return view_key, member, None
        try:
            _, values = decode_values(value)
        except ValueError as exc:
            raise MessageError(f"view input record is not valid: {exc}") from exc
        if len(values) != len(self.definition.aggregation.inputs):
            raise MessageError(
                f"view input record has {len(values)} values, the view reads "
                f"{len(self.definition.aggregation.inputs)}"
            )
        return view_key, member, values

    def _group(self, view_key: bytes, batch: PartitionBatch) -> Group:
        group = self._groups.get(view_key)
        if group is None:
            group = self._groups[view_key] = self._load(view_key, batch)
        return group

    def _load(self, view_key: bytes, batch: PartitionBatch) -> Group:
        """A group as committed (no transaction changed it since it was last cached)."""
        group = Group(self.definition.aggregation)
        store: Store = self.state.store
        prefix = changelog.STATE_PREFIX + _member_prefix(view_key)
        members = sorted(
            ((*decode_values(raw), key[len(prefix) :]) for key, raw in store.meta_items(prefix)),
            key=lambda item: item[0],
        )
        for _, values, member in members:
            group.upsert(member, values)
        current = batch.lookup(view_key)
        group.output = None if current is None else changelog.decode(current).data
        return group

    def _write(self, view_key: bytes, cause: tuple[str, int, int], batch: PartitionBatch) -> None:
        """Write a changed group's record: its new output, or its delete; ``cause`` is
        the (log topic, offset, timestamp) of the change behind it."""
        group = self._groups[view_key]
        state = self.state
        log_topic, offset, stamp = cause
        if not group.members:
            # The empty group stays cached until the transaction ends: its members'
            # deletes are not in the store before the commit.
            if group.output is None:
                return  # never written
            batch.write(view_key, None, ChangeReason.DELETE, log_topic, offset)
            group.output = None
            return
        data = self.definition.encode(group.result())
        if data == group.output:
            return
        envelope = state.writers[log_topic].encode(
            offset, view_key, data, stamp, batch.now_ms, None, None
        )
        batch.write(view_key, envelope, ChangeReason.PUBLISH, log_topic, offset)
        group.output = data


def _encode_deferred(view_key: bytes, member: bytes, values: Values | None) -> bytes:
    head = len(view_key).to_bytes(4, "big") + view_key + len(member).to_bytes(4, "big") + member
    return head + (b"" if values is None else encode_values(0, values))


def _decode_deferred(raw: bytes) -> tuple[bytes, bytes, Values | None]:
    size = int.from_bytes(raw[:4], "big")
    view_key, rest = raw[4 : 4 + size], raw[4 + size :]
    size = int.from_bytes(rest[:4], "big")
    member, rest = rest[4 : 4 + size], rest[4 + size :]
    return view_key, member, (decode_values(rest)[1] if rest else None)


class ViewTopic:
    """Makes the partitions of one view (:class:`~processor.engine.derived.DerivedTopic`)."""

    def __init__(self, definition: ViewDefinition) -> None:
        self.definition = definition

    def open(self, state: PartitionState) -> ViewPartition:
        return ViewPartition(self.definition, state)
