"""The rules of a view that every topology format shares (seed 002 SOW/View), used by the
AMPS XML loader (:mod:`processor.topology.amps_views`) and the YAML loader
(:mod:`processor.topology.yaml_entries`): each takes a view's values from its format, with
where each was written, and :func:`view` checks them and builds the
:class:`~processor.topology.model.ViewSpec`, reporting problems through the format's
:class:`~processor.topology.entry_rules.Dialect`.

* A view reads one topic (``ORDERS`` or ``[json].[ORDERS]``) or the topics of its joins,
  each ``[A]./f = [B]./g`` between two different topics, every topic related to the others
  (:mod:`processor.topology.join_plan`). What it reads is defined before
  it, one of the kinds the format allows, not binary, not a Pattern topic.
* Its message type is not binary. Projection fields are compiled with the grouping
  (aggregates, functions, targets; no output field written twice); a qualified identifier
  (``[ORDERS]./Tick``) names a topic the view reads, with its message type when given, and
  is made plain for the compiler only (the spec keeps the texts as written). A filter only
  without joins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from processor.errors import ExpressionError, JoinPlanError, ParseError
from processor.expr import ast, clauses, parser
from processor.expr.aggregation import Aggregation
from processor.expr.qualified import map_identifiers, unqualify
from processor.topology.entry_rules import (
    Catalog,
    Dialect,
    Item,
    Known,
    expression,
    refuse_binary,
    resolve,
    same_type,
    topic_ref,
)
from processor.topology.join_plan import join_plan
from processor.topology.message_types import TRAITS
from processor.topology.message_types import traits as message_traits
from processor.topology.model import JoinSpec, TopicRef, ViewSpec

_SHAPE = "write [TOPIC]./field = [OTHER]./field (a join is not an expression)"


@dataclasses.dataclass(frozen=True, slots=True)
class ViewItems:
    """A view's values as written, each with where it was written: one ``underlying``
    topic or ``joins``; ``typed`` is (message type, schema, where)."""

    typed: tuple[str, str | None, str]
    underlying: Item | None
    joins: Sequence[Item]
    projection: Sequence[Item]
    grouping: Sequence[Item]
    filter: Item | None = None


def _field_path(identifier: ast.Identifier) -> str:
    if identifier.steps and all(isinstance(step, str) for step in identifier.steps):
        return "/" + "/".join(str(step) for step in identifier.steps)
    return identifier.path


class Qualifiers:
    """Checks the qualified identifiers of a view's expressions against the topics it
    reads, and rewrites them for the compiler: unqualified for a view of one topic, under
    a step named ``[TOPIC]`` for a join (so two topics' ``/x`` stay apart)."""

    def __init__(self, d: Dialect, topics: dict[str, Known], joined: bool) -> None:
        self.d = d
        self.topics = topics
        self.joined = joined
        self.where = ""

    def at(self, where: str) -> Qualifiers:
        self.where = where
        return self

    def __call__(self, node: ast.Node) -> Any:
        if isinstance(node, ast.Identifier):
            if not node.qualifiers:
                return node
            name = node.qualifiers[-1]
            known = self.topics.get(name)
            if known is None:
                self.d.fail(
                    f"[{'].['.join(node.qualifiers)}]{node.path} names {name!r}, which this "
                    f"view does not read; it reads: {', '.join(self.topics)}",
                    self.where,
                )
            if len(node.qualifiers) == 2:
                qualified = self.d.message_type(node.qualifiers[0], self.where)
                if not same_type(qualified, known):
                    self.d.fail(
                        f"[{node.qualifiers[0]}].[{name}]: {name!r} has "
                        f"{self.d.word('MessageType')} {known.message_type}, not "
                        f"{node.qualifiers[0]}",
                        self.where,
                    )
            return unqualify(node, self.joined)
        return map_identifiers(node, self)


def _readable(
    d: Dialect, catalog: Catalog, ref: TopicRef, item: tuple[str, str, int], kinds: tuple[str, ...]
) -> Known:
    """What a view reads: one of ``kinds``, parsed (not binary), not a Pattern topic;
    ``item`` is (the element that names it, where, the view's position)."""
    element, where, order = item
    known = resolve(d, catalog, ref, ("View", where, order), kinds)
    refuse_binary(d, known, element, where)
    if known.pattern:
        d.fail(
            f"{ref.name!r} is a Pattern (regular expression) topic, which a view cannot read "
            "(as in AMPS)",
            where,
        )
    return known


def _join(d: Dialect, catalog: Catalog, item: Item, order: int, kinds: tuple[str, ...]) -> JoinSpec:
    text, where = item
    join = d.label("Join")
    try:
        node = parser.parse(text)
    except ParseError as exc:
        d.fail(f"the {join} is not valid: {exc}; {_SHAPE}", where)
    if not (
        isinstance(node, ast.Binary)
        and node.op == "="
        and isinstance(node.left, ast.Identifier)
        and isinstance(node.right, ast.Identifier)
    ):
        d.fail(f"a {join} relates two fields with '='; {_SHAPE}", where)
    sides: list[tuple[TopicRef, str]] = []
    for identifier in (node.left, node.right):
        if not identifier.qualifiers or identifier.state is not None:
            d.fail(f"{identifier.path!r} in the {join} names no topic; {_SHAPE}", where)
        qualifiers = identifier.qualifiers
        ref = TopicRef(qualifiers[-1], qualifiers[0] if len(qualifiers) == 2 else None)
        _readable(d, catalog, ref, ("Join", where, order), kinds)
        sides.append((ref, _field_path(identifier)))
    if sides[0][0].name == sides[1][0].name:
        d.fail(f"a {join} relates two topics; both sides read {sides[0][0].name!r}", where)
    return JoinSpec(text, sides[0][0], sides[0][1], sides[1][0], sides[1][1])


def _reads(
    d: Dialect, catalog: Catalog, items: ViewItems, order: int, kinds: tuple[str, ...]
) -> tuple[tuple[TopicRef, ...], tuple[JoinSpec, ...], dict[str, Known]]:
    """A view's topics, joins, and the definitions of the topics, by name."""
    if items.underlying is not None:
        text, where = items.underlying
        ref = topic_ref(text)
        return (ref,), (), {ref.name: _readable(d, catalog, ref, ("View", where, order), kinds)}
    joins = tuple(_join(d, catalog, item, order, kinds) for item in items.joins)
    try:
        join_plan(joins)
    except JoinPlanError as exc:
        unrelated = [join.text for join in joins].index(exc.join)
        d.fail(f"the {d.label('Join')} {exc}", items.joins[unrelated][1])
    refs: dict[str, TopicRef] = {}
    for join in joins:
        refs.setdefault(join.left.name, join.left)
        refs.setdefault(join.right.name, join.right)
    known = {name: catalog.by_name[name] for name in refs}
    return tuple(refs.values()), joins, known


def _grouping(
    d: Dialect, items: Sequence[Item], rewrite: Qualifiers
) -> tuple[tuple[str, ...], tuple[ast.Identifier, ...]]:
    texts: list[str] = []
    identifiers: list[ast.Identifier] = []
    for text, where in items:
        try:
            parsed = tuple(rewrite.at(where)(i) for i in clauses.parse_grouping(text))
            Aggregation((), parsed, "", text)
        except (ParseError, ExpressionError) as exc:
            d.fail(f"the {d.label('Field')} is not a valid grouping field: {exc}", where)
        texts.append(text)
        identifiers.extend(parsed)
    return tuple(texts), tuple(identifiers)


def _projection(
    d: Dialect,
    items: Sequence[Item],
    rewrite: Qualifiers,
    grouping: tuple[ast.Identifier, ...],
    grouping_text: str,
    message_type: str,
) -> tuple[str, ...]:
    texts: list[str] = []
    targets: dict[tuple[ast.Step, ...], str] = {}
    for text, where in items:
        try:
            fields = tuple(
                dataclasses.replace(f, expr=rewrite.at(where)(f.expr))
                for f in clauses.parse_projection(text)
            )
            Aggregation(fields, grouping, text, grouping_text)
        except (ParseError, ExpressionError) as exc:
            d.fail(f"the {d.label('Field')} is not a valid projection field: {exc}", where)
        for field in fields:
            if message_traits(message_type).flat and len(field.target.steps) > 1:
                d.fail(
                    f"{field.target.path} is a nested field, which a {message_type} message "
                    f"cannot carry (its fields are flat); project to a single name such as "
                    f"/{field.target.steps[-1]}",
                    where,
                )
            first = targets.setdefault(field.target.steps, where)
            if first != where:
                d.fail(
                    f"{field.target.path} is written by two projection fields (the other is "
                    f"{first}); each output field is projected once",
                    where,
                )
        texts.append(text)
    return tuple(texts)


def view(
    d: Dialect,
    catalog: Catalog,
    entry: tuple[str, str, int],
    items: ViewItems,
    kinds: tuple[str, ...],
    **options: Any,
) -> ViewSpec:
    """The view ``entry`` (its name, where it is defined, its position) of ``items``,
    reading only ``kinds``; ``options`` are the spec's other fields (module doc)."""
    name, where, order = entry
    message_type, schema, type_where = items.typed
    if not message_traits(message_type).view_output:
        d.fail(
            f"a view cannot have {d.word('MessageType')} {message_type} (as in AMPS): it "
            "builds its messages field by field; allowed: "
            + ", ".join(t.name for t in TRAITS.values() if t.view_output),
            type_where,
        )
    refs, joins, known = _reads(d, catalog, items, order, kinds)
    rewrite = Qualifiers(d, known, joined=bool(joins))
    grouping_texts, grouping = _grouping(d, items.grouping, rewrite)
    projection = _projection(
        d, items.projection, rewrite, grouping, ", ".join(grouping_texts), message_type
    )
    if items.filter is not None:
        filter_where = items.filter[1]
        if joins:
            d.fail(
                f"{d.label('Filter')} is allowed only in a view of one "
                f"{d.word('UnderlyingTopic')}, not with {d.label('Join')}s (as in AMPS); "
                "filter in the projection with IF instead",
                filter_where,
            )
        options["filter"] = expression(
            d, items.filter, "Filter", "filter", rewrite.at(filter_where)
        )
    return ViewSpec(
        name=name,
        message_type=message_type,
        schema=schema,
        underlying=refs,
        joins=joins,
        projection=projection,
        grouping=grouping_texts,
        source=d.source,
        where=where,
        **options,
    )
