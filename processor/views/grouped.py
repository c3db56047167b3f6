"""A grouped view kept exact under every change: the aggregation of one topic's records,
updated from its change events by retracting a record's old contribution and adding its
new one (spec 2.7, seed 002 SOW/View).

:class:`GroupedView` holds, per group, the running aggregates (each retractable: sums and
counts, value multisets for MIN/MAX and COUNT DISTINCT) and the group's records' input
values in update order, whose latest supplies the non-aggregated projection fields (as an
aggregated query over the same records in the same order does). Applying a change returns
the groups it changed: their new output message, or None for a group that lost its last
record (the view deletes that record). A record the view's filter rejects contributes to
no group. Not thread-safe: the processor's loop owns it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from processor.expr import (
    Accumulator,
    Aggregation,
    Expression,
    FieldInput,
    compile_aggregation,
)
from processor.expr import compile as compile_expression
from processor.expr.values import extract

#: A group: the text forms of its grouping values.
GroupKey = tuple[Any, ...]


class _Group:
    __slots__ = ("accumulator", "members")

    def __init__(self, accumulator: Accumulator) -> None:
        self.accumulator = accumulator
        #: The group's records' input values by record key, in update order.
        self.members: dict[bytes, tuple[Any, ...]] = {}


class GroupedView:
    """One view's groups (see the module doc)."""

    __slots__ = ("_aggregation", "_filter", "_groups", "_of_record")

    def __init__(self, projection: str, grouping: str, filter_text: str | None = None) -> None:
        self._aggregation: Aggregation = compile_aggregation(projection, grouping)
        self._filter: Expression | None = (
            compile_expression(filter_text) if filter_text and filter_text.strip() else None
        )
        self._groups: dict[GroupKey, _Group] = {}
        #: Each record's group, for retracting it without its old message.
        self._of_record: dict[bytes, GroupKey] = {}

    @property
    def groups(self) -> int:
        return len(self._groups)

    def apply(self, key: bytes, new: Mapping[str, Any] | None) -> dict[GroupKey, Any]:
        """Apply one record's change (``new`` None: deleted); return each group it changed
        with the group's output message, or None when the group is now empty."""
        changed: dict[GroupKey, Any] = {}
        old_group = self._of_record.pop(key, None)
        if old_group is not None:
            group = self._groups[old_group]
            values = group.members.pop(key)
            last = next(reversed(group.members.values()), None)
            group.accumulator.remove(values, last)
            changed[old_group] = group
        if new is not None and (self._filter is None or self._filter.matches(new)):
            values = tuple(
                extract(new, item.steps) if isinstance(item, FieldInput) else None
                for item in self._aggregation.inputs
            )
            group_key = self._aggregation.group_key(values)
            joined = self._groups.get(group_key)
            if joined is None:
                joined = self._groups[group_key] = _Group(self._aggregation.accumulator(exact=True))
            joined.members[key] = values
            joined.accumulator.add(values)
            self._of_record[key] = group_key
            changed[group_key] = joined
        out: dict[GroupKey, Any] = {}
        for group_key, group in changed.items():
            if group.members:
                out[group_key] = group.accumulator.result()
            else:
                del self._groups[group_key]
                out[group_key] = None
        return out

    def results(self) -> dict[GroupKey, Any]:
        """Every group's output message."""
        return {key: group.accumulator.result() for key, group in self._groups.items()}

    def load(self, records: Iterable[tuple[bytes, Mapping[str, Any]]]) -> None:
        """Build the groups from a topic's current records (a view defined after the data
        exists, or rebuilt), in the order given."""
        for key, message in records:
            self.apply(key, message)
