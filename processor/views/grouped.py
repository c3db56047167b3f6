"""Groups of a view kept exact under every change: a record's old contribution is
retracted and its new one added (spec 2.7, seed 002 SOW/View).

A :class:`Group` holds its members' input values (the values of the aggregation's
inputs, per record) in update order, and an exact accumulator over them (retractable:
sums and counts, value multisets for MIN/MAX and COUNT DISTINCT); its latest member
supplies the non-aggregated projection fields, as an aggregated query over the same
records in the same order does.

:class:`GroupedView` is the whole computation in memory (one topic's records, grouped
and aggregated): the reference the processor's partitioned views
(:mod:`processor.views.partition`) are built from and tested against. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from processor.errors import RegexBudgetError
from processor.expr import Accumulator, Aggregation, Expression, compile_aggregation
from processor.expr import compile as compile_expression
from processor.expr.budget import count_overrun
from processor.views.contribution import GroupKey, Values, contribution


class Group:
    """One group's members and accumulator. ``where`` counts a regex overrun in the
    aggregates' arguments (:mod:`processor.expr.budget`): "view", or "subscription" for
    an aggregated subscription's groups."""

    __slots__ = ("accumulator", "members", "output", "touched", "where")

    def __init__(self, aggregation: Aggregation, where: str = "view") -> None:
        self.accumulator: Accumulator = aggregation.accumulator(exact=True)
        self.where = where
        #: Each member's input values by member id, oldest update first.
        self.members: dict[bytes, Values] = {}
        #: The output message last written for the group (the processor's view).
        self.output: bytes | None = None
        #: The transaction that last changed the group (the processor's view).
        self.touched = -1

    def retract(self, member: bytes) -> bool:
        """Take a member out; False when it was not in the group, or when a pattern in
        the aggregates' arguments overran its match budget (counted: the member stays)."""
        values = self.members.get(member)
        if values is None:
            return False
        last = next((v for m, v in reversed(self.members.items()) if m != member), None)
        try:
            self.accumulator.remove(values, last)
        except RegexBudgetError:
            count_overrun(self.where)
            return False
        del self.members[member]
        return True

    def upsert(self, member: bytes, values: Values) -> bool:
        """Put a member in (or replace it) as the group's latest update. False when a
        pattern in the aggregates' arguments overran its match budget (counted): the new
        values are left out, as a view's filter leaves out a record it overruns on (the
        member's old values are retracted if they can be)."""
        if member in self.members and not self.retract(member):
            return False
        try:
            self.accumulator.add(values)
        except RegexBudgetError:
            count_overrun(self.where)
            return False
        self.members[member] = values
        return True

    def result(self) -> dict[str, Any]:
        return self.accumulator.result()


class GroupedView:
    """One view's groups over one topic's records, in memory (see the module doc).
    ``where`` counts a regex overrun in the aggregates' arguments (see :class:`Group`)."""

    __slots__ = ("_aggregation", "_filter", "_groups", "_of_record", "_where")

    def __init__(
        self, aggregation: Aggregation, filter: Expression | None = None, where: str = "view"
    ) -> None:
        self._aggregation, self._filter, self._where = aggregation, filter, where
        self._groups: dict[GroupKey, Group] = {}
        #: Each record's group, for retracting it without its old message.
        self._of_record: dict[bytes, GroupKey] = {}

    @classmethod
    def compiled(
        cls, projection: str, grouping: str, filter_text: str | None = None
    ) -> GroupedView:
        """A view of a projection, grouping and filter given as text."""
        found = filter_text is not None and filter_text.strip()
        return cls(
            compile_aggregation(projection, grouping),
            compile_expression(filter_text) if found and filter_text else None,
        )

    @property
    def groups(self) -> int:
        return len(self._groups)

    def group(self, key: GroupKey) -> Group | None:
        return self._groups.get(key)

    def group_keys(self) -> list[GroupKey]:
        return list(self._groups)

    def apply(self, key: bytes, new: Mapping[str, Any] | None) -> dict[GroupKey, Any]:
        """Apply one record's change (``new`` None: deleted); return each group it changed
        with the group's output message, or None when the group is now empty."""
        found = None if new is None else contribution(self._aggregation, self._filter, new)
        out: dict[GroupKey, Any] = {}
        for group_key in self.place(key, found):
            group = self._groups.get(group_key)
            out[group_key] = None if group is None else group.result()
        return out

    def place(self, key: bytes, found: tuple[GroupKey, Values] | None) -> tuple[GroupKey, ...]:
        """Put record ``key``'s contribution (``found``: its group and values; None: it
        contributes nothing now) in place of its old one; return the groups it changed.
        A group left empty is dropped."""
        changed: tuple[GroupKey, ...] = ()
        old = self._of_record.pop(key, None)
        if old is not None:
            left = self._groups[old]
            left.retract(key)
            if not left.members:
                del self._groups[old]
            changed = (old,)
        if found is not None:
            group_key, values = found
            joined = self._groups.get(group_key)
            if joined is None:
                joined = self._groups[group_key] = Group(self._aggregation, self._where)
            joined.upsert(key, values)
            self._of_record[key] = group_key
            if group_key != old:
                changed = (*changed, group_key)
        return changed

    def results(self) -> dict[GroupKey, Any]:
        """Every group's output message."""
        return {key: group.result() for key, group in self._groups.items()}

    def load(self, records: Iterable[tuple[bytes, Mapping[str, Any]]]) -> None:
        """Build the groups from a topic's current records, in the order given."""
        for key, message in records:
            self.apply(key, message)
