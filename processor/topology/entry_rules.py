"""The rules of views and conflated topics that every topology format shares: what an
entry may read, and its expressions (views' own rules are in
:mod:`processor.topology.view_rules`, queues' in :mod:`processor.topology.queue_rules`).

The AMPS XML loader (:mod:`processor.topology.amps_entries`,
:mod:`processor.topology.amps_views`) and the YAML loader
(:mod:`processor.topology.yaml_entries`) take each value from their format, with where it
was written (an element path, a field path), and call these functions, so both formats
produce the same specs and refuse the same definitions. Problems are reported through the
format's :class:`Dialect`, which names the file and the place and says elements as the
format writes them (``<Filter>``, or ``filter``).

* What an entry reads is defined before it (:func:`resolve`): one of the kinds it may read,
  of the message type a ``[type].[TOPIC]`` reference gives. A binary topic's fields cannot
  be read (:func:`refuse_binary`).
* A conflated topic (:func:`conflated_topic`) reads a SOW topic, view or conflated topic by
  its exact name; its message type, when given, is the underlying topic's; its interval is
  100ms or more (default 5s); ``TopicFormat`` (with ``%n``, no regular-expression
  characters) is required for a Pattern underlying topic and refused otherwise; its
  enrichment may not read ``OF PREVIOUS``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from processor.errors import ExpressionError, ParseError
from processor.expr import parser
from processor.expr.construction import compile_construction
from processor.expr.expression import compile_node
from processor.topology.message_types import traits as message_traits
from processor.topology.model import ConflatedTopicSpec, Entry, HashIndexSpec, Topic, TopicRef
from processor.topology.quantities import parse_interval
from processor.topology.topics import REGEX_CHARACTERS

#: A value as written (its text), and where (an element or field path).
Item = tuple[str, str]
#: The kinds of definition that record published messages in a log (a queue reads them).
LOGGED = ("Topic", "TransactionLog Topic")
QUEUES = ("Queue", "LocalQueue", "GroupLocalQueue")
#: What a conflated topic may read.
CONFLATED_READS = ("Topic", "View", "ConflatedTopic")
#: The shortest conflation interval AMPS accepts, in seconds.
MIN_INTERVAL_S = 0.1
_REF = re.compile(r"^\[([^\[\]]+)\]\.\[([^\[\]]+)\]$|^\[([^\[\]]+)\]$")


class Dialect(Protocol):
    """How one topology format reports a problem and says its elements."""

    source: str

    def fail(self, message: str, where: str) -> NoReturn:
        """Raise TopologyError for the file, at ``where``."""

    def message_type(self, value: str, where: str) -> tuple[str, str | None]:
        """(message type, schema path or None) of a message type as written."""

    def label(self, element: str) -> str:
        """An AMPS element as the format writes it in messages: ``<Join>``, ``join``."""

    def word(self, element: str) -> str:
        """An AMPS element or kind named in prose: ``MessageType``, ``message_type``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Known:
    """A name defined in the file: what defined it (``kind``: an AMPS element name, or
    ``TransactionLog Topic`` for a topic without a SOW), its message type, where, and its
    position among the file's definitions (0 for topics without a SOW). ``pattern``: it
    stores several topics, each by its own name (a Pattern topic, or a conflated copy of
    one), so a view cannot read it and a conflated topic of it needs ``TopicFormat``."""

    name: str
    kind: str
    message_type: str
    schema: str | None
    where: str
    order: int
    pattern: bool = False

    @classmethod
    def of(cls, item: Topic | Entry, kind: str, where: str, order: int, **kw: Any) -> Known:
        """The definition of a loaded topic or entry."""
        if isinstance(item, ConflatedTopicSpec) and item.topic_format is not None:
            kw.setdefault("pattern", True)
        return cls(item.name, kind, item.message_type, item.schema, where, order, **kw)


class Catalog:
    """The names of one file, as they are defined. ``later`` holds the names defined after
    the entries being read (name -> where), when the format knows them in advance."""

    def __init__(self) -> None:
        self.by_name: dict[str, Known] = {}
        self.by_type: dict[tuple[str, str], Known] = {}
        self.later: dict[str, str] = {}

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


def same_type(typed: tuple[str, str | None], known: Known) -> bool:
    """Whether a message type as written (``typed``) is ``known``'s; a type written without
    a schema matches any schema of its type."""
    return typed[0] == known.message_type and typed[1] in (None, known.schema)


def resolve(
    d: Dialect, catalog: Catalog, ref: TopicRef, item: tuple[str, str, int], kinds: tuple[str, ...]
) -> Known:
    """The definition ``ref`` names for the entry ``item`` (its element, where the
    reference is written, its position): of one of ``kinds``, defined before the entry,
    of the message type the reference gives."""
    element, where, order = item
    entry = d.label(element)
    typed = None if ref.message_type is None else d.message_type(ref.message_type, where)
    known = catalog.get(ref.name, None if typed is None else typed[0])
    allowed = f"{_plural(kinds)} defined before it"
    if known is None and ref.name in catalog.later:
        d.fail(
            f"{ref.name!r} is defined after this {entry} (at {catalog.later[ref.name]}); "
            f"a {entry} reads {allowed}",
            where,
        )
    if known is None:
        d.fail(
            f"this {entry} reads {ref.name!r}, which is not defined in this file; allowed: "
            f"{allowed} ({catalog.names(kinds, order)})",
            where,
        )
    if known.kind not in kinds:
        d.fail(
            f"{ref.name!r} is a {d.word(known.kind)} (at {known.where}); a {entry} reads {allowed}",
            where,
        )
    if known.order >= order:
        d.fail(
            f"{ref.name!r} is defined after this {entry} (at {known.where}); define it "
            "first, as AMPS requires",
            where,
        )
    if typed is not None and not same_type(typed, known):
        d.fail(
            f"[{ref.message_type}].[{ref.name}]: {ref.name!r} has {d.word('MessageType')} "
            f"{known.message_type}, not {ref.message_type}",
            where,
        )
    return known


def _plural(kinds: tuple[str, ...]) -> str:
    words = {"Topic": "SOW topics", "View": "views", "ConflatedTopic": "conflated topics"}
    named = [words[k] for k in kinds if k in words]
    named += ["queues"] if any(k in QUEUES for k in kinds) else []
    return ", ".join(named[:-1]) + " or " + named[-1] if len(named) > 1 else named[0]


def refuse_binary(d: Dialect, known: Known, element: str, where: str) -> None:
    """A binary topic's messages are not parsed: nothing can read their fields."""
    kind = known.message_type
    if not message_traits(kind).parsed:
        d.fail(
            f"{known.name!r} is a {kind} topic, whose messages are not parsed, so the "
            f"{d.label(element)} cannot read its fields; use a parsed message type",
            where,
        )


def topic_ref(text: str) -> TopicRef:
    """``[type].[TOPIC]``, ``[TOPIC]`` or ``TOPIC``."""
    match = _REF.match(text)
    if match is None:
        return TopicRef(text)
    if match[3]:
        return TopicRef(match[3])
    return TopicRef(match[2], match[1])


def expression(
    d: Dialect, item: Item, element: str, what: str, rewrite: Callable[[Any], Any] | None = None
) -> str:
    """The text of a filter or value expression, compiled (a problem is an error where it
    is written). ``rewrite`` maps the parsed tree before it is compiled."""
    text, where = item
    try:
        node = parser.parse(text)
        compile_node(rewrite(node) if rewrite is not None else node, text)
    except (ParseError, ExpressionError) as exc:
        d.fail(f"the {d.label(element)} is not a valid {what}: {exc}", where)
    return text


def interval(d: Dialect, item: Item) -> float:
    """A conflated topic's interval: 100ms or more."""
    text, where = item
    try:
        seconds = parse_interval(text)
    except ValueError as exc:
        d.fail(str(exc), where)
    if seconds < MIN_INTERVAL_S:
        d.fail(f"{d.word('Interval')} {text} is below the minimum, 100ms", where)
    return seconds


@dataclasses.dataclass(frozen=True, slots=True)
class ConflatedItems:
    """A conflated topic's values as written: each with where it was written, or None
    when not given. ``typed``: (message type, schema, where)."""

    underlying: Item
    typed: tuple[str, str | None, str] | None = None
    interval: Item | None = None
    filter: Item | None = None
    hash_indexes: tuple[tuple[HashIndexSpec, ...], str] | None = None
    topic_format: Item | None = None
    enrichment: tuple[tuple[str, ...], str] | None = None


def conflated_topic(
    d: Dialect, catalog: Catalog, entry: tuple[str, str, str, int], items: ConflatedItems
) -> ConflatedTopicSpec:
    """A conflated topic (module doc); ``entry`` is its element (``ConflatedTopic``), name,
    where it is defined and its position."""
    element, name, where, order = entry
    underlying, under_where = items.underlying
    read = (element, under_where, order)
    known = resolve(d, catalog, TopicRef(underlying), read, CONFLATED_READS)
    if items.typed is not None and not same_type(items.typed[:2], known):
        d.fail(
            f"{d.label('MessageType')} must be the {d.word('MessageType')} of the "
            f"{d.word('UnderlyingTopic')} {underlying!r} ({known.message_type}), as in AMPS",
            items.typed[2],
        )
    fields: dict[str, Any] = {}
    if items.interval is not None:
        fields["interval_s"] = interval(d, items.interval)
    for tag, given in (
        ("Filter", items.filter),
        ("HashIndex", items.hash_indexes),
        ("Enrichment", items.enrichment),
    ):
        if given is not None:
            refuse_binary(d, known, tag, given[1])
    if items.filter is not None:
        fields["filter"] = expression(d, items.filter, "Filter", "filter")
    if items.hash_indexes is not None:
        fields["hash_indexes"] = items.hash_indexes[0]
    fields["topic_format"] = _topic_format(d, items.topic_format, known, under_where)
    if items.enrichment is not None:
        texts, enrichment_where = items.enrichment
        if not message_traits(known.message_type).builds:
            d.fail(
                f"{known.message_type} messages cannot be built from fields, so a conflated "
                f"topic of {known.name!r} cannot have {d.word('Enrichment')}",
                enrichment_where,
            )
        try:
            construction = compile_construction(texts, enrichment=True)
        except (ParseError, ExpressionError) as exc:
            d.fail(f"{d.word('Enrichment')} field is not valid: {exc}", enrichment_where)
        if construction.reads_previous:
            d.fail(
                f"a conflated topic's {d.word('Enrichment')} cannot read OF PREVIOUS (as in AMPS)",
                enrichment_where,
            )
        fields["enrichment"] = texts
    return ConflatedTopicSpec(
        name=name,
        underlying=underlying,
        message_type=known.message_type,
        schema=known.schema,
        source=d.source,
        where=where,
        **fields,
    )


def _topic_format(d: Dialect, item: Item | None, known: Known, under_where: str) -> str | None:
    label = d.label("TopicFormat")
    if not known.pattern:
        if item is not None:
            d.fail(
                f"{label} names the copies of a Pattern topic's topics; the "
                f"{d.word('UnderlyingTopic')} {known.name!r} is not a Pattern topic: remove it",
                item[1],
            )
        return None
    if item is None:
        d.fail(
            f"the {d.word('UnderlyingTopic')} {known.name!r} is a Pattern topic: {label} (such "
            "as %n-C) is required to name each conflated copy",
            under_where,
        )
    text, where = item
    if "%n" not in text:
        d.fail(f"{label} {text!r} must contain %n, the underlying topic's name", where)
    bad = sorted({c for c in text if c in REGEX_CHARACTERS})
    if bad:
        d.fail(
            f"{label} {text!r} contains {' '.join(bad)}, which regular expressions treat "
            "specially; AMPS refuses them",
            where,
        )
    return text
