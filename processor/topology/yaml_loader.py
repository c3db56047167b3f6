"""The kafka-sow YAML topology format (documented in ``docs/topology.md``).

A document is a mapping with ``topics`` (a list, required) and ``defaults`` (optional)::

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
directory and stored as an absolute path; the file must exist.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from processor.errors import TopologyError, ValueFormatError
from processor.topology import model, quantities
from processor.topology.assemble import assemble, check_topic, read_text
from processor.topology.model import PlainTopic, SowTopic, Topic, Topology

TOP_LEVEL_KEYS = ("defaults", "topics")
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
    "expiration",
    "hash_indexes",
    "indexes",
    "history",
    "preprocessing",
    "enrichment",
    "pattern",
    "sow",
)
#: The fields of a plain topic (``sow: false``).
PLAIN_FIELDS = ("name", "sow", "message_type", "kafka_topic", "partitions", "schema")
DEFAULT_FIELDS = ("message_type", "durability", "recovery_point", "partitions", "expiration")
KEY_GENERATOR_FIELDS = ("factory", "options")

#: YAML field -> SowTopic attribute, where they differ.
_ATTRIBUTE = {"key": "keys", "expiration": "expiration_s"}
_YAML_NAME = {attribute: name for name, attribute in _ATTRIBUTE.items()}


def _describe(value: object) -> str:
    """How a YAML value reads in a message: its kind and its text."""
    kinds: list[tuple[type, str]] = [
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (str, "the string"),
        (list, "a list"),
        (dict, "a mapping"),
        (datetime, "a timestamp"),
        (date, "a date"),
    ]
    if value is None:
        return "nothing (null)"
    kind = next((label for cls, label in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{kind} {value!r}"


def _text(value: object, expected: str) -> str:
    if not isinstance(value, str) or not value.strip():
        quote = " (quote it to make it text)" if isinstance(value, int | float) else ""
        raise ValueFormatError(f"expected {expected}, got {_describe(value)}{quote}")
    return value.strip()


def _message_type(value: object) -> str:
    return quantities.parse_choice(
        _text(value, "a message type"), model.MESSAGE_TYPES, "message_type"
    )


def _durability(value: object) -> model.Durability:
    allowed = [d.value for d in model.Durability]
    return model.Durability(
        quantities.parse_choice(_text(value, "persistent or transient"), allowed, "durability")
    )


def _recovery_point(value: object) -> model.RecoveryPoint:
    if isinstance(value, datetime):
        return quantities.parse_recovery_point(value)
    return quantities.parse_recovery_point(
        _text(value, "epoch, now or a timestamp (20240131T100000Z)")
    )


def _partitions(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueFormatError(f"expected a positive integer (1 or more), got {_describe(value)}")
    return value


def _expiration(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return quantities.parse_interval(str(value))  # raises: a unit is required
    return quantities.parse_expiration(
        _text(value, "an interval such as 30s, or enabled or disabled")
    )


def _history(value: object) -> model.History:
    if not isinstance(value, dict) or set(value) != {"window", "granularity"}:
        raise ValueFormatError(
            "history is a mapping with exactly 'window' and 'granularity', both intervals "
            f"(e.g. {{window: 7d, granularity: 15m}}), got {_describe(value)}"
        )
    window = quantities.parse_interval(_text(value["window"], "an interval such as 7d"))
    granularity = quantities.parse_interval(
        _text(value["granularity"], "an interval such as 15m or 0s")
    )
    return model.History(window, granularity)


def _paths(value: object) -> tuple[str, ...]:
    expected = "a field path such as /orderId, or a list of them"
    if isinstance(value, str):
        return (quantities.check_key_path(_text(value, expected)),)
    if isinstance(value, list):
        return tuple(
            quantities.check_key_path(_text(item, "a field path such as /orderId"))
            for item in value
        )
    raise ValueFormatError(f"expected {expected}, got {_describe(value)}")


def _hash_indexes(value: object) -> tuple[model.HashIndexSpec, ...]:
    expected = "a list of hash indexes, each a field path or a list of field paths"
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueFormatError(f"expected {expected}, got {_describe(value)}")
    specs = []
    for item in items:
        keys = _paths(item)
        if not keys:
            raise ValueFormatError("a hash index needs at least one field path; got an empty list")
        specs.append(model.HashIndexSpec(keys))
    return tuple(specs)


def _fields(value: object) -> tuple[str, ...]:
    """Preprocessing or enrichment: a list of ``expression AS /target`` texts."""
    expected = "a list of fields, each 'expression AS /target'"
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueFormatError(f"expected {expected}, got {_describe(value)}")
    return tuple(_text(item, expected) for item in items)


def _name(value: object) -> str:
    return _text(value, "a non-empty name")


def _key_generator(value: object) -> model.KeyGeneratorSpec:
    if isinstance(value, str):
        return model.KeyGeneratorSpec(quantities.check_factory_path(value))
    if not isinstance(value, dict):
        raise ValueFormatError(
            f"expected {{factory: 'package.module:factory', options: {{...}}}} or a dotted "
            f"path, got {_describe(value)}"
        )
    for key in value:
        if key not in KEY_GENERATOR_FIELDS:
            raise ValueFormatError(quantities.unknown_name("key", str(key), KEY_GENERATOR_FIELDS))
    if "factory" not in value:
        raise ValueFormatError("'factory' is required: the dotted path 'package.module:factory'")
    factory = quantities.check_factory_path(_text(value["factory"], "a dotted path"))
    options = value.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise ValueFormatError(
            f"'options' must be a mapping with string keys, got {_describe(options)}"
        )
    return model.KeyGeneratorSpec(factory, MappingProxyType(dict(options)))


#: Field parsers; each raises ValueError with a message that says what is allowed.
_PARSERS: dict[str, Callable[[object], Any]] = {
    "message_type": _message_type,
    "key": _paths,
    "key_domain": _name,
    "key_generator": _key_generator,
    "durability": _durability,
    "recovery_point": _recovery_point,
    "kafka_topic": _name,
    "partitions": _partitions,
    "expiration": _expiration,
    "hash_indexes": _hash_indexes,
    "indexes": _paths,
    "history": _history,
    "preprocessing": _fields,
    "enrichment": _fields,
    "pattern": lambda value: quantities.check_topic_pattern(_text(value, "a regular expression")),
}


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


def load_yaml(path: str | Path) -> Topology:
    """Load a YAML topology file."""
    return parse_yaml(read_text(path), str(path))


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


def parse_yaml(text: str, source: str) -> Topology:
    """Parse YAML topology ``text``; ``source`` names the file in messages and anchors paths."""
    try:
        return _parse_yaml(text, source)
    except RecursionError:
        # Aliases can nest values deeper than MAX_DEPTH without composing them again.
        raise TopologyError(
            f"the document nests values too deeply (more than {MAX_DEPTH} levels, or aliases "
            "that refer to themselves); a topology needs a few levels",
            source=source,
        ) from None


def _parse_yaml(text: str, source: str) -> Topology:
    document = _load_document(text, source)
    if document is None:
        raise TopologyError(
            "the file is empty; expected a mapping with a 'topics' list", source=source
        )
    if not isinstance(document, dict):
        raise TopologyError(
            f"the top level must be a mapping with 'topics' (and optional 'defaults'), "
            f"got {_describe(document)}",
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
            f"expected a list of topics, got {_describe(topics)}", source=source, where="topics"
        )
    base = Path(source).parent
    entries = [
        (_topic(raw, index, defaults, source, base), source, f"topics[{index}]")
        for index, raw in enumerate(topics)
    ]
    return assemble(entries, (source,))


def _field(source: str, where: str, name: str, value: object) -> Any:
    try:
        return _PARSERS[name](value)
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=where) from None


def _defaults(raw: object, source: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TopologyError(
            f"expected a mapping of default topic fields, got {_describe(raw)}",
            source=source,
            where="defaults",
        )
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in DEFAULT_FIELDS:
            message = quantities.unknown_name("default", str(key), DEFAULT_FIELDS)
            raise TopologyError(message, source=source, where=f"defaults.{key}")
        parsed[key] = _field(source, f"defaults.{key}", key, value)
    return parsed


def _topic(raw: object, index: int, defaults: dict[str, Any], source: str, base: Path) -> Topic:
    where = f"topics[{index}]"
    if not isinstance(raw, dict):
        raise TopologyError(
            f"a topic is a mapping of fields, got {_describe(raw)}", source=source, where=where
        )
    if "name" not in raw:
        raise TopologyError(
            "the topic has no 'name'; every topic needs one", source=source, where=where
        )
    try:
        name = _name(raw["name"])
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=f"{where}.name") from None
    where = f"topics[{name}]"
    for key in raw:
        if key not in TOPIC_FIELDS:
            message = quantities.unknown_name(
                "field", str(key), TOPIC_FIELDS, parent=f"topic {name!r}"
            )
            raise TopologyError(message, source=source, where=f"{where}.{key}")
    plain = _plain(raw, name, source, where)
    fields: dict[str, Any] = {k: v for k, v in defaults.items() if not plain or k in PLAIN_FIELDS}
    for key, value in raw.items():
        if key in _PARSERS:
            fields[key] = _field(source, f"{where}.{key}", key, value)
    fields["schema"] = _schema(raw, fields.get("message_type", "json"), source, where, base)
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
            f"subscriptions only, nothing stored), got {_describe(value)}",
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


def _schema(
    raw: dict[Any, Any], message_type: str, source: str, where: str, base: Path
) -> str | None:
    where = f"{where}.schema"
    if "schema" not in raw:
        if message_type == "avro":
            raise TopologyError(
                "message_type avro needs 'schema': the path of an Avro schema (.avsc) file, "
                "relative to this file",
                source=source,
                where=where,
            )
        return None
    if message_type != "avro":
        raise TopologyError(
            f"'schema' is allowed only for message_type avro; this topic is {message_type}",
            source=source,
            where=where,
        )
    try:
        text = _text(raw["schema"], "the path of an Avro schema (.avsc) file")
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=where) from None
    path = (base / text).resolve()
    if not path.is_file():
        raise TopologyError(
            f"schema file {str(path)!r} does not exist; give a path relative to the "
            "directory of this file",
            source=source,
            where=where,
        )
    return str(path)
