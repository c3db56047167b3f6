"""The second half of a view: one partition of the view's records, computed from its
input (:mod:`processor.views.feed`) inside the processor's transactions.

The partition keeps each group's members in its state (``put_state``: changelog control
records and the store's meta column, so recovery and standbys restore them with the
records), under ``m<view SowKey>\\0<member>``: the member's input values and the input
offset of its latest update (its place in the group's update order). A group is loaded
from there the first time a transaction touches it and kept in memory (at most
``MAX_GROUPS`` between transactions; an aborted transaction drops them all). A group
changed in the current transaction always stays in memory, emptied or not: the store
holds only what was committed.

Each input record updates its group, which then writes its output message (when it
differs from the one written last) or, for a group that lost its last member, a delete
of the view record: with ``Conflation`` none after each record, so every update of the
view reaches its changelog and subscribers in order; with ``inline`` once per run of
records (the latest state of each group the run changed). A record computed by another definition
of the view (its digest differs) is skipped: the view is rebuilt from its underlying
topics when its definition changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from processor import changelog
from processor.changelog import POSITION_HEADER, REASON_HEADER, format_position
from processor.changelog.events import ChangeReason
from processor.engine.derived import Rejects
from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.errors import MessageError
from processor.log import Record
from processor.state import Store
from processor.views.contribution import Values, decode_values, encode_values
from processor.views.definition import ViewDefinition
from processor.views.feed import DIGEST_HEADER, MEMBER_HEADER
from processor.views.grouped import Group
from processor.views.join import JoinStage

log = logging.getLogger(__name__)

#: Groups kept in memory between transactions, at most.
MAX_GROUPS = 100_000

_DELETED = b"deleted"


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
        self._join = JoinStage(definition) if definition.sides else None

    def discard(self) -> None:
        self._groups.clear()
        if self._join is not None:
            self._join.discard()

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        if self._join is not None and records[0].topic() == self.state.topic.repartition_topic:
            self._join.apply(records, batch, reject)
            return
        number = batch.number
        if len(self._groups) > MAX_GROUPS:  # a group changed in this transaction stays
            self._groups = {k: g for k, g in self._groups.items() if g.touched == number}
        changed: dict[bytes, Record] = {}
        kept: dict[bytes, bytes | None] = {}
        inline = self.definition.inline
        for record in records:
            try:
                view_key, member, values = self._read(record)
            except MessageError as exc:
                reject(record, exc)
                continue
            if view_key is None:
                continue
            group = self._group(view_key, batch)
            state_key = _member_prefix(view_key) + member
            if values is None:
                if not group.retract(member):
                    continue
                kept[state_key] = None
            else:
                group.upsert(member, values)
                kept[state_key] = encode_values(record.offset(), values)
            group.touched = number
            if inline:
                changed[view_key] = record
            else:
                self._write(view_key, record, batch)
        for view_key, record in changed.items():
            self._write(view_key, record, batch)
        for state_key, value in kept.items():  # a member's latest state, once per run
            batch.put_state(state_key, value)

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

    def _write(self, view_key: bytes, record: Record, batch: PartitionBatch) -> None:
        """Write a changed group's record: its new output, or its delete."""
        group = self._groups[view_key]
        state = self.state
        log_topic, partition, offset = record.topic(), state.partition, record.offset()
        changelog_topic = state.topic.changelog_topic
        if not group.members:
            # The empty group stays cached until the transaction ends: its members'
            # deletes are not in the store before the commit.
            if group.output is None:
                return  # never written
            position = format_position(log_topic, partition, offset)
            headers = [(REASON_HEADER, _DELETED), (POSITION_HEADER, position)]
            batch.produce(changelog_topic, None, view_key, partition, headers)
            batch.write(view_key, None, ChangeReason.DELETE, log_topic, offset)
            group.output = None
            return
        data = self.definition.encode(group.result())
        if data == group.output:
            return
        envelope = state.writers[log_topic].encode(
            offset, view_key, data, record.timestamp()[1], batch.now_ms, None, None
        )
        batch.produce(changelog_topic, envelope, view_key, partition)
        batch.write(view_key, envelope, ChangeReason.PUBLISH, log_topic, offset)
        group.output = data


class ViewTopic:
    """Makes the partitions of one view (:class:`~processor.engine.derived.DerivedTopic`)."""

    def __init__(self, definition: ViewDefinition) -> None:
        self.definition = definition

    def open(self, state: PartitionState) -> ViewPartition:
        return ViewPartition(self.definition, state)
