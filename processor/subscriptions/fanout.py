"""Fan-out: which subscriptions a change concerns, with as little filter work as possible.

Per SOW topic, subscriptions are grouped by filter text (:class:`FilterGroup`): identical
filters share one compiled expression and one evaluation per change. A topic's groups
(:class:`TopicIndex`) are found for a change in three ways:

* **field index**: a group with a ``field = literal`` / ``field IN (literals)`` conjunct
  of a top-level AND is filed under the text :func:`~processor.replica.table.index_text`
  gives each literal (equal exactly when the expression language's ``=`` says so). A
  change's candidates are the groups filed under its new message's value of an indexed
  field, and, for groups whose subscriptions remember what they hold, its old message's
  (a record leaving their focus must reach them). The filter is then evaluated for each
  candidate, so the index only narrows which filters are evaluated.
* **range families**: groups whose whole filter is ``<expression> <op> <number>`` (op one
  of ``> >= < <=``) with the same expression text and operator form a
  :class:`RangeFamily`. The expression is evaluated once per change and the matching
  groups are a slice of the groups sorted by their number (a bisection), so 1,000
  thresholds on ``/price * /qty`` cost one evaluation, not 1,000. A value that is not a
  plain number (NULL, a string, NaN, a boolean) falls back to each group's own filter,
  so results never differ from evaluating the filters one by one.
* everything else is evaluated for every change.

Not thread-safe: the hub's lock guards every call.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Any

from processor.expr import ContextInput, Expression, compile_node, field_getter
from processor.expr import ast as expr_ast
from processor.expr.ast import Step, Value
from processor.query.planner import exact_matches
from processor.replica.table import index_text, index_texts
from processor.subscriptions.subscription import Subscription

#: A group filed under a field with more literals than this is left unindexed.
MAX_INDEXED_VALUES = 1024

#: Comparison operators a range family accepts.
RANGE_OPS = frozenset((">", ">=", "<", "<="))

#: (operand text, operator): the identity of a range family.
FamilyKey = tuple[str, str]


def _needs_context(expression: Expression | None) -> bool:
    return expression is not None and any(isinstance(i, ContextInput) for i in expression.inputs)


def _plain_number(value: object) -> bool:
    """An int or float that compares as numbers do (not a bool, not NaN)."""
    kind = value.__class__
    return kind is int or (kind is float and not math.isnan(value))  # type: ignore[arg-type]


class FilterGroup:
    """The subscriptions of one topic that share one filter text.

    ``tracking`` counts the subscriptions that remember the records they hold (OOF,
    sow_and_subscribe, no_empties): only they need changes that do not match.
    """

    __slots__ = (
        "expression",
        "family",
        "field",
        "needs_context",
        "subscriptions",
        "text",
        "threshold",
        "tracking",
        "values",
    )

    def __init__(self, text: str, expression: Expression | None) -> None:
        self.text = text
        self.expression = expression
        self.needs_context = _needs_context(expression)
        self.subscriptions: dict[int, Subscription] = {}
        self.tracking = 0
        #: The indexed conjunct: field steps and the texts a matching value has one of
        #: (None: unindexed).
        self.field: tuple[Step, ...] | None = None
        self.values: frozenset[str] = frozenset()
        #: The range family this group belongs to and its number in it (None: none).
        self.family: FamilyKey | None = None
        self.threshold: int | float = 0
        if expression is None:
            return
        fixed = exact_matches(expression.node, index_text)
        if fixed:
            steps, texts = min(fixed.items(), key=lambda item: len(item[1]))
            if len(texts) <= MAX_INDEXED_VALUES:
                self.field, self.values = steps, frozenset(texts)
                return
        node = expression.node
        if (
            isinstance(node, expr_ast.Binary)
            and node.op in RANGE_OPS
            and isinstance(node.right, expr_ast.Literal)
            and _plain_number(node.right.value)
            and not isinstance(node.left, expr_ast.Literal)
            and 0 <= node.op_pos <= len(text)
        ):
            operand = text[: node.op_pos].strip()
            if operand:
                self.family = (operand, node.op)
                self.threshold = node.right.value

    def add(self, subscription: Subscription) -> None:
        self.subscriptions[subscription.number] = subscription
        if subscription.tracks_focus:
            self.tracking += 1

    def remove(self, subscription: Subscription) -> None:
        removed = self.subscriptions.pop(subscription.number, None)
        if removed is not None and subscription.tracks_focus:
            self.tracking -= 1

    def matches(self, message: Any, context: Callable[[], Any]) -> bool:
        """True when the filter matches a message (``context()`` gives its per-record
        context, computed only for filters that read it)."""
        expression = self.expression
        if expression is None:
            return True
        return expression.matches(
            message, context() if self.needs_context else None, overrun="subscription"
        )


class RangeFamily:
    """Groups ``<operand> <op> <number>`` sharing operand text and operator, sorted by
    their number (see the module doc)."""

    __slots__ = ("groups", "needs_context", "op", "operand", "thresholds")

    def __init__(self, key: FamilyKey, node: expr_ast.Binary) -> None:
        self.operand = compile_node(node.left, key[0])
        _ = self.operand.source  # generate its code now, not in the dispatcher
        self.needs_context = _needs_context(self.operand)
        self.op = key[1]
        self.thresholds: list[int | float] = []
        self.groups: list[FilterGroup] = []

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, group: FilterGroup) -> None:
        at = bisect.bisect_right(self.thresholds, group.threshold)
        self.thresholds.insert(at, group.threshold)
        self.groups.insert(at, group)

    def remove(self, group: FilterGroup) -> None:
        at = self.groups.index(group)
        del self.thresholds[at]
        del self.groups[at]

    def split(
        self, message: Any, context: Callable[[], Any]
    ) -> tuple[list[FilterGroup], list[FilterGroup]]:
        """(groups whose filter matches the message, groups whose filter does not)."""
        value = self.operand(message, context() if self.needs_context else None)
        groups = self.groups
        if not _plain_number(value):
            matched = [g for g in groups if g.matches(message, context)]
            return matched, [g for g in groups if g not in matched]
        op = self.op
        if op == ">":  # threshold < value
            at = bisect.bisect_left(self.thresholds, value)
            return groups[:at], groups[at:]
        if op == ">=":  # threshold <= value
            at = bisect.bisect_right(self.thresholds, value)
            return groups[:at], groups[at:]
        if op == "<":  # threshold > value
            at = bisect.bisect_right(self.thresholds, value)
            return groups[at:], groups[:at]
        at = bisect.bisect_left(self.thresholds, value)  # "<=": threshold >= value
        return groups[at:], groups[:at]


class TopicIndex:
    """The filter groups of one SOW topic, indexed by field values and range families."""

    def __init__(self) -> None:
        self.groups: dict[str, FilterGroup] = {}
        self.unindexed: dict[str, FilterGroup] = {}
        self.families: dict[FamilyKey, RangeFamily] = {}
        #: field steps -> (value getter, value text -> groups by filter text)
        self.by_field: dict[
            tuple[Step, ...], tuple[Callable[[Any], Value], dict[str, dict[str, FilterGroup]]]
        ] = {}
        #: Subscriptions that remember what they hold, over all groups.
        self.tracking = 0

    def __bool__(self) -> bool:
        return bool(self.groups)

    @property
    def reads_messages(self) -> bool:
        """Whether routing a change reads its message: False when every group's filter
        is empty (they all match), so the dispatcher need not decode it."""
        return bool(self.by_field or self.families) or any(
            group.expression is not None for group in self.unindexed.values()
        )

    def group(self, text: str, compile_filter: Callable[[], Expression | None]) -> FilterGroup:
        """The group of a filter text, created (and indexed) on first use."""
        found = self.groups.get(text)
        if found is not None:
            return found
        group = FilterGroup(text, compile_filter())
        self.groups[text] = group
        if group.field is not None:
            _, buckets = self.by_field.setdefault(group.field, (field_getter(group.field), {}))
            for value in group.values:
                buckets.setdefault(value, {})[text] = group
        elif group.family is not None:
            family = self.families.get(group.family)
            if family is None:
                assert group.expression is not None
                node = group.expression.node
                assert isinstance(node, expr_ast.Binary)
                family = self.families[group.family] = RangeFamily(group.family, node)
            family.add(group)
        else:
            self.unindexed[text] = group
        return group

    def subscribe(self, group: FilterGroup, subscription: Subscription) -> None:
        """File a subscription in one of this index's groups."""
        group.add(subscription)
        if subscription.tracks_focus:
            self.tracking += 1

    def unsubscribe(self, group: FilterGroup, subscription: Subscription) -> None:
        """Remove a subscription; its group goes when it has no subscriptions left."""
        if subscription.number in group.subscriptions and subscription.tracks_focus:
            self.tracking -= 1
        group.remove(subscription)
        self._discard(group)

    def _discard(self, group: FilterGroup) -> None:
        if group.subscriptions or self.groups.get(group.text) is not group:
            return
        del self.groups[group.text]
        if group.field is not None:
            _, buckets = self.by_field[group.field]
            for value in group.values:
                bucket = buckets.get(value)
                if bucket is not None:
                    bucket.pop(group.text, None)
                    if not bucket:
                        del buckets[value]
            if not buckets:
                del self.by_field[group.field]
        elif group.family is not None:
            family = self.families[group.family]
            family.remove(group)
            if not family:
                del self.families[group.family]
        else:
            self.unindexed.pop(group.text, None)

    def route(
        self, new: Any, old: Any, context: Callable[[], Any], changed: bool
    ) -> tuple[list[FilterGroup], list[FilterGroup]]:
        """The groups a change concerns: (groups whose filter matches the new message,
        groups that do not match and hold subscriptions that track their focus).

        ``new``/``old`` are the decoded messages after and before the change; ``changed``
        is False when there is no new message (a delete): nothing matches then.
        ``context()`` gives the new message's per-record context.
        """
        matched: list[FilterGroup] = []
        unmatched: list[FilterGroup] = []
        tracking = self.tracking > 0
        candidates: dict[str, FilterGroup] = dict(self.unindexed)
        for get, buckets in self.by_field.values():
            if changed:
                for text in index_texts(get(new)):
                    bucket = buckets.get(text)
                    if bucket:
                        candidates.update(bucket)
            if tracking and old is not None:
                for text in index_texts(get(old)):
                    bucket = buckets.get(text)
                    if bucket:
                        for name, group in bucket.items():
                            if group.tracking:
                                candidates[name] = group
        for group in candidates.values():
            if changed and group.matches(new, context):
                matched.append(group)
            elif group.tracking:
                unmatched.append(group)
        for family in self.families.values():
            if changed:
                hits, misses = family.split(new, context)
                matched += hits
            else:
                misses = family.groups
            if tracking:
                unmatched += [g for g in misses if g.tracking]
        return matched, unmatched
