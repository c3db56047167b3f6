"""Queues, views and conflated topics in the kafka-sow YAML topology format
(``docs/topology.md``, "Views and conflated topics in YAML", "Queues in YAML"; a queue's
fields: :mod:`processor.topology.yaml_queues`)::

    views:
      - name: CompleteByRegion
        message_type: json
        underlying: orders                  # or joins: ["[ORDERS]./Tick = [COMPANIES]./Tick"]
        projection: ["COUNT(/orderId) AS /completedOrders", "/region AS /region"]
        grouping: [/region]
        filter: "/status = 'complete'"
    conflated_topics:
      - name: orders-C
        underlying: orders
        interval: 1s

Contract: :func:`read_entries` returns the :class:`~processor.topology.model.QueueSpec`,
:class:`~processor.topology.model.ViewSpec` and
:class:`~processor.topology.model.ConflatedTopicSpec` of a document, in that order, each
list in file order, equal to what the AMPS XML loader makes of the same definition: both
formats check them with :mod:`processor.topology.queue_rules`,
:mod:`processor.topology.view_rules` and :mod:`processor.topology.entry_rules`. A problem
raises :class:`~processor.errors.TopologyError` naming the file and the field path
(``views[CompleteByRegion].projection[1]``, or ``views[0]`` counting from 0 when the entry
has no usable name), what is wrong and what is allowed.

* A queue (:mod:`processor.topology.yaml_queues`) reads topics of this file only (SOW
  topics, or plain topics: AMPS's TransactionLog topics), so it is read first.
* A view reads one topic (``underlying``) or the topics of its ``joins``, not both; what it
  reads is a SOW topic of this file, a view or a conflated topic (not a queue).
  ``message_type``, ``projection`` and ``grouping`` are required.
* A conflated topic reads a SOW topic, a view or a conflated topic.
* Views and conflated topics are read in file order, except that one reading another is
  read after it (:func:`_reading_order`), wherever it is written; a cycle is refused
  naming it (``views[V] reads conflated_topics[C] reads views[V]``).
* Each entry's ``where`` is its index path (``views[0]``), as a topic's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from processor.errors import ParseError, TopologyError
from processor.expr import ast, parser
from processor.topology import quantities
from processor.topology.assemble import Loaded, check_topic
from processor.topology.entry_rules import (
    Catalog,
    ConflatedItems,
    Item,
    Known,
    conflated_topic,
    topic_ref,
)
from processor.topology.message_types import TRAITS, parse_message_type
from processor.topology.model import (
    ConflatedTopicSpec,
    Entry,
    SowTopic,
    Topic,
    ViewConflation,
    ViewSpec,
)
from processor.topology.upserts import UpsertKey, UpsertSpec
from processor.topology.view_rules import ViewItems, view
from processor.topology.yaml_fields import describe, named, parse_field, parse_text, schema_path
from processor.topology.yaml_queues import QUEUE_ELEMENTS, read_queue

# fmt: off
VIEW_FIELDS = (
    "name", "message_type", "schema", "underlying", "joins", "projection", "grouping", "filter",
    "key_domain", "conflation", "hash_indexes", "join_null_equivalency", "partitions",
    "kafka_topic", "upsert",
)
CONFLATED_FIELDS = (
    "name", "underlying", "message_type", "interval", "filter", "hash_indexes", "topic_format",
    "enrichment",
)
# fmt: on
#: What a view may read in YAML: SOW topics, views and conflated topics (read before it:
#: :func:`_reading_order`); not a queue (``sow serve`` refuses a view reading one).
VIEW_READS = ("Topic", "View", "ConflatedTopic")
#: AMPS elements as YAML messages write them, and in prose where that differs.
_LABELS = {
    "View": "view",
    "ConflatedTopic": "conflated topic",
    "Join": "join",
    "Filter": "filter",
    "Field": "field",
    "MessageType": "message_type",
    "UnderlyingTopic": "underlying",
    "Interval": "interval",
    "TopicFormat": "topic_format",
    "Enrichment": "enrichment",
    "HashIndex": "hash index",
    "Name": "name",
    "Queue": "queue of kind queue",
    "LocalQueue": "queue of kind local",
    "GroupLocalQueue": "queue of kind group_local",
    **{element: field for field, element in QUEUE_ELEMENTS.items() if field != "underlying"},
}
_WORDS = {
    "UnderlyingTopic": "underlying topic",
    "Topic": "SOW topic",
    "TransactionLog Topic": "plain topic",
    "Queue": "queue",
    "LocalQueue": "local queue",
    "GroupLocalQueue": "group_local queue",
}
_FIELD_HINT = "a list of fields, each such as /region or SUM(/qty) AS /total"


class _Dialect:
    """How the YAML format reports a problem and says AMPS elements."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str, where: str) -> NoReturn:
        raise TopologyError(message, source=self.source, where=where)

    def message_type(self, value: str, where: str) -> tuple[str, str | None]:
        try:
            return parse_message_type(value), None
        except ValueError as exc:
            self.fail(str(exc), where)

    def label(self, element: str) -> str:
        return _LABELS.get(element, element)

    def word(self, element: str) -> str:
        return _WORDS.get(element) or self.label(element)


def _entries_list(document: dict[Any, Any], key: str, what: str, source: str) -> list[Any]:
    raw = document.get(key, [])
    if not isinstance(raw, list):
        raise TopologyError(
            f"expected a list of {what}, got {describe(raw)}", source=source, where=key
        )
    return raw


#: The sections of entries, in the order they are read, and what each holds.
SECTIONS = (("queues", "queues"), ("views", "views"), ("conflated_topics", "conflated topics"))


def read_entries(
    document: dict[Any, Any], topics: list[Loaded], source: str, base: Path
) -> list[Entry]:
    """The queues, then the views, then the conflated topics, of a YAML ``document`` whose
    ``topics`` are loaded (module doc)."""
    d = _Dialect(source)
    catalog = Catalog()
    for topic, _, where in topics:
        if isinstance(topic, SowTopic):
            catalog.add(Known.of(topic, "Topic", where, 0, pattern=topic.pattern is not None))
        else:
            catalog.add(Known.of(topic, "TransactionLog Topic", where, 0))
    declared = _reading_order(
        d,
        [
            (key, raw, f"{key}[{index}]")
            for key, what in SECTIONS
            for index, raw in enumerate(_entries_list(document, key, what, source))
        ],
        {topic.name for topic, _, _ in topics},
    )
    entries: list[Entry] = []
    for order, (key, raw, where) in enumerate(declared, start=1):
        catalog.later = _later(declared[order:])
        entry: Entry
        if key == "queues":
            entry = read_queue(d, catalog, (raw, where), base)
            catalog.add(Known.of(entry, entry.kind.value, where, order))
        elif key == "views":
            entry = _view(d, catalog, (raw, where, order), base)
            catalog.add(Known.of(entry, "View", where, order))
        else:
            entry = _conflated(d, catalog, (raw, where, order))
            catalog.add(Known.of(entry, "ConflatedTopic", where, order))
        entries.append(entry)
    return entries


def _reads(raw: Any) -> set[str]:
    """The names a view or conflated topic entry reads, as far as a glance tells (its
    ``underlying``, its joins' topics); the rules check them when the entry is read."""
    if not isinstance(raw, dict):
        return set()
    names: set[str] = set()
    underlying = raw.get("underlying")
    if isinstance(underlying, str) and underlying.strip():
        names.add(topic_ref(underlying.strip()).name)
    joins = raw.get("joins")
    for join in joins if isinstance(joins, list) else ():
        try:  # the join rules say what is wrong with one that does not parse
            node = parser.parse(join) if isinstance(join, str) else None
        except ParseError:
            continue
        if isinstance(node, ast.Binary):
            for side in (node.left, node.right):
                if isinstance(side, ast.Identifier) and side.qualifiers:
                    names.add(side.qualifiers[-1])
    return names


def _reading_order(
    d: _Dialect, declared: list[tuple[str, Any, str]], topics: set[str]
) -> list[tuple[str, Any, str]]:
    """The entries in the order they are read: queues first, then views and conflated
    topics in file order, except that one reading another comes after it (so a view may
    read a conflated topic, as in AMPS). A name that is also a topic's reads as the topic
    (the entry is refused as defined twice when it is read); a cycle is refused here."""
    queues = [item for item in declared if item[0] == "queues"]
    rest = [item for item in declared if item[0] != "queues"]
    named: dict[str, tuple[str, Any, str]] = {}
    for item in rest:
        raw = item[1]
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            name = raw["name"].strip()
            if name not in topics:
                named.setdefault(name, item)
    ordered: list[tuple[str, Any, str]] = []
    visiting, placed = 1, 2
    marks: dict[str, int] = {}
    for root in rest:
        if root[2] in marks:
            continue
        marks[root[2]] = visiting
        stack = [(root, iter(sorted(_reads(root[1]))))]
        while stack:  # depth first, without recursion (a chain may be long)
            item, pending = stack[-1]
            for name in pending:
                needed = named.get(name)
                if needed is None or marks.get(needed[2]) == placed:
                    continue
                if marks.get(needed[2]) == visiting:
                    path = [entry for entry, _ in stack]
                    cycle = [*path[path.index(needed) :], needed]
                    d.fail(
                        f"{' reads '.join(_named_where(entry) for entry in cycle)}: views and "
                        "conflated topics cannot read each other in a cycle",
                        _named_where(item),
                    )
                marks[needed[2]] = visiting
                stack.append((needed, iter(sorted(_reads(needed[1])))))
                break
            else:
                stack.pop()
                marks[item[2]] = placed
                ordered.append(item)
    return queues + ordered


def _named_where(item: tuple[str, Any, str]) -> str:
    """An entry's path by its name (``views[V]``), else by its index."""
    key, raw, where = item
    if isinstance(raw, dict) and isinstance(raw.get("name"), str) and raw["name"].strip():
        return f"{key}[{raw['name'].strip()}]"
    return where


def _later(declared: list[tuple[str, Any, str]]) -> dict[str, str]:
    """The names of the entries still to be read (those it can tell), and where."""
    later: dict[str, str] = {}
    for _, raw, where in declared:
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            later.setdefault(raw["name"].strip(), where)
    return later


def _text(d: _Dialect, raw: dict[Any, Any], key: str, where: str, expected: str) -> Item | None:
    """The text of the field ``key``, if given, and its path."""
    if key not in raw:
        return None
    path = f"{where}.{key}"
    try:
        return parse_text(raw[key], expected), path
    except ValueError as exc:
        d.fail(str(exc), path)


def _parsed(d: _Dialect, raw: dict[Any, Any], key: str, where: str) -> tuple[Any, str] | None:
    """The value of the field ``key`` as its topic field parser reads it, if given, and its
    path."""
    if key not in raw:
        return None
    path = f"{where}.{key}"
    return parse_field(d.source, path, key, raw[key]), path


def _texts(
    d: _Dialect, raw: dict[Any, Any], key: str, where: str, expected: tuple[str, str]
) -> list[Item]:
    """The texts of the field ``key`` (one text, or a non-empty list of them), each with
    its path; ``expected`` says what the list and an item are."""
    if key not in raw:
        return []
    value = raw[key]
    if isinstance(value, str):
        item = _text(d, raw, key, where, expected[1])
        return [] if item is None else [item]
    path = f"{where}.{key}"
    if not isinstance(value, list) or not value:
        d.fail(f"expected {expected[0]}, got {describe(value)}", path)
    items: list[Item] = []
    for index, text in enumerate(value):
        try:
            items.append((parse_text(text, expected[1]), f"{path}[{index}]"))
        except ValueError as exc:
            d.fail(str(exc), f"{path}[{index}]")
    return items


def _view(d: _Dialect, catalog: Catalog, entry: tuple[object, str, int], base: Path) -> ViewSpec:
    raw_entry, index_where, order = entry
    raw, name, where = named(raw_entry, index_where, "view", VIEW_FIELDS, d.source)
    if "message_type" not in raw:
        d.fail(
            "a view needs 'message_type', the type of the messages it produces: "
            + ", ".join(t.name for t in TRAITS.values() if t.view_output and not t.schema)
            + ", or avro with a 'schema'",
            where,
        )
    message_type = parse_field(
        d.source, f"{where}.message_type", "message_type", raw["message_type"]
    )
    schema = schema_path(raw, message_type, d.source, where, base)
    if ("underlying" in raw) == ("joins" in raw):
        d.fail(
            "a view reads one topic ('underlying') or the topics of its joins ('joins'): "
            + ("give only one of them" if "joins" in raw else "give one of them"),
            where,
        )
    for required, hint in (
        ("projection", _FIELD_HINT),
        ("grouping", "a list of field paths such as /region"),
    ):
        if required not in raw:
            d.fail(f"a view needs '{required}': {hint}", where)
    items = ViewItems(
        typed=(message_type, schema, f"{where}.message_type"),
        underlying=_text(
            d, raw, "underlying", where, 'a topic name: ORDERS, or "[json].[ORDERS]" (quoted)'
        ),
        joins=_texts(
            d,
            raw,
            "joins",
            where,
            ("a list of joins", 'a join such as "[ORDERS]./Tick = [COMPANIES]./Tick" (quoted)'),
        ),
        projection=_texts(
            d, raw, "projection", where, (_FIELD_HINT, "a field such as SUM(/qty) AS /total")
        ),
        grouping=_texts(
            d,
            raw,
            "grouping",
            where,
            ("a list of field paths such as /region", "a field path such as /region"),
        ),
        filter=_text(d, raw, "filter", where, "a filter such as \"/status = 'complete'\""),
    )
    return view(
        d, catalog, (name, index_where, order), items, VIEW_READS, **_options(d, raw, name, where)
    )


def _options(d: _Dialect, raw: dict[Any, Any], name: str, where: str) -> dict[str, Any]:
    """A view's fields that its rules do not read."""
    options: dict[str, Any] = {}
    for key in ("key_domain", "hash_indexes", "partitions", "kafka_topic"):
        parsed = _parsed(d, raw, key, where)
        if parsed is not None:
            options[key] = parsed[0]
    conflation = _text(d, raw, "conflation", where, "none or inline")
    if conflation is not None:
        try:
            choice = quantities.parse_choice(conflation[0], ("none", "inline"), "conflation")
        except ValueError as exc:
            d.fail(str(exc), conflation[1])
        options["conflation"] = ViewConflation(choice)
    if "join_null_equivalency" in raw:
        value = raw["join_null_equivalency"]
        if not isinstance(value, bool):
            d.fail(
                "expected true (a NULL join field matches a NULL one) or false (the default: "
                f"it matches nothing), got {describe(value)}",
                f"{where}.join_null_equivalency",
            )
        options["join_null_equivalency"] = value
    problem = check_topic(Topic(name=name, kafka_topic=options.get("kafka_topic", "")), str)
    if problem is not None:
        d.fail(problem[1], f"{where}.kafka_topic" if "kafka_topic" in raw else f"{where}.name")
    upsert = _parsed(d, raw, "upsert", where)
    if upsert is not None and upsert[0] is not None:
        _view_upsert(d, name, options, upsert)
    return options


def _view_upsert(
    d: _Dialect, name: str, options: dict[str, Any], upsert: tuple[UpsertSpec, str]
) -> None:
    """A view's upsert topic (docs/upsert-tables.md): keyed by SowKey (a view has no Key
    fields), with a legal Kafka name of its own."""
    spec, where = upsert
    if spec.key is not UpsertKey.SOW_KEY:
        d.fail(
            "a view's upsert topic is keyed by sow_key: a view has no Key fields (its "
            "records' SowKeys come from its Grouping); remove 'key' or set it to sow_key",
            where,
        )
    probe = SowTopic(name=name, kafka_topic=options.get("kafka_topic", ""), upsert=spec)
    problem = check_topic(probe, lambda attribute: attribute)
    if problem is not None:
        d.fail(problem[1], where)
    options["upsert"] = spec


def _conflated(d: _Dialect, catalog: Catalog, entry: tuple[object, str, int]) -> ConflatedTopicSpec:
    raw_entry, index_where, order = entry
    raw, name, where = named(raw_entry, index_where, "conflated topic", CONFLATED_FIELDS, d.source)
    underlying = _text(d, raw, "underlying", where, "the exact name of a topic")
    if underlying is None:
        d.fail(
            "a conflated topic needs 'underlying': the exact name of a SOW topic, view or "
            "conflated topic defined before it",
            where,
        )
    message_type = _parsed(d, raw, "message_type", where)
    interval = raw.get("interval")
    if isinstance(interval, int | float) and not isinstance(interval, bool):
        raw = {**raw, "interval": str(interval)}  # a number: parse_interval says a unit is needed
    items = ConflatedItems(
        underlying=underlying,
        typed=None if message_type is None else (message_type[0], None, message_type[1]),
        interval=_text(d, raw, "interval", where, "an interval of 100ms or more, such as 5s"),
        filter=_text(d, raw, "filter", where, "a filter such as \"/region = 'A'\""),
        hash_indexes=_parsed(d, raw, "hash_indexes", where),
        topic_format=_text(d, raw, "topic_format", where, "a name with %n, such as %n-C"),
        enrichment=_parsed(d, raw, "enrichment", where),
    )
    return conflated_topic(d, catalog, ("ConflatedTopic", name, index_where, order), items)
