"""What every SOW entry of an AMPS configuration shares (its name and message type, its
expressions), and conflated topics (seed 002 SOW/ConflatedTopic). Views are in
:mod:`processor.topology.amps_views`, queues in :mod:`processor.topology.amps_queues`; the
rules the YAML format shares are in :mod:`processor.topology.entry_rules`.

Contract: :func:`read_conflated_topic` returns a frozen spec of one element, or raises
:class:`~processor.errors.TopologyError` naming the file and the element path
(``AMPSConfig/SOW/ConflatedTopic[1]/Interval``), what is wrong and what is allowed. Every
expression of an entry is compiled as it is read, so a file that loads has none that
fails later. Nothing here serves an entry (issues 21 and 22): ``sow serve`` refuses a
topology that has one (:mod:`processor.topology.unserved`).

* ``ViewDefinition`` is a synonym of ``View``, ``ReplicaDefinition`` of ``ConflatedTopic``,
  ``QueueDefinition`` of ``Queue``, and inside each ``Topic`` of ``Name``.
* What a view or a conflated topic reads (``UnderlyingTopic``, a ``Join``'s topics) is
  defined **before** it in the file, as AMPS requires
  (:func:`~processor.topology.entry_rules.resolve`); ``[type].[TOPIC]`` names a topic with
  its message type. References resolve within one file.
* A conflated topic reads a SOW topic, view or conflated topic by its exact name;
  ``MessageType``, when given, is the underlying topic's; ``Interval`` is 100ms or more
  (default 5s); ``TopicFormat`` (with ``%n``, no regular-expression characters) is
  required for a Pattern underlying topic and refused otherwise; ``Enrichment`` may not
  read ``OF PREVIOUS``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from processor.topology.amps_reader import AmpsReader, Child
from processor.topology.entry_rules import (
    Catalog,
    ConflatedItems,
    Item,
    conflated_topic,
    expression,
)
from processor.topology.model import ConflatedTopicSpec

#: Old element names, and the name each stands for.
SYNONYMS = {
    "TopicDefinition": "Topic",
    "ViewDefinition": "View",
    "ReplicaDefinition": "ConflatedTopic",
    "QueueDefinition": "Queue",
}
# fmt: off
CONFLATED_ELEMENTS = (
    "Name", "Topic", "UnderlyingTopic", "MessageType", "Interval", "Filter", "HashIndex",
    "TopicFormat", "Enrichment",
)
# fmt: on


def entry_groups(
    reader: AmpsReader,
    element: ET.Element,
    where: str,
    allowed: tuple[str, ...],
    repeatable: tuple[str, ...] = (),
) -> tuple[dict[str, list[Child]], str]:
    """An entry's children by tag (each once unless ``repeatable``) and its name."""
    groups = reader.group(element, where, allowed, repeatable)
    named = reader.synonym(groups, "Name", "Topic")
    if named is None:
        reader.fail(f"the <{element.tag}> has no <Name> (or pre-5.0 <Topic>); it needs one", where)
    return groups, reader.text(*named[0])


def entry_type(
    reader: AmpsReader, groups: dict[str, list[Child]]
) -> tuple[str, str | None, str] | None:
    """``(message type, schema, element path)`` of the entry's MessageType, if given."""
    if "MessageType" not in groups:
        return None
    element, where = groups["MessageType"][0]
    message_type, schema = reader.message_type(reader.text(element, where), where)
    return message_type, schema, where


def check_expression(reader: AmpsReader, item: Child, what: str, rewrite: Any = None) -> str:
    """The text of a filter or value expression element, compiled (a problem is an error
    at the element). ``rewrite`` maps the parsed tree before it is compiled."""
    return expression(reader, (reader.text(*item), item[1]), item[0].tag, what, rewrite)


def _item(reader: AmpsReader, groups: dict[str, list[Child]], tag: str) -> Item | None:
    """The text of the element ``tag`` and its path, if given."""
    if tag not in groups:
        return None
    element, where = groups[tag][0]
    return reader.text(element, where), where


def read_conflated_topic(
    reader: AmpsReader, element: ET.Element, where: str, order: int, catalog: Catalog
) -> ConflatedTopicSpec:
    """One ``<ConflatedTopic>`` (module doc)."""
    groups, name = entry_groups(reader, element, where, CONFLATED_ELEMENTS, ("HashIndex",))
    underlying = _item(reader, groups, "UnderlyingTopic")
    if underlying is None:
        reader.fail(
            "a <ConflatedTopic> needs <UnderlyingTopic>: the exact name of a SOW topic, view "
            "or conflated topic defined before it",
            where,
        )
    hash_indexes = groups.get("HashIndex")
    enrichment = groups.get("Enrichment")
    items = ConflatedItems(
        underlying=underlying,
        typed=entry_type(reader, groups),
        interval=_item(reader, groups, "Interval"),
        filter=_item(reader, groups, "Filter"),
        hash_indexes=None
        if hash_indexes is None
        else (tuple(reader.hash_index(*i) for i in hash_indexes), hash_indexes[0][1]),
        topic_format=_item(reader, groups, "TopicFormat"),
        enrichment=None
        if enrichment is None
        else (reader.fields(*enrichment[0]), enrichment[0][1]),
    )
    return conflated_topic(reader, catalog, (element.tag, name, where, order), items)
