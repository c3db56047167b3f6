"""What every SOW entry of an AMPS configuration shares (the names of the file it may read,
its name and message type, its expressions), and conflated topics (seed 002
SOW/ConflatedTopic). Views are in :mod:`processor.topology.amps_views`, queues in
:mod:`processor.topology.amps_queues`.

Contract: :func:`read_conflated_topic` returns a frozen spec of one element, or raises
:class:`~processor.errors.TopologyError` naming the file and the element path
(``AMPSConfig/SOW/ConflatedTopic[1]/Interval``), what is wrong and what is allowed. Every
expression of an entry is compiled as it is read, so a file that loads has none that
fails later. Nothing here serves an entry (issues 21 and 22): ``sow serve`` refuses a
topology that has one (:mod:`processor.topology.unserved`).

* ``ViewDefinition`` is a synonym of ``View``, ``ReplicaDefinition`` of ``ConflatedTopic``,
  ``QueueDefinition`` of ``Queue``, and inside each ``Topic`` of ``Name``.
* What a view or a conflated topic reads (``UnderlyingTopic``, a ``Join``'s topics) is
  defined **before** it in the file, as AMPS requires (:func:`resolve`); ``[type].[TOPIC]``
  names a topic with its message type. References resolve within one file.
* A conflated topic reads a SOW topic, view or conflated topic by its exact name;
  ``MessageType``, when given, is the underlying topic's; ``Interval`` is 100ms or more
  (default 5s); ``TopicFormat`` (with ``%n``, no regular-expression characters) is
  required for a Pattern underlying topic and refused otherwise; ``Enrichment`` may not
  read ``OF PREVIOUS``.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from typing import Any

from processor.errors import ExpressionError, ParseError
from processor.expr import parser
from processor.expr.construction import compile_construction
from processor.expr.expression import compile_node
from processor.topology.amps_reader import AmpsReader, Child
from processor.topology.model import ConflatedTopicSpec, Entry, Topic, TopicRef
from processor.topology.quantities import parse_interval
from processor.topology.topics import REGEX_CHARACTERS

#: Old element names, and the name each stands for.
SYNONYMS = {
    "TopicDefinition": "Topic",
    "ViewDefinition": "View",
    "ReplicaDefinition": "ConflatedTopic",
    "QueueDefinition": "Queue",
}
#: The kinds of definition that record published messages in a log (a queue reads them).
LOGGED = ("Topic", "TransactionLog Topic")
QUEUES = ("Queue", "LocalQueue", "GroupLocalQueue")
# fmt: off
CONFLATED_ELEMENTS = (
    "Name", "Topic", "UnderlyingTopic", "MessageType", "Interval", "Filter", "HashIndex",
    "TopicFormat", "Enrichment",
)
# fmt: on
#: The shortest conflation interval AMPS accepts, in seconds.
MIN_INTERVAL_S = 0.1
CONFLATED_READS = ("Topic", "View", "ConflatedTopic")
_REF = re.compile(r"^\[([^\[\]]+)\]\.\[([^\[\]]+)\]$|^\[([^\[\]]+)\]$")


@dataclasses.dataclass(frozen=True, slots=True)
class Known:
    """A name defined in the file: what defined it (``kind``: an element name, or
    ``TransactionLog Topic``), its message type, where, and its position in the SOW
    section (0 for TransactionLog topics)."""

    name: str
    kind: str
    message_type: str
    schema: str | None
    where: str
    order: int
    pattern: bool = False

    @classmethod
    def of(cls, item: Topic | Entry, tag: str, where: str, order: int, **kw: Any) -> Known:
        """The definition of a loaded topic or entry."""
        kind = SYNONYMS.get(tag, tag)
        return cls(item.name, kind, item.message_type, item.schema, where, order, **kw)


class Catalog:
    """The names of one file, as they are defined."""

    def __init__(self) -> None:
        self.by_name: dict[str, Known] = {}
        self.by_type: dict[tuple[str, str], Known] = {}

    def add(self, known: Known) -> None:
        """Record a definition; the first of a name (of a name and message type) wins (a
        name defined twice for one type is an error of
        :func:`~processor.topology.assemble.assemble`)."""
        self.by_name.setdefault(known.name, known)
        self.by_type.setdefault((known.name, known.message_type), known)

    def get(self, name: str, message_type: str | None = None) -> Known | None:
        """The definition of ``name`` (of that message type when one is given: topics are
        scoped by message type, as in AMPS)."""
        if message_type is not None:
            return self.by_type.get((name, message_type)) or self.by_name.get(name)
        return self.by_name.get(name)

    def names(self, kinds: tuple[str, ...], before: int | None = None) -> str:
        """The names of ``kinds`` (defined before position ``before``), for messages."""
        found = [
            k.name
            for k in self.by_name.values()
            if k.kind in kinds and (before is None or k.order < before)
        ]
        return ", ".join(found) or "none"


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
    text = reader.text(*item)
    try:
        node = parser.parse(text)
        compile_node(rewrite(node) if rewrite is not None else node, text)
    except (ParseError, ExpressionError) as exc:
        reader.fail(f"<{item[0].tag}> is not a valid {what}: {exc}", item[1])
    return text


def refuse_binary(reader: AmpsReader, known: Known, tag: str, where: str) -> None:
    """A binary topic's messages are not parsed: nothing can read their fields."""
    if known.message_type == "binary":
        reader.fail(
            f"{known.name!r} is a binary topic, whose messages are not parsed, so <{tag}> "
            "cannot read its fields; use a parsed message type",
            where,
        )


def resolve(
    reader: AmpsReader,
    catalog: Catalog,
    ref: TopicRef,
    item: tuple[str, str, int],
    kinds: tuple[str, ...],
) -> Known:
    """The definition ``ref`` names for the entry ``item`` (its tag, the element path of
    the reference, its position): of one of ``kinds``, defined before the entry, of the
    message type the reference gives."""
    tag, where, order = item
    scope = None
    if ref.message_type is not None:
        scope = reader.message_type(ref.message_type, where)[0]
    known = catalog.get(ref.name, scope)
    allowed = f"{_plural(kinds)} defined before it"
    if known is None:
        reader.fail(
            f"<{tag}> reads {ref.name!r}, which is not defined in this file; allowed: "
            f"{allowed} ({catalog.names(kinds, order)})",
            where,
        )
    if known.kind not in kinds:
        reader.fail(
            f"{ref.name!r} is a {known.kind} (at {known.where}); a <{tag}> reads {allowed}",
            where,
        )
    if known.order >= order:
        reader.fail(
            f"{ref.name!r} is defined after this <{tag}> (at {known.where}); define it "
            "first, as AMPS requires",
            where,
        )
    if ref.message_type is not None:
        qualified = reader.message_type(ref.message_type, where)
        if qualified != (known.message_type, known.schema):
            reader.fail(
                f"[{ref.message_type}].[{ref.name}]: {ref.name!r} has MessageType "
                f"{known.message_type}, not {ref.message_type}",
                where,
            )
    return known


def _plural(kinds: tuple[str, ...]) -> str:
    words = {"Topic": "SOW topics", "View": "views", "ConflatedTopic": "conflated topics"}
    named = [words[k] for k in kinds if k in words]
    named += ["queues"] if any(k in QUEUES for k in kinds) else []
    return ", ".join(named[:-1]) + " or " + named[-1] if len(named) > 1 else named[0]


def topic_ref(text: str) -> TopicRef:
    """``[type].[TOPIC]``, ``[TOPIC]`` or ``TOPIC``."""
    match = _REF.match(text)
    if match is None:
        return TopicRef(text)
    if match[3]:
        return TopicRef(match[3])
    return TopicRef(match[2], match[1])


def read_conflated_topic(
    reader: AmpsReader, element: ET.Element, where: str, order: int, catalog: Catalog
) -> ConflatedTopicSpec:
    """One ``<ConflatedTopic>`` (module doc)."""
    groups, name = entry_groups(reader, element, where, CONFLATED_ELEMENTS, ("HashIndex",))
    if "UnderlyingTopic" not in groups:
        reader.fail(
            "a <ConflatedTopic> needs <UnderlyingTopic>: the exact name of a SOW topic, view "
            "or conflated topic defined before it",
            where,
        )
    under_el, under_where = groups["UnderlyingTopic"][0]
    underlying = reader.text(under_el, under_where)
    item = (element.tag, under_where, order)
    known = resolve(reader, catalog, TopicRef(underlying), item, CONFLATED_READS)
    typed = entry_type(reader, groups)
    if typed is not None and typed[:2] != (known.message_type, known.schema):
        reader.fail(
            f"<MessageType> must be the MessageType of the UnderlyingTopic {underlying!r} "
            f"({known.message_type}), as in AMPS",
            typed[2],
        )
    fields: dict[str, Any] = {}
    if "Interval" in groups:
        interval_el, interval_where = groups["Interval"][0]
        fields["interval_s"] = reader.value(interval_el, interval_where, parse_interval)
        if fields["interval_s"] < MIN_INTERVAL_S:
            reader.fail(
                f"Interval {reader.text(interval_el, interval_where)} is below the minimum, 100ms",
                interval_where,
            )
    for tag in ("Filter", "HashIndex", "Enrichment"):
        if tag in groups:
            refuse_binary(reader, known, tag, groups[tag][0][1])
    if "Filter" in groups:
        fields["filter"] = check_expression(reader, groups["Filter"][0], "filter")
    fields["hash_indexes"] = tuple(reader.hash_index(*i) for i in groups.get("HashIndex", []))
    fields["topic_format"] = _topic_format(reader, groups.get("TopicFormat"), known, under_where)
    if "Enrichment" in groups:
        enrichment_el, enrichment_where = groups["Enrichment"][0]
        texts = reader.fields(enrichment_el, enrichment_where)
        try:
            construction = compile_construction(texts, enrichment=True)
        except (ParseError, ExpressionError) as exc:
            reader.fail(f"Enrichment field is not valid: {exc}", enrichment_where)
        if construction.reads_previous:
            reader.fail(
                "a conflated topic's Enrichment cannot read OF PREVIOUS (as in AMPS)",
                enrichment_where,
            )
        fields["enrichment"] = texts
    return ConflatedTopicSpec(
        name=name,
        underlying=underlying,
        message_type=known.message_type,
        schema=known.schema,
        source=reader.source,
        where=where,
        **fields,
    )


def _topic_format(
    reader: AmpsReader, items: list[Child] | None, known: Known, under_where: str
) -> str | None:
    if not known.pattern:
        if items:
            reader.fail(
                f"<TopicFormat> names the copies of a Pattern topic's topics; the "
                f"UnderlyingTopic {known.name!r} is not a Pattern topic: remove it",
                items[0][1],
            )
        return None
    if not items:
        reader.fail(
            f"the UnderlyingTopic {known.name!r} is a Pattern topic: <TopicFormat> (such as "
            "%n-C) is required to name each conflated copy",
            under_where,
        )
    element, where = items[0]
    text = reader.text(element, where)
    if "%n" not in text:
        reader.fail(f"<TopicFormat> {text!r} must contain %n, the underlying topic's name", where)
    bad = sorted({c for c in text if c in REGEX_CHARACTERS})
    if bad:
        reader.fail(
            f"<TopicFormat> {text!r} contains {' '.join(bad)}, which regular expressions "
            "treat specially; AMPS refuses them",
            where,
        )
    return text
