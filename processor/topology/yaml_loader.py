"""The kafka-sow YAML topology format (documented in ``docs/topology.md``).

A document is a mapping with ``topics`` (a list, required), ``defaults`` (optional),
``queues``, ``views`` and ``conflated_topics`` (optional lists, read by
:mod:`processor.topology.yaml_entries` once the topics are loaded), and ``security``
(optional: the entitlements file and logon, :mod:`processor.topology.yaml_security`)::

    defaults: {partitions: 2}
    topics:
      - name: ORDERS
        key: /orderId

Each topic has the fields in :data:`TOPIC_FIELDS`; ``defaults`` may set those in
:data:`DEFAULT_FIELDS` and a topic's own value wins. ``sow: false`` declares a plain topic
(no SOW, :class:`~processor.topology.model.PlainTopic`), which takes only
:data:`PLAIN_FIELDS` (and only those defaults). Contract: :func:`parse_yaml` returns a
:class:`~processor.topology.model.Topology` whose topics are in file order, or raises
:class:`~processor.errors.TopologyError` whose message names the file, the field path
(``topics[ORDERS].partitions``, or ``topics[2]`` counting from 0 when the topic has no usable
name), what was wrong and what is allowed. YAML syntax errors and duplicate mapping keys
give the line and column. A relative ``schema`` path is resolved against the YAML file's
directory and stored as an absolute path; the file must exist. The field values are parsed
by :mod:`processor.topology.yaml_fields`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from processor.errors import TopologyError
from processor.topology import quantities
from processor.topology.assemble import Loaded, assemble, check_topic, read_text
from processor.topology.model import PlainTopic, SowTopic, Topic, Topology
from processor.topology.yaml_actions import read_actions
from processor.topology.yaml_entries import read_entries
from processor.topology.yaml_fields import PARSERS, describe, message_format, named, parse_field
from processor.topology.yaml_security import read_security

TOP_LEVEL_KEYS = (
    "defaults",
    "topics",
    "queues",
    "views",
    "conflated_topics",
    "security",
    "actions",
)
TOPIC_FIELDS = (
    "name",
    "message_type",
    "key",
    "key_domain",
    "key_generator",
    "durability",
    "recovery_point",
    "kafka_topic",
    "partitions",
    "schema",
    "proto_type",
    "proto_path",
    "parts",
    "schema_registry",
    "expiration",
    "hash_indexes",
    "indexes",
    "history",
    "preprocessing",
    "enrichment",
    "pattern",
    "upsert",
    "sow",
)
#: The fields of a plain topic (``sow: false``).
PLAIN_FIELDS = (
    "name",
    "sow",
    "message_type",
    "kafka_topic",
    "partitions",
    "schema",
    "proto_type",
    "proto_path",
    "parts",
    "schema_registry",
)
DEFAULT_FIELDS = ("message_type", "durability", "recovery_point", "partitions", "expiration")

#: YAML field -> SowTopic attribute, where they differ.
_ATTRIBUTE = {"key": "keys", "expiration": "expiration_s"}
_YAML_NAME = {attribute: name for name, attribute in _ATTRIBUTE.items()}


#: Deepest nesting of YAML collections accepted (a topology needs four levels). PyYAML
#: composes recursively: a deeper document would exhaust the Python stack, slowly.
MAX_DEPTH = 64
_TOO_DEEP = f"collections nested deeper than {MAX_DEPTH} levels; a topology needs a few levels"


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last),
    leaves timestamps as text, so that every timestamp goes through ``parse_timestamp``,
    and rejects collections nested deeper than :data:`MAX_DEPTH`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # Checked while scanning, too: PyYAML's scanner takes time quadratic in the number
        # of flow collections open on one line.
        if self.flow_level >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(None, None, _TOO_DEEP, self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, _TOO_DEEP, mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Hashable, Any]:
    seen: dict[Hashable, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} appears twice in one mapping (first on line {seen[key]}); "
                    "give each key once",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: str | Path, alone: bool = True) -> Topology:
    """Load a YAML topology file (``alone``: not one of a directory's, whose actions are
    checked once the directory is merged)."""
    return parse_yaml(read_text(path), str(path), alone)


def _load_document(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise TopologyError(f"YAML syntax error: {problem}", source=source, where=where) from exc
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: e.g. a bad explicit !!timestamp
        raise TopologyError(f"invalid YAML: {exc}", source=source) from exc


def parse_yaml(text: str, source: str, alone: bool = True) -> Topology:
    """Parse YAML topology ``text``; ``source`` names the file in messages and anchors paths."""
    try:
        return _parse_yaml(text, source, alone)
    except RecursionError:
        # Aliases can nest values deeper than MAX_DEPTH without composing them again.
        raise TopologyError(
            f"the document nests values too deeply (more than {MAX_DEPTH} levels, or aliases "
            "that refer to themselves); a topology needs a few levels",
            source=source,
        ) from None


def _parse_yaml(text: str, source: str, alone: bool) -> Topology:
    document = _load_document(text, source)
    if document is None:
        raise TopologyError(
            "the file is empty; expected a mapping with a 'topics' list", source=source
        )
    if not isinstance(document, dict):
        raise TopologyError(
            "the top level must be a mapping with 'topics' (and optional 'defaults', "
            f"'queues', 'views', 'conflated_topics', 'security' and 'actions'), got "
            f"{describe(document)}",
            source=source,
        )
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            raise TopologyError(
                quantities.unknown_name("key", str(key), TOP_LEVEL_KEYS),
                source=source,
                where=str(key),
            )
    defaults = _defaults(document.get("defaults", {}), source)
    topics = document.get("topics")
    if not isinstance(topics, list):
        raise TopologyError(
            f"expected a list of topics, got {describe(topics)}", source=source, where="topics"
        )
    base = Path(source).parent
    entries: list[Loaded] = [
        (_topic(raw, index, defaults, source, base), source, f"topics[{index}]")
        for index, raw in enumerate(topics)
    ]
    actions = read_actions(document["actions"], source) if "actions" in document else ()
    others = read_entries(document, entries, source, base)
    topology = assemble(entries, (source,), others, actions, alone)
    if "security" not in document:
        return topology
    return replace(topology, security=read_security(document["security"], source, base))


def _defaults(raw: object, source: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TopologyError(
            f"expected a mapping of default topic fields, got {describe(raw)}",
            source=source,
            where="defaults",
        )
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in DEFAULT_FIELDS:
            message = quantities.unknown_name("default", str(key), DEFAULT_FIELDS)
            raise TopologyError(message, source=source, where=f"defaults.{key}")
        parsed[key] = parse_field(source, f"defaults.{key}", key, value)
    return parsed


def _topic(raw: object, index: int, defaults: dict[str, Any], source: str, base: Path) -> Topic:
    raw, name, where = named(raw, f"topics[{index}]", "topic", TOPIC_FIELDS, source)
    plain = _plain(raw, name, source, where)
    fields: dict[str, Any] = {k: v for k, v in defaults.items() if not plain or k in PLAIN_FIELDS}
    for key, value in raw.items():
        if key in PARSERS and key != "name":
            fields[key] = parse_field(source, f"{where}.{key}", key, value)
    fields.update(message_format(raw, fields.get("message_type", "json"), source, where, base))
    kind = PlainTopic if plain else SowTopic
    topic = kind(name=name, **{_ATTRIBUTE.get(k, k): v for k, v in fields.items()})
    problem = check_topic(topic, lambda attribute: _YAML_NAME.get(attribute, attribute))
    if problem is not None:
        attribute, message = problem
        field = _YAML_NAME.get(attribute, attribute)
        field = field if field in raw else "name"  # e.g. kafka_topic taken from the name
        raise TopologyError(message, source=source, where=f"{where}.{field}")
    return topic


def _plain(raw: dict[Any, Any], name: str, source: str, where: str) -> bool:
    """Whether the topic is declared without a SOW (``sow: false``); a plain topic may
    have only :data:`PLAIN_FIELDS`."""
    value = raw.get("sow", True)
    if not isinstance(value, bool):
        raise TopologyError(
            f"expected true (a SOW topic, the default) or false (a plain topic: live "
            f"subscriptions only, nothing stored), got {describe(value)}",
            source=source,
            where=f"{where}.sow",
        )
    if value:
        return False
    for key in raw:
        if key not in PLAIN_FIELDS:
            raise TopologyError(
                f"topic {name!r} has no SOW (sow: false), so {key!r} does not apply: a plain "
                f"topic takes only {', '.join(PLAIN_FIELDS)}; remove {key!r} or the "
                "'sow: false'",
                source=source,
                where=f"{where}.{key}",
            )
    return True
