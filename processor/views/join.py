"""The join stage of a view of two joined topics (seed 002 SOW/View ``Join``).

``[LEFT]./f = [RIGHT]./g``: the left topic is preserved (a left outer join). Every record
of either topic is sent, by its join value's text (as AMPS compares join values), to the
view partition that joins that value, through the view's repartition topic
(:mod:`processor.views.feed`). There the join stage keeps, per join value, the records of
both sides (their values of the view's inputs, in the partition's state under
``j<len><value>``) and turns each change into the changes of the joined rows it affects:
a left record joins every right record of its value, or none (its row has NULL right
fields); a right record that arrives or leaves changes the rows of every left record of
its value. Each joined row is a member of its group in the view, sent to the view
partition of the group's SowKey like a record of a one-topic view (a retract when the
row goes away or leaves its group, an upsert when it appears or changes).

NULL, missing and empty join values match each other only with JoinNullEquivalency
enabled; otherwise a left record without a value keeps its unmatched row and a right
record without one joins nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from processor.changelog import STATE_PREFIX
from processor.engine.derived import Rejects
from processor.engine.transaction import PartitionBatch
from processor.errors import MessageError
from processor.log import Record
from processor.views.contribution import Values, decode_values, encode_values
from processor.views.definition import NO_JOIN_VALUE, ViewDefinition
from processor.views.feed import DIGEST_HEADER, MEMBER_HEADER, SIDE_HEADER

#: Join values kept in memory between transactions, at most.
MAX_JOIN_GROUPS = 100_000

#: A joined row's id -> (its group's view SowKey, its values).
Rows = dict[bytes, tuple[bytes, Values]]


class JoinGroup:
    """The records of both sides with one join value."""

    __slots__ = ("sides", "touched")

    def __init__(self) -> None:
        self.sides: tuple[dict[bytes, Values], dict[bytes, Values]] = ({}, {})
        self.touched = -1


def _state_prefix(join_key: bytes) -> bytes:
    return b"j" + len(join_key).to_bytes(4, "big") + join_key


def _row_id(left: bytes, right: bytes) -> bytes:
    return len(left).to_bytes(4, "big") + left + right


class JoinStage:
    """The join stage of one view partition (see the module doc); not thread-safe."""

    def __init__(self, definition: ViewDefinition) -> None:
        self.definition = definition
        self._groups: dict[bytes, JoinGroup] = {}

    def discard(self) -> None:
        self._groups.clear()

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        number = batch.number
        if len(self._groups) > MAX_JOIN_GROUPS:
            self._groups = {k: g for k, g in self._groups.items() if g.touched == number}
        for record in records:
            try:
                join_key, side, member, values = self._read(record)
            except MessageError as exc:
                reject(record, exc)
                continue
            if join_key is None:
                continue
            group = self._group(join_key, batch)
            matches = join_key != NO_JOIN_VALUE or self.definition.null_equivalency
            before = self._rows(group, side, member, matches)
            state_key = _state_prefix(join_key) + bytes((side,)) + member
            if values is None:
                if group.sides[side].pop(member, None) is None:
                    continue
                batch.put_state(state_key, None)
            else:
                group.sides[side][member] = values
                batch.put_state(state_key, encode_values(0, values))
            group.touched = number  # kept until the transaction ends, emptied or not
            self._send(before, self._rows(group, side, member, matches), batch)

    def _read(self, record: Record) -> tuple[bytes | None, int, bytes, Values | None]:
        """A record's join key (None: skip it), side, member and
        values (None: retract)."""
        headers = dict(record.headers() or ())
        member, digest = headers.get(MEMBER_HEADER), headers.get(DIGEST_HEADER)
        side, key = headers.get(SIDE_HEADER), record.key()
        if not member or not digest or side not in (b"0", b"1") or key is None:
            raise MessageError(
                f"a join record of view {self.definition.name} needs its key and headers "
                f"{MEMBER_HEADER}, {DIGEST_HEADER} and {SIDE_HEADER}: only the processor "
                "writes this topic"
            )
        if digest != self.definition.digest:
            return None, 0, member, None
        value = record.value()
        if value is None:
            return key, int(side), member, None
        try:
            _, values = decode_values(value)
        except ValueError as exc:
            raise MessageError(f"view join record is not valid: {exc}") from exc
        expected = len(self.definition.sides[int(side)].inputs)
        if len(values) != expected:
            raise MessageError(f"view join record has {len(values)} values, expected {expected}")
        return key, int(side), member, values

    def _group(self, join_key: bytes, batch: PartitionBatch) -> JoinGroup:
        group = self._groups.get(join_key)
        if group is None:
            group = self._groups[join_key] = JoinGroup()
            prefix = STATE_PREFIX + _state_prefix(join_key)
            full = len(prefix)
            for key, raw in batch.state.store.meta_items(prefix):
                side, member = key[full], key[full + 1 :]
                group.sides[side][member] = decode_values(raw)[1]
        return group

    def _rows(self, group: JoinGroup, side: int, member: bytes, matches: bool) -> Rows:
        """The joined rows a change of ``member`` (of ``side``) can affect, as they are."""
        lefts, rights = group.sides
        definition = self.definition
        chosen = lefts if side == 1 else ({member: lefts[member]} if member in lefts else {})
        rows: Rows = {}
        for left, left_values in chosen.items():
            if matches and rights:
                for right, right_values in rights.items():
                    values = definition.joined(left_values, right_values)
                    rows[_row_id(left, right)] = definition.row_contribution(values)
            else:
                values = definition.joined(left_values, None)
                rows[_row_id(left, b"")] = definition.row_contribution(values)
        return rows

    def _send(self, before: Rows, after: Rows, batch: PartitionBatch) -> None:
        """Send the view partitions what changed between two sets of rows."""
        definition = self.definition
        target, digest = definition.topic.kafka_topic, definition.digest
        for row, (view_key, _) in before.items():
            now = after.get(row)
            if now is None or now[0] != view_key:
                headers = [(MEMBER_HEADER, row), (DIGEST_HEADER, digest)]
                batch.produce(target, None, view_key, definition.partition_of(view_key), headers)
        for row, (view_key, values) in after.items():
            if before.get(row) == (view_key, values):
                continue
            headers = [(MEMBER_HEADER, row), (DIGEST_HEADER, digest)]
            value = encode_values(0, values)
            batch.produce(target, value, view_key, definition.partition_of(view_key), headers)
