"""The field values of the kafka-sow YAML topology format (``docs/topology.md``), shared by
its topics (:mod:`processor.topology.yaml_loader`) and its views and conflated topics
(:mod:`processor.topology.yaml_entries`).

Each parser in :data:`PARSERS` takes one YAML value and returns the model's value, or
raises :class:`ValueError` whose message says what was wrong and what is allowed;
:func:`parse_field` wraps that into :class:`~processor.errors.TopologyError` with the file
and the field path.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from processor.errors import TopologyError, ValueFormatError
from processor.topology import model, quantities
from processor.topology.message_types import TRAITS, parse_message_type, proto_schema
from processor.topology.message_types import traits as message_traits
from processor.topology.upserts import UPSERT_FIELDS, UpsertSpec, parse_upsert_key

KEY_GENERATOR_FIELDS = ("factory", "options")


def describe(value: object) -> str:
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


def parse_text(value: object, expected: str) -> str:
    """``value`` as non-empty text, stripped; anything else is a ValueError."""
    if not isinstance(value, str) or not value.strip():
        quote = " (quote it to make it text)" if isinstance(value, int | float) else ""
        raise ValueFormatError(f"expected {expected}, got {describe(value)}{quote}")
    return value.strip()


def _message_type(value: object) -> str:
    return parse_message_type(parse_text(value, "a message type"), "message_type")


def _durability(value: object) -> model.Durability:
    allowed = [d.value for d in model.Durability]
    return model.Durability(
        quantities.parse_choice(parse_text(value, "persistent or transient"), allowed, "durability")
    )


def _recovery_point(value: object) -> model.RecoveryPoint:
    if isinstance(value, datetime):
        return quantities.parse_recovery_point(value)
    return quantities.parse_recovery_point(
        parse_text(value, "epoch, now or a timestamp (20240131T100000Z)")
    )


def _partitions(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueFormatError(f"expected a positive integer (1 or more), got {describe(value)}")
    return value


def _expiration(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return quantities.parse_interval(str(value))  # raises: a unit is required
    return quantities.parse_expiration(
        parse_text(value, "an interval such as 30s, or enabled or disabled")
    )


def _history(value: object) -> model.History:
    if not isinstance(value, dict) or set(value) != {"window", "granularity"}:
        raise ValueFormatError(
            "history is a mapping with exactly 'window' and 'granularity', both intervals "
            f"(e.g. {{window: 7d, granularity: 15m}}), got {describe(value)}"
        )
    window = quantities.parse_interval(parse_text(value["window"], "an interval such as 7d"))
    granularity = quantities.parse_interval(
        parse_text(value["granularity"], "an interval such as 15m or 0s")
    )
    return model.History(window, granularity)


def _paths(value: object) -> tuple[str, ...]:
    expected = "a field path such as /orderId, or a list of them"
    if isinstance(value, str):
        return (quantities.check_key_path(parse_text(value, expected)),)
    if isinstance(value, list):
        expected = "a field path such as /orderId"
        return tuple(quantities.check_key_path(parse_text(item, expected)) for item in value)
    raise ValueFormatError(f"expected {expected}, got {describe(value)}")


def _hash_indexes(value: object) -> tuple[model.HashIndexSpec, ...]:
    expected = "a list of hash indexes, each a field path or a list of field paths"
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueFormatError(f"expected {expected}, got {describe(value)}")
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
        raise ValueFormatError(f"expected {expected}, got {describe(value)}")
    return tuple(parse_text(item, expected) for item in items)


def parse_name(value: object) -> str:
    return parse_text(value, "a non-empty name")


def _key_generator(value: object) -> model.KeyGeneratorSpec:
    if isinstance(value, str):
        return model.KeyGeneratorSpec(quantities.check_factory_path(value))
    if not isinstance(value, dict):
        raise ValueFormatError(
            f"expected {{factory: 'package.module:factory', options: {{...}}}} or a dotted "
            f"path, got {describe(value)}"
        )
    for key in value:
        if key not in KEY_GENERATOR_FIELDS:
            raise ValueFormatError(quantities.unknown_name("key", str(key), KEY_GENERATOR_FIELDS))
    if "factory" not in value:
        raise ValueFormatError("'factory' is required: the dotted path 'package.module:factory'")
    factory = quantities.check_factory_path(parse_text(value["factory"], "a dotted path"))
    options = value.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise ValueFormatError(
            f"'options' must be a mapping with string keys, got {describe(options)}"
        )
    return model.KeyGeneratorSpec(factory, MappingProxyType(dict(options)))


def _upsert(value: object) -> UpsertSpec | None:
    """``true`` (the defaults), ``false`` (none), or a mapping of :data:`UPSERT_FIELDS`."""
    if isinstance(value, bool):
        return UpsertSpec() if value else None
    if not isinstance(value, dict):
        raise ValueFormatError(
            "upsert is true, false or a mapping with 'topic' (a Kafka topic name) and 'key' "
            f"(sow_key or fields), got {describe(value)}"
        )
    for key in value:
        if key not in UPSERT_FIELDS:
            raise ValueFormatError(quantities.unknown_name("field", str(key), UPSERT_FIELDS))
    topic = parse_name(value["topic"]) if "topic" in value else ""
    key = value.get("key", "sow_key")
    return UpsertSpec(topic, parse_upsert_key(parse_text(key, "sow_key or fields")))


#: Field parsers; each raises ValueError with a message that says what is allowed.
PARSERS: dict[str, Callable[[object], Any]] = {
    "name": parse_name,
    "message_type": _message_type,
    "key": _paths,
    "key_domain": parse_name,
    "key_generator": _key_generator,
    "durability": _durability,
    "recovery_point": _recovery_point,
    "kafka_topic": parse_name,
    "partitions": _partitions,
    "expiration": _expiration,
    "hash_indexes": _hash_indexes,
    "indexes": _paths,
    "history": _history,
    "preprocessing": _fields,
    "enrichment": _fields,
    "upsert": _upsert,
    "pattern": lambda value: quantities.check_topic_pattern(
        parse_text(value, "a regular expression")
    ),
}


def named(
    raw: object, where: str, what: str, allowed: tuple[str, ...], source: str
) -> tuple[dict[Any, Any], str, str]:
    """An item of a list of named mappings (a topic, a view...) at ``where``
    (``topics[2]``): the mapping, its name, and its field path from now on
    (``topics[ORDERS]``). It must have a ``name`` and only the fields ``allowed``."""
    if not isinstance(raw, dict):
        raise TopologyError(
            f"a {what} is a mapping of fields, got {describe(raw)}", source=source, where=where
        )
    if "name" not in raw:
        raise TopologyError(
            f"the {what} has no 'name'; every {what} needs one", source=source, where=where
        )
    name = parse_field(source, f"{where}.name", "name", raw["name"])
    where = f"{where[: where.index('[')]}[{name}]"
    for key in raw:
        if key not in allowed:
            message = quantities.unknown_name("field", str(key), allowed, parent=f"{what} {name!r}")
            raise TopologyError(message, source=source, where=f"{where}.{key}")
    return raw, name, where


def parse_field(source: str, where: str, name: str, value: object) -> Any:
    try:
        return PARSERS[name](value)
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=where) from None


def schema_path(
    raw: dict[Any, Any], message_type: str, source: str, where: str, base: Path
) -> str | None:
    """The absolute path of ``raw``'s ``schema`` file, which a type that needs one
    (``traits(message_type).schema``) must give and any other must not."""
    where = f"{where}.schema"
    needs = message_traits(message_type).schema
    if "schema" not in raw:
        if needs is not None:
            raise TopologyError(
                f"message_type {message_type} needs 'schema': the path of {needs}, "
                "relative to this file",
                source=source,
                where=where,
            )
        return None
    if needs is None:
        takes = ", ".join(t.name for t in TRAITS.values() if t.schema is not None)
        raise TopologyError(
            f"'schema' is allowed only for message types {takes}; this one is {message_type}",
            source=source,
            where=where,
        )
    try:
        written = parse_text(raw["schema"], f"the path of {needs}")
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=where) from None
    return _existing(base / written, "schema file", source, where)


def _existing(path: Path, what: str, source: str, where: str) -> str:
    resolved = path.resolve()
    if not resolved.exists():
        raise TopologyError(
            f"{what} {str(resolved)!r} does not exist; give a path relative to the "
            "directory of this file",
            source=source,
            where=where,
        )
    return str(resolved)


#: The fields that configure a message type (a topic's, or a composite part's).
FORMAT_FIELDS = ("message_type", "schema", "proto_type", "proto_path", "parts")


def message_format(
    raw: dict[Any, Any], message_type: str, source: str, where: str, base: Path
) -> dict[str, Any]:
    """The model fields that configure ``raw``'s message type ``message_type``: its
    ``schema``; protobuf's ``proto_type`` and ``proto_path`` (the directories a .proto
    file's imports are found in, folded into ``schema``); a composite type's ``parts``."""
    traits = message_traits(message_type)
    schema = schema_path(raw, message_type, source, where, base)
    proto = schema is not None and traits.schema_type
    for field, allowed in (("proto_type", proto), ("proto_path", proto)):
        if field in raw and not allowed:
            raise TopologyError(
                f"'{field}' is allowed only for message_type protobuf; this one is {message_type}",
                source=source,
                where=f"{where}.{field}",
            )
    out: dict[str, Any] = {"schema": schema}
    if proto and schema is not None:
        if "proto_type" not in raw:
            raise TopologyError(
                "message_type protobuf needs 'proto_type': the message each payload is "
                "(package.Message)",
                source=source,
                where=f"{where}.proto_type",
            )
        out["proto_type"] = _text(raw["proto_type"], "a message name", source, where, "proto_type")
        include = raw.get("proto_path", [])
        include = [include] if isinstance(include, str) else include
        if not isinstance(include, list):
            raise TopologyError(
                f"expected a directory or a list of them, got {describe(include)}",
                source=source,
                where=f"{where}.proto_path",
            )
        dirs = [
            _existing(
                base / _text(d, "a directory", source, where, "proto_path"),
                "directory",
                source,
                f"{where}.proto_path[{i}]",
            )
            for i, d in enumerate(include)
        ]
        out["schema"] = proto_schema(schema, dirs)
    registry = _registry(raw.get("schema_registry"), message_type, source, where)
    if registry is not None:
        out["schema_registry"] = registry
    if "parts" in raw and not traits.composite:
        raise TopologyError(
            f"'parts' is allowed only for the composite message types; this one is {message_type}",
            source=source,
            where=f"{where}.parts",
        )
    if traits.composite:
        out["parts"] = _parts(raw.get("parts"), message_type, source, f"{where}.parts", base)
    return out


#: The fields of a topic's ``schema_registry`` mapping.
REGISTRY_FIELDS = ("url", "subject", "message")


def _registry(
    raw: object, message_type: str, source: str, where: str
) -> model.SchemaRegistry | None:
    """A registry type's ``schema_registry``: its URL (a string), or a mapping of ``url``
    and ``subject`` (default: the Kafka topic's ``<topic>-value``, Confluent's
    TopicNameStrategy); any other type must not give one."""
    at = f"{where}.schema_registry"
    needs = message_traits(message_type).registry
    if raw is None:
        if needs:
            raise TopologyError(
                f"message_type {message_type} needs 'schema_registry': the registry's URL "
                "(or a mapping of url and subject)",
                source=source,
                where=at,
            )
        return None
    if not needs:
        takes = ", ".join(t.name for t in TRAITS.values() if t.registry)
        raise TopologyError(
            f"'schema_registry' is allowed only for message types {takes}; this one is "
            f"{message_type}",
            source=source,
            where=at,
        )
    entry = {"url": raw} if isinstance(raw, str) else raw
    if not isinstance(entry, dict) or "url" not in entry:
        raise TopologyError(
            f"expected the registry's URL or a mapping with url (and subject), got {describe(raw)}",
            source=source,
            where=at,
        )
    for key in entry:
        if key not in REGISTRY_FIELDS:
            message = quantities.unknown_name(
                "field", str(key), REGISTRY_FIELDS, parent="schema_registry"
            )
            raise TopologyError(message, source=source, where=f"{at}.{key}")
    url = _text(entry["url"], "a URL", source, at, "url")
    for one in url.split(","):
        if not one.strip().startswith(("http://", "https://")):
            raise TopologyError(
                f"the registry's URL {one.strip()!r} is not an http:// or https:// URL",
                source=source,
                where=f"{at}.url",
            )
    subject, message = (
        _text(entry[field], what, source, at, field) if field in entry else ""
        for field, what in (("subject", "a subject"), ("message", "a message name"))
    )
    return model.SchemaRegistry(url, subject, message)


def _text(value: object, expected: str, source: str, where: str, field: str) -> str:
    try:
        return parse_text(value, expected)
    except ValueError as exc:
        raise TopologyError(str(exc), source=source, where=f"{where}.{field}") from None


def _parts(
    raw: object, message_type: str, source: str, where: str, base: Path
) -> tuple[model.MessagePart, ...]:
    if not isinstance(raw, list) or not raw:
        raise TopologyError(
            f"message_type {message_type} needs 'parts': a list of the message types of its "
            f"parts, in order (each a name such as json or binary, or a mapping with "
            f"message_type and its schema)",
            source=source,
            where=where,
        )
    parts = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        entry = {"message_type": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or "message_type" not in entry:
            raise TopologyError(
                f"a part is a message type name or a mapping with message_type, got "
                f"{describe(item)}",
                source=source,
                where=at,
            )
        for key in entry:
            if key not in FORMAT_FIELDS[:-1]:
                message = quantities.unknown_name(
                    "field", str(key), FORMAT_FIELDS[:-1], parent="a part"
                )
                raise TopologyError(message, source=source, where=f"{at}.{key}")
        kind = parse_field(source, f"{at}.message_type", "message_type", entry["message_type"])
        if message_traits(kind).registry:
            raise TopologyError(
                f"a part of a composite message cannot be {kind}: a part is not framed "
                "by the Schema Registry",
                source=source,
                where=at,
            )
        if message_traits(kind).composite:
            raise TopologyError(
                f"a part of a composite message cannot be {kind} itself; give the types of "
                "its parts",
                source=source,
                where=at,
            )
        fmt = message_format(entry, kind, source, at, base)
        parts.append(model.MessagePart(kind, fmt["schema"], fmt.get("proto_type")))
    return tuple(parts)
