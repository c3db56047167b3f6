"""The join stages of a joined view (seed 002 SOW/View ``Join``).

A view joins its topics in steps (:mod:`processor.topology.join_plan`): step ``k`` joins
the rows of topics 0..k-1 (side 0; topic 0's records at step 1) with topic ``k``'s records
(side 1), left outer. Every record of a step's two sides is sent, by its join key (the
texts of the step's join fields, as AMPS compares join values), to the view partition
that joins that key, through the view's repartition topic (:mod:`processor.views.feed`).
There the join stage keeps, per join key, the records of both sides (their values, in
the partition's state under ``j<len><join key>``) and turns each change into the changes
of the rows it affects: a left record joins every right record of its key, or none (its
row has NULL for the step's topic); a right record that arrives or leaves changes the
rows of every left record of its key.

A row of the last step is a member of its group in the view, sent to the view partition
of the group's SowKey like a record of a one-topic view (a retract when the row goes away
or leaves its group, an upsert when it appears or changes). A row of an earlier step is a
left record of the next step, sent by that step's join key through the repartition topic
again. A row's id names its join key with its records: a record that moves to another
join key makes rows of other ids there, so the changes of one row always come from one
partition, in order, whatever order two partitions' changes arrive in.

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
from processor.views.definition import ViewDefinition
from processor.views.feed import DIGEST_HEADER, MEMBER_HEADER, SIDE_HEADER, STEP_HEADER

#: Join keys kept in memory between transactions, at most.
MAX_JOIN_GROUPS = 100_000

#: A row's id -> (the key it is sent by, its values).
Rows = dict[bytes, tuple[bytes, Values]]


class JoinGroup:
    """The records of both sides with one join key."""

    __slots__ = ("sides", "touched")

    def __init__(self) -> None:
        self.sides: tuple[dict[bytes, Values], dict[bytes, Values]] = ({}, {})
        self.touched = -1


def _state_prefix(join_key: bytes) -> bytes:
    return b"j" + len(join_key).to_bytes(4, "big") + join_key


def _row_id(join_key: bytes, left: bytes, right: bytes) -> bytes:
    return len(join_key).to_bytes(4, "big") + join_key + len(left).to_bytes(4, "big") + left + right


class JoinStage:
    """The join stages of one view partition (see the module doc); not thread-safe."""

    def __init__(self, definition: ViewDefinition) -> None:
        self.definition = definition
        self._groups: dict[bytes, JoinGroup] = {}

    def discard(self) -> None:
        self._groups.clear()

    def apply(self, records: Sequence[Record], batch: PartitionBatch, reject: Rejects) -> None:
        number = batch.number
        if len(self._groups) > MAX_JOIN_GROUPS:
            self._groups = {k: g for k, g in self._groups.items() if g.touched == number}
        matches = self.definition.join_matches
        for record in records:
            try:
                step, join_key, side, member, values = self._read(record)
            except MessageError as exc:
                reject(record, exc)
                continue
            if join_key is None:
                continue
            joins = matches(join_key)
            if not joins and side == 1:
                continue  # a right record that cannot match anything changes no row
            group = self._group(join_key, batch)
            before = self._rows(step, join_key, group, side, member, joins)
            state_key = _state_prefix(join_key) + bytes((side,)) + member
            if values is None:
                if group.sides[side].pop(member, None) is None:
                    continue
                batch.put_state(state_key, None)
            else:
                group.sides[side][member] = values
                batch.put_state(state_key, encode_values(0, values))
            group.touched = number  # kept until the transaction ends, emptied or not
            self._send(step, before, self._rows(step, join_key, group, side, member, joins), batch)

    def _read(self, record: Record) -> tuple[int, bytes | None, int, bytes, Values | None]:
        """A record's step, join key (None: skip it), side, member and values (None:
        retract)."""
        headers = dict(record.headers() or ())
        member, digest = headers.get(MEMBER_HEADER), headers.get(DIGEST_HEADER)
        side, key = headers.get(SIDE_HEADER), record.key()
        step_text = headers.get(STEP_HEADER, b"1")
        definition = self.definition
        if not member or not digest or side not in (b"0", b"1") or key is None:
            raise MessageError(
                f"a join record of view {definition.name} needs its key and headers "
                f"{MEMBER_HEADER}, {DIGEST_HEADER} and {SIDE_HEADER}: only the processor "
                "writes this topic"
            )
        if digest != definition.digest:
            return 0, None, 0, member, None
        if not step_text.isdigit() or not 1 <= int(step_text) <= len(definition.steps):
            raise MessageError(
                f"a join record of view {definition.name} names join step {step_text!r}; "
                f"the view has steps 1 to {len(definition.steps)}"
            )
        step = int(step_text)
        value = record.value()
        if value is None:
            return step, key, int(side), member, None
        try:
            _, values = decode_values(value)
        except ValueError as exc:
            raise MessageError(f"view join record is not valid: {exc}") from exc
        expected = definition.join_width(step, int(side))
        if len(values) != expected:
            raise MessageError(f"view join record has {len(values)} values, expected {expected}")
        return step, key, int(side), member, values

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

    def _rows(
        self, step: int, join_key: bytes, group: JoinGroup, side: int, member: bytes, joins: bool
    ) -> Rows:
        """The rows a change of ``member`` (of ``side``) can affect, as they are."""
        lefts, rights = group.sides
        joined_row = self.definition.joined_row
        chosen = lefts if side == 1 else ({member: lefts[member]} if member in lefts else {})
        rows: Rows = {}
        for left, left_values in chosen.items():
            if joins and rights:
                for right, right_values in rights.items():
                    rows[_row_id(join_key, left, right)] = joined_row(
                        step, left_values, right_values
                    )
            else:
                rows[_row_id(join_key, left, b"")] = joined_row(step, left_values, None)
        return rows

    def _send(self, step: int, before: Rows, after: Rows, batch: PartitionBatch) -> None:
        """Send what changed between two sets of rows: to the view partitions of their
        groups after the last step, else to the next step's."""
        definition = self.definition
        digest = definition.digest
        if step == len(definition.steps):
            target = definition.topic.kafka_topic
            extra: list[tuple[str, bytes]] = []
        else:
            target = definition.topic.repartition_topic
            extra = [(SIDE_HEADER, b"0"), (STEP_HEADER, str(step + 1).encode())]
        for row, (key, _) in before.items():
            now = after.get(row)
            if now is None or now[0] != key:
                headers = [(MEMBER_HEADER, row), (DIGEST_HEADER, digest), *extra]
                batch.produce(target, None, key, definition.partition_of(key), headers)
        for row, (key, values) in after.items():
            if before.get(row) == (key, values):
                continue
            headers = [(MEMBER_HEADER, row), (DIGEST_HEADER, digest), *extra]
            value = encode_values(0, values)
            batch.produce(target, value, key, definition.partition_of(key), headers)
