"""Views of an AMPS ``<SOW>`` section (seed 002 SOW/View; ``ViewDefinition`` is a synonym),
parsed and validated.

Contract: :func:`read_view` returns a :class:`~processor.topology.model.ViewSpec`, or raises
:class:`~processor.errors.TopologyError` naming the file and the element path
(``AMPSConfig/SOW/View[1]/Projection/Field[2]``), what is wrong and what is allowed.
Nothing here serves a view (issue 21): ``sow serve`` refuses a topology that has one.

* ``Name`` (or ``Topic``), ``MessageType`` (not binary), ``UnderlyingTopic``,
  ``Projection`` and ``Grouping`` are required; ``HashIndex`` may repeat, every other
  element is given once.
* ``UnderlyingTopic`` holds one topic (``ORDERS`` or ``[json].[ORDERS]``) or ``Join``
  elements, each ``[A]./f = [B]./g`` between two different topics. What a view reads is
  a SOW topic, view, conflated topic or queue defined before it, not binary, not a
  Pattern topic.
* Projection fields are compiled with the grouping (aggregates, functions, targets; no
  output field written twice); a qualified identifier (``[ORDERS]./Tick``) names a topic
  the view reads, with its message type when given. ``Filter`` only without a Join.
* ``Conflation`` is none or inline, ``JoinNullEquivalency`` enabled or disabled;
  ``FileName`` is unused, as in AMPS.
"""

from __future__ import annotations

import dataclasses
import logging
import xml.etree.ElementTree as ET
from typing import Any

from processor.errors import ExpressionError, ParseError
from processor.expr import ast, clauses, parser
from processor.expr.aggregation import Aggregation
from processor.expr.qualified import map_identifiers, unqualify
from processor.topology.amps_entries import (
    QUEUES,
    Catalog,
    Known,
    check_expression,
    entry_groups,
    entry_type,
    refuse_binary,
    resolve,
    topic_ref,
)
from processor.topology.amps_reader import AmpsReader, Child
from processor.topology.model import (
    JoinSpec,
    TopicRef,
    UnusedOption,
    ViewConflation,
    ViewSpec,
)
from processor.topology.quantities import parse_choice

_log = logging.getLogger(__name__)

# fmt: off
ELEMENTS = (
    "Name", "Topic", "MessageType", "UnderlyingTopic", "Projection", "Grouping", "KeyDomain",
    "Conflation", "Filter", "HashIndex", "JoinNullEquivalency", "FileName",
)
# fmt: on
_READS = ("Topic", "View", "ConflatedTopic", *QUEUES)
_FILE_NAME = (
    "unused, as in AMPS (its documentation says so): a view's state will live with the "
    "processor that computes it"
)


def _field_path(identifier: ast.Identifier) -> str:
    if identifier.steps and all(isinstance(step, str) for step in identifier.steps):
        return "/" + "/".join(str(step) for step in identifier.steps)
    return identifier.path


class _Qualifiers:
    """Checks the qualified identifiers of a view's expressions against the topics it
    reads, and rewrites them for the compiler: unqualified for a view of one topic, under
    a step named ``[TOPIC]`` for a join (so two topics' ``/x`` stay apart)."""

    def __init__(self, reader: AmpsReader, topics: dict[str, Known], joined: bool) -> None:
        self.reader = reader
        self.topics = topics
        self.joined = joined
        self.where = ""

    def at(self, where: str) -> _Qualifiers:
        self.where = where
        return self

    def __call__(self, node: ast.Node) -> Any:
        if isinstance(node, ast.Identifier):
            if not node.qualifiers:
                return node
            name = node.qualifiers[-1]
            known = self.topics.get(name)
            if known is None:
                self.reader.fail(
                    f"[{'].['.join(node.qualifiers)}]{node.path} names {name!r}, which this "
                    f"view does not read; it reads: {', '.join(self.topics)}",
                    self.where,
                )
            if len(node.qualifiers) == 2:
                qualified = self.reader.message_type(node.qualifiers[0], self.where)
                if qualified != (known.message_type, known.schema):
                    self.reader.fail(
                        f"[{node.qualifiers[0]}].[{name}]: {name!r} has MessageType "
                        f"{known.message_type}",
                        self.where,
                    )
            return unqualify(node, self.joined)
        return map_identifiers(node, self)


def _join(reader: AmpsReader, catalog: Catalog, item: Child, order: int) -> JoinSpec:
    element, where = item
    text = reader.text(element, where)
    shape = "write [TOPIC]./field = [OTHER]./field (a Join is not an expression)"
    try:
        node = parser.parse(text)
    except ParseError as exc:
        reader.fail(f"<Join> is not valid: {exc}; {shape}", where)
    if not (
        isinstance(node, ast.Binary)
        and node.op == "="
        and isinstance(node.left, ast.Identifier)
        and isinstance(node.right, ast.Identifier)
    ):
        reader.fail(f"a <Join> relates two fields with '='; {shape}", where)
    sides: list[tuple[TopicRef, str]] = []
    for identifier in (node.left, node.right):
        if not identifier.qualifiers or identifier.state is not None:
            reader.fail(f"{identifier.path!r} in <Join> names no topic; {shape}", where)
        qualifiers = identifier.qualifiers
        ref = TopicRef(qualifiers[-1], qualifiers[0] if len(qualifiers) == 2 else None)
        known = resolve(reader, catalog, ref, ("View", where, order), _READS)
        refuse_binary(reader, known, "Join", where)
        if known.pattern:
            reader.fail(f"{ref.name!r} is a Pattern topic, which a view cannot read", where)
        sides.append((ref, _field_path(identifier)))
    if sides[0][0].name == sides[1][0].name:
        reader.fail(f"a <Join> relates two topics; both sides read {sides[0][0].name!r}", where)
    return JoinSpec(text, sides[0][0], sides[0][1], sides[1][0], sides[1][1])


def _underlying(
    reader: AmpsReader, catalog: Catalog, item: Child, order: int
) -> tuple[tuple[TopicRef, ...], tuple[JoinSpec, ...], dict[str, Known]]:
    """A view's topics, joins, and the definitions of the topics, by name."""
    element, where = item
    if not len(element):
        ref = topic_ref(reader.text(element, where))
        read = resolve(reader, catalog, ref, ("View", where, order), _READS)
        refuse_binary(reader, read, "View", where)
        if read.pattern:
            reader.fail(
                f"{ref.name!r} is a Pattern (regular expression) topic, which a view cannot "
                "read (as in AMPS)",
                where,
            )
        return (ref,), (), {ref.name: read}
    if (element.text or "").strip() or any((child.tail or "").strip() for child in element):
        reader.fail("<UnderlyingTopic> holds a topic name or <Join> elements, not both", where)
    items = reader.group(element, where, ("Join",)).get("Join", [])
    joins = tuple(_join(reader, catalog, join, order) for join in items)
    refs: dict[str, TopicRef] = {}
    for join in joins:
        refs.setdefault(join.left.name, join.left)
        refs.setdefault(join.right.name, join.right)
    known = {name: catalog.by_name[name] for name in refs}
    return tuple(refs.values()), joins, known


def _grouping(
    reader: AmpsReader, item: Child, rewrite: _Qualifiers
) -> tuple[tuple[str, ...], tuple[ast.Identifier, ...]]:
    texts: list[str] = []
    identifiers: list[ast.Identifier] = []
    hint = ", each a field path such as /region"
    for field_el, field_where in reader.field_elements(*item, hint):
        text = reader.text(field_el, field_where)
        try:
            parsed = tuple(rewrite.at(field_where)(i) for i in clauses.parse_grouping(text))
            Aggregation((), parsed, "", text)
        except (ParseError, ExpressionError) as exc:
            reader.fail(f"<Field> is not a valid grouping field: {exc}", field_where)
        texts.append(text)
        identifiers.extend(parsed)
    return tuple(texts), tuple(identifiers)


def _projection(
    reader: AmpsReader,
    item: Child,
    rewrite: _Qualifiers,
    grouping: tuple[ast.Identifier, ...],
    grouping_text: str,
) -> tuple[str, ...]:
    texts: list[str] = []
    targets: dict[tuple[ast.Step, ...], str] = {}
    hint = ", each a field such as /region or SUM(/qty) AS /total"
    for field_el, field_where in reader.field_elements(*item, hint):
        text = reader.text(field_el, field_where)
        try:
            fields = tuple(
                dataclasses.replace(f, expr=rewrite.at(field_where)(f.expr))
                for f in clauses.parse_projection(text)
            )
            Aggregation(fields, grouping, text, grouping_text)
        except (ParseError, ExpressionError) as exc:
            reader.fail(f"<Field> is not a valid projection field: {exc}", field_where)
        for field in fields:
            first = targets.setdefault(field.target.steps, field_where)
            if first != field_where:
                reader.fail(
                    f"{field.target.path} is written by two projection fields (the other is "
                    f"{first}); each output field is projected once",
                    field_where,
                )
        texts.append(text)
    return tuple(texts)


def read_view(
    reader: AmpsReader, element: ET.Element, where: str, order: int, catalog: Catalog
) -> ViewSpec:
    """One ``<View>`` (module doc)."""
    groups, name = entry_groups(reader, element, where, ELEMENTS, ("HashIndex",))
    typed = entry_type(reader, groups)
    if typed is None:
        reader.fail(
            "a <View> needs <MessageType>, the type of the messages it produces "
            "(json, fix, nvfix, or a declared MessageType)",
            where,
        )
    if typed[0] == "binary":
        reader.fail(
            "a view cannot have MessageType binary (as in AMPS): it builds its messages "
            "field by field",
            typed[2],
        )
    for required in ("UnderlyingTopic", "Projection", "Grouping"):
        if required not in groups:
            reader.fail(f"a <View> needs <{required}>", where)
    refs, joins, known = _underlying(reader, catalog, groups["UnderlyingTopic"][0], order)
    rewrite = _Qualifiers(reader, known, joined=bool(joins))
    grouping_texts, grouping = _grouping(reader, groups["Grouping"][0], rewrite)
    fields: dict[str, Any] = {
        "grouping": grouping_texts,
        "projection": _projection(
            reader, groups["Projection"][0], rewrite, grouping, ", ".join(grouping_texts)
        ),
    }
    if "Filter" in groups:
        item = groups["Filter"][0]
        if joins:
            reader.fail(
                "<Filter> is allowed only in a view of one UnderlyingTopic, not with <Join> "
                "(as in AMPS); filter in the projection with IF instead",
                item[1],
            )
        fields["filter"] = check_expression(reader, item, "filter", rewrite.at(item[1]))
    if "KeyDomain" in groups:
        fields["key_domain"] = reader.text(*groups["KeyDomain"][0])
    if "Conflation" in groups:
        fields["conflation"] = ViewConflation(
            reader.value(
                *groups["Conflation"][0],
                lambda v: parse_choice(v, ("none", "inline"), "Conflation"),
            )
        )
    if "JoinNullEquivalency" in groups:
        choice = reader.value(
            *groups["JoinNullEquivalency"][0],
            lambda v: parse_choice(v, ("enabled", "disabled"), "JoinNullEquivalency"),
        )
        fields["join_null_equivalency"] = choice == "enabled"
    fields["hash_indexes"] = tuple(reader.hash_index(*i) for i in groups.get("HashIndex", []))
    if "FileName" in groups:
        file_el, file_where = groups["FileName"][0]
        fields["unused_options"] = (
            UnusedOption("FileName", reader.text(file_el, file_where), _FILE_NAME),
        )
        _log.info("%s: %s: <FileName> is %s", reader.source, file_where, _FILE_NAME)
    return ViewSpec(
        name=name,
        message_type=typed[0],
        schema=typed[1],
        underlying=refs,
        joins=joins,
        source=reader.source,
        where=where,
        **fields,
    )
