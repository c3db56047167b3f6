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
  the view reads, with its message type when given. ``Filter`` only without a Join. These
  rules are the YAML format's too (:mod:`processor.topology.view_rules`).
* ``Conflation`` is none or inline, ``JoinNullEquivalency`` enabled or disabled;
  ``FileName`` is unused, as in AMPS.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from typing import Any

from processor.topology.amps_entries import entry_groups, entry_type
from processor.topology.amps_reader import AmpsReader, Child
from processor.topology.entry_rules import QUEUES, Catalog, Item
from processor.topology.model import UnusedOption, ViewConflation, ViewSpec
from processor.topology.quantities import parse_choice
from processor.topology.view_rules import ViewItems, view

_log = logging.getLogger(__name__)

# fmt: off
ELEMENTS = (
    "Name", "Topic", "MessageType", "UnderlyingTopic", "Projection", "Grouping", "KeyDomain",
    "Conflation", "Filter", "HashIndex", "JoinNullEquivalency", "FileName",
)
# fmt: on
#: What a view may read.
READS = ("Topic", "View", "ConflatedTopic", *QUEUES)
_FILE_NAME = (
    "unused, as in AMPS (its documentation says so): a view's state will live with the "
    "processor that computes it"
)


def _underlying(reader: AmpsReader, item: Child) -> tuple[Item | None, list[Item]]:
    """A view's one topic, or its joins."""
    element, where = item
    if not len(element):
        return (reader.text(element, where), where), []
    if (element.text or "").strip() or any((child.tail or "").strip() for child in element):
        reader.fail("<UnderlyingTopic> holds a topic name or <Join> elements, not both", where)
    joins = reader.group(element, where, ("Join",)).get("Join", [])
    return None, [(reader.text(*join), join[1]) for join in joins]


def _fields(reader: AmpsReader, item: Child, hint: str) -> list[Item]:
    """The texts of a Projection's or Grouping's ``<Field>`` elements, with their paths."""
    return [(reader.text(*field), field[1]) for field in reader.field_elements(*item, hint)]


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
    for required in ("UnderlyingTopic", "Projection", "Grouping"):
        if required not in groups:
            reader.fail(f"a <View> needs <{required}>", where)
    underlying, joins = _underlying(reader, groups["UnderlyingTopic"][0])
    items = ViewItems(
        typed=typed,
        underlying=underlying,
        joins=joins,
        projection=_fields(
            reader, groups["Projection"][0], ", each a field such as /region or SUM(/qty) AS /total"
        ),
        grouping=_fields(reader, groups["Grouping"][0], ", each a field path such as /region"),
        filter=(reader.text(*groups["Filter"][0]), groups["Filter"][0][1])
        if "Filter" in groups
        else None,
    )
    fields: dict[str, Any] = {}
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
    return view(reader, catalog, (name, where, order), items, READS, **fields)
