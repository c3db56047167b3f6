"""Fan-out: which subscriptions a change must be checked against.

Per SOW topic, subscriptions are grouped by filter text (:class:`FilterGroup`): identical
filters share one compiled expression and one evaluation per change. Groups are indexed
(:class:`TopicIndex`) by one ``field = literal`` / ``field IN (literals)`` conjunct of a
top-level AND, filed under the text :func:`~processor.query.table.index_text` gives the
literal (equal exactly when the expression language's ``=`` says so). A change's
candidates are the groups filed under its new message's value of an indexed field, the
same for its old message (a record leaving a subscription's focus must reach it), and
the groups with no such conjunct. The filter is then evaluated for each candidate group,
so the index only narrows which filters are evaluated.

Not thread-safe: the hub's lock guards every call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from processor.expr import ContextInput, Expression, field_getter
from processor.expr.ast import Step, Value
from processor.query.planner import exact_matches
from processor.query.table import index_text, index_texts
from processor.subscriptions.subscription import Subscription

#: A group filed under a field with more literals than this is left unindexed.
MAX_INDEXED_VALUES = 1024


class FilterGroup:
    """The subscriptions of one topic that share one filter text."""

    __slots__ = ("expression", "field", "needs_context", "subscriptions", "text", "values")

    def __init__(self, text: str, expression: Expression | None) -> None:
        self.text = text
        self.expression = expression
        self.needs_context = expression is not None and any(
            isinstance(i, ContextInput) for i in expression.inputs
        )
        self.subscriptions: dict[int, Subscription] = {}
        #: The indexed conjunct: field steps and the texts a matching value has one of
        #: (None: unindexed).
        self.field: tuple[Step, ...] | None = None
        self.values: frozenset[str] = frozenset()
        if expression is not None:
            fixed = exact_matches(expression.node, index_text)
            if fixed:
                steps, texts = min(fixed.items(), key=lambda item: len(item[1]))
                if len(texts) <= MAX_INDEXED_VALUES:
                    self.field, self.values = steps, frozenset(texts)

    def matches(self, message: Any, context: Callable[[], Any]) -> bool:
        """True when the filter matches a message (``context()`` gives its per-record
        context, computed only for filters that read it)."""
        expression = self.expression
        if expression is None:
            return True
        return expression.matches(message, context() if self.needs_context else None)


class TopicIndex:
    """The filter groups of one SOW topic, indexed by field values."""

    def __init__(self) -> None:
        self.groups: dict[str, FilterGroup] = {}
        self.unindexed: dict[str, FilterGroup] = {}
        #: field steps -> (value getter, value text -> groups by filter text)
        self.by_field: dict[
            tuple[Step, ...], tuple[Callable[[Any], Value], dict[str, dict[str, FilterGroup]]]
        ] = {}

    def __bool__(self) -> bool:
        return bool(self.groups)

    def group(self, text: str, compile_filter: Callable[[], Expression | None]) -> FilterGroup:
        """The group of a filter text, created (and indexed) on first use."""
        found = self.groups.get(text)
        if found is not None:
            return found
        group = FilterGroup(text, compile_filter())
        self.groups[text] = group
        if group.field is None:
            self.unindexed[text] = group
        else:
            _, buckets = self.by_field.setdefault(group.field, (field_getter(group.field), {}))
            for value in group.values:
                buckets.setdefault(value, {})[text] = group
        return group

    def discard(self, group: FilterGroup) -> None:
        """Drop a group that has no subscriptions left."""
        if group.subscriptions or self.groups.get(group.text) is not group:
            return
        del self.groups[group.text]
        if group.field is None:
            self.unindexed.pop(group.text, None)
            return
        _, buckets = self.by_field[group.field]
        for value in group.values:
            bucket = buckets.get(value)
            if bucket is not None:
                bucket.pop(group.text, None)
                if not bucket:
                    del buckets[value]
        if not buckets:
            del self.by_field[group.field]

    def candidates(self, messages: Iterable[Any]) -> list[FilterGroup]:
        """The groups a change with these messages (new and/or old) may concern."""
        found: dict[str, FilterGroup] = dict(self.unindexed)
        for get, buckets in self.by_field.values():
            for message in messages:
                for text in index_texts(get(message)):
                    bucket = buckets.get(text)
                    if bucket:
                        found.update(bucket)
        return list(found.values())
