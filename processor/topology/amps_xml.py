"""Read SOW topics from an AMPS configuration file (``<AMPSConfig>``), stdlib ElementTree only.

Contract: :func:`parse_amps_config` returns a :class:`~processor.topology.model.Topology` of
the ``AMPSConfig/SOW/Topic`` elements in document order, or raises
:class:`~processor.errors.TopologyError` naming the file, the element path
(``AMPSConfig/SOW/Topic[2]/Key``; a Topic is always numbered from 1, other elements only
when repeated), what was wrong and what is allowed.

* ``TopicMetaData`` is a synonym of ``SOW``, ``TopicDefinition`` of ``Topic``; inside a topic
  ``Topic`` is the pre-5.0 synonym of ``Name`` and ``Duration`` of ``Durability``.
* Element names are case sensitive (as in AMPS); enumerated values (message types,
  persistent/transient, epoch/now, enabled/disabled) are not.
* ``${VAR}`` in a text value is replaced by the environment variable ``VAR`` (an unset
  variable is an error); ``AMPS_CONFIG_DIRECTORY`` and ``AMPS_CONFIG_PATH`` default to the
  configuration file's directory and path. Only values that are read are expanded.
* Avro: a topic's ``MessageType`` may name a type declared in
  ``AMPSConfig/MessageTypes/MessageType`` with ``Module`` avro and ``Schema`` (a path relative
  to the configuration file). ``KeyGenerator/Module`` is a Python dotted path, or the
  ``Name`` of an ``AMPSConfig/Modules/Module`` whose ``Library`` is one.
* Kafka extensions inside a Topic: ``KafkaTopic`` and ``Partitions``.
* Plain topics (no SOW): an ``AMPSConfig/TransactionLog/Topic`` whose ``Name`` is not a SOW
  topic of the file declares one (:data:`PLAIN_ELEMENTS`: ``Name``, ``MessageType``,
  ``KafkaTopic``, ``Partitions``); one that names a SOW topic is that topic's log and
  adds nothing. A ``Name`` that is a regular expression (AMPS logs every matching topic)
  is ignored with a warning: kafka-sow needs each plain topic by name.
* Topic options kafka-sow does not implement yet (:data:`NOT_IMPLEMENTED`) and the other SOW
  entries (views, queues, conflated topics) are validated, and logged as warnings "accepted
  but not implemented yet". Any other element inside SOW or Topic is an error. Top-level
  sections other than SOW, MessageTypes, Modules and TransactionLog are not read.
"""

from __future__ import annotations

import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar

from processor.errors import TopologyError
from processor.topology.assemble import assemble, check_topic, read_text
from processor.topology.model import (
    MESSAGE_TYPES,
    Durability,
    HashIndexSpec,
    History,
    KeyGeneratorSpec,
    PlainTopic,
    SowTopic,
    Topic,
    Topology,
)
from processor.topology.quantities import (
    check_factory_path,
    check_key_path,
    parse_choice,
    parse_expiration,
    parse_interval,
    parse_positive_int,
    parse_recovery_point,
    parse_size,
    unknown_name,
)

_log = logging.getLogger(__name__)
T = TypeVar("T")

SOW_SECTIONS = ("SOW", "TopicMetaData")
TOPIC_ELEMENTS = ("Topic", "TopicDefinition")
# fmt: off
SOW_NOT_IMPLEMENTED = (
    "View", "ViewDefinition", "Queue", "QueueDefinition", "LocalQueue", "GroupLocalQueue",
    "ConflatedTopic", "ReplicaDefinition",
)
#: Topic elements kafka-sow implements (``Topic`` = Name, ``Duration`` = Durability).
IMPLEMENTED = (
    "Name", "Topic", "MessageType", "Key", "KeyDomain", "KeyGenerator", "Durability",
    "Duration", "RecoveryPoint", "Expiration", "HashIndex", "Index", "KafkaTopic", "Partitions",
    "History", "Preprocessing", "Enrichment",
)
#: AMPS Topic options accepted (and validated) but not implemented yet.
NOT_IMPLEMENTED = (
    "FileName", "SlabSize", "InitialSlabCount", "RecordSize", "InitialSize", "IncrementSize",
    "ExpectedKeyCountHint", "Pattern",
)
#: Elements of a TransactionLog Topic (a plain topic when it names no SOW topic).
PLAIN_ELEMENTS = ("Name", "MessageType", "KafkaTopic", "Partitions")
#: Characters that make a TransactionLog Topic Name a pattern rather than a name.
PATTERN_CHARACTERS = frozenset("^$*+?()[]{}|\\")
# fmt: on
_REPEATABLE = ("Key", "HashIndex", "Index")
_XML_NAME = {
    "keys": "Key",
    "key_generator": "KeyGenerator",
    "key_domain": "KeyDomain",
    "kafka_topic": "KafkaTopic",
    "hash_indexes": "HashIndex",
    "indexes": "Index",
    "message_type": "MessageType",
    "history": "History",
    "expiration_s": "Expiration",
    "preprocessing": "Preprocessing",
    "enrichment": "Enrichment",
}
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Child = tuple[ET.Element, str]


def _children(element: ET.Element, where: str, numbered: tuple[str, ...] = ()) -> list[Child]:
    """Child elements with their paths; numbered from 1 when repeated or listed in ``numbered``."""
    counts: dict[str, int] = {}
    for child in element:
        counts[child.tag] = counts.get(child.tag, 0) + 1
    seen: dict[str, int] = {}
    result = []
    for child in element:
        seen[child.tag] = seen.get(child.tag, 0) + 1
        index = f"[{seen[child.tag]}]" if counts[child.tag] > 1 or child.tag in numbered else ""
        result.append((child, f"{where}/{child.tag}{index}"))
    return result


class _Reader:
    """Reads one configuration file: its source, directory, environment and declarations."""

    def __init__(self, root: ET.Element, source: str, environ: Mapping[str, str]) -> None:
        self.source = source
        path = Path(source).resolve()
        self.base = path.parent
        self.environ = {"AMPS_CONFIG_DIRECTORY": str(self.base), "AMPS_CONFIG_PATH": str(path)}
        self.environ.update(environ)
        self.message_types = self._declared(root, "MessageTypes", "MessageType")
        self.modules = self._declared(root, "Modules", "Module")

    def fail(self, message: str, where: str) -> NoReturn:
        raise TopologyError(message, source=self.source, where=where)

    def _declared(self, root: ET.Element, section: str, item: str) -> dict[str, Child]:
        found: dict[str, Child] = {}
        for parent, parent_where in _children(root, root.tag):
            if parent.tag == section:
                for child, where in _children(parent, parent_where):
                    name = child.find("Name")
                    if child.tag == item and name is not None:
                        found[self.text(name, f"{where}/Name")] = (child, where)
        return found

    def expand(self, text: str, where: str) -> str:
        def variable(match: re.Match[str]) -> str:
            name = match[1]
            if not _VARIABLE_NAME.match(name):
                self.fail(f"${{{name}}} is not a valid environment variable reference", where)
            if name not in self.environ:
                self.fail(
                    f"environment variable {name!r} is not set; set it or replace ${{{name}}}",
                    where,
                )
            return self.environ[name]

        return _VARIABLE.sub(variable, text)

    def text(self, element: ET.Element, where: str, *, empty: bool = False) -> str:
        """The expanded, stripped text of a value element."""
        if len(element):
            self.fail(f"<{element.tag}> holds text, not the element <{element[0].tag}>", where)
        text = self.expand((element.text or "").strip(), where)
        if not text and not empty:
            self.fail(f"<{element.tag}> is empty; it needs a value", where)
        return text

    def value(self, element: ET.Element, where: str, parse: Callable[[str], T]) -> T:
        try:
            return parse(self.text(element, where))
        except ValueError as exc:
            self.fail(str(exc), where)

    def group(
        self, element: ET.Element, where: str, allowed: tuple[str, ...]
    ) -> dict[str, list[Child]]:
        """Children by tag; an element not in ``allowed`` is an error."""
        groups: dict[str, list[Child]] = {}
        for child, child_where in _children(element, where):
            if child.tag not in allowed:
                self.fail(
                    unknown_name("element", child.tag, allowed, parent=f"<{element.tag}>"),
                    child_where,
                )
            groups.setdefault(child.tag, []).append((child, child_where))
        return groups

    def message_type(self, value: str, where: str) -> tuple[str, str | None]:
        """(message type, schema path) of a Topic's MessageType value."""
        declared = self.message_types.get(value) or next(
            (d for name, d in self.message_types.items() if name.lower() == value.lower()), None
        )
        if declared is None:
            if value.lower() == "avro":
                self.fail(
                    "MessageType avro needs a schema: declare <MessageTypes><MessageType><Name>N"
                    "</Name><Module>avro</Module><Schema>file.avsc</Schema></MessageType>"
                    "</MessageTypes> in AMPSConfig and use N as the MessageType",
                    where,
                )
            names = ", ".join(sorted(self.message_types)) or "none"
            try:
                return parse_choice(value, ("json", "fix", "nvfix", "binary"), "MessageType"), None
            except ValueError as exc:
                self.fail(
                    f"{exc}, or a MessageType declared in AMPSConfig/MessageTypes "
                    f"(declared: {names})",
                    where,
                )
        element, decl_where = declared
        module_el, schema_el = element.find("Module"), element.find("Schema")
        if module_el is None:
            self.fail(
                "the MessageType declaration has no <Module>; allowed: " + ", ".join(MESSAGE_TYPES),
                decl_where,
            )
        module = self.value(
            module_el, f"{decl_where}/Module", lambda v: parse_choice(v, MESSAGE_TYPES, "Module")
        )
        schema_where = f"{decl_where}/Schema"
        if schema_el is None:
            if module == "avro":
                self.fail(
                    "a MessageType with Module avro needs <Schema>, the .avsc file path", decl_where
                )
            return module, None
        if module != "avro":
            self.fail(f"<Schema> is allowed only with Module avro, not {module}", schema_where)
        path = (self.base / self.text(schema_el, schema_where)).resolve()
        if not path.is_file():
            self.fail(
                f"schema file {str(path)!r} does not exist; give a path relative to this file",
                schema_where,
            )
        return module, str(path)

    def key_generator(self, element: ET.Element, where: str) -> KeyGeneratorSpec:
        groups = self.group(element, where, ("Module", "Options"))
        for tag, items in groups.items():
            if len(items) > 1:
                self.fail(f"<{tag}> is given {len(items)} times; it is allowed once", items[1][1])
        if "Module" not in groups:
            self.fail(
                "<KeyGenerator> needs <Module>: a Python factory 'package.module:factory'", where
            )
        module_el, module_where = groups["Module"][0]
        module = self.text(module_el, module_where)
        hint = "; or the Name of an AMPSConfig/Modules/Module whose Library is such a path"
        if module in self.modules:
            declared, declared_where = self.modules[module]
            library = declared.find("Library")
            if library is None:
                self.fail(
                    "the Module has no <Library>: the Python factory 'package.module:factory'",
                    declared_where,
                )
            module_where, hint = f"{declared_where}/Library", ""
            module = self.text(library, module_where)
        try:
            factory = check_factory_path(module)
        except ValueError as exc:
            self.fail(f"{exc}{hint}", module_where)
        options: dict[str, Any] = {}
        for options_el, options_where in groups.get("Options", []):
            for option, option_where in _children(options_el, options_where):
                if option.tag in options:
                    self.fail(f"option <{option.tag}> is given twice", option_where)
                options[option.tag] = self.text(option, option_where, empty=True)
        return KeyGeneratorSpec(factory, MappingProxyType(options))

    def history(self, element: ET.Element, where: str) -> History:
        """``<History><Window>..</Window><Granularity>..</Granularity></History>``."""
        groups = self.group(element, where, ("Window", "Granularity"))
        for required in ("Window", "Granularity"):
            if required not in groups:
                self.fail(f"<History> needs <{required}>, an interval such as 7d or 15m", where)
        window = self.value(*groups["Window"][0], parse_interval)
        granularity = self.value(*groups["Granularity"][0], parse_interval)
        try:
            return History(window, granularity)
        except ValueError as exc:
            self.fail(str(exc), where)

    def fields(self, element: ET.Element, where: str) -> tuple[str, ...]:
        """``<Preprocessing>`` or ``<Enrichment>``: the texts of its ``<Field>`` elements."""
        fields = self.group(element, where, ("Field",)).get("Field", [])
        if not fields:
            self.fail(f"<{element.tag}> needs <Field>s, each 'expression AS /target'", where)
        return tuple(self.text(*field) for field in fields)

    def accept_unimplemented(self, tag: str, items: list[Child]) -> None:
        """Validate a not-yet-implemented Topic option, then warn that it has no effect."""
        element, where = items[0]
        simple: dict[str, Callable[[str], object]] = {
            "FileName": str,
            "Pattern": str,
            "SlabSize": parse_size,
            "RecordSize": parse_size,
            "InitialSlabCount": lambda v: parse_positive_int(v, "InitialSlabCount", 1024),
            "InitialSize": lambda v: parse_positive_int(v, "InitialSize"),
            "IncrementSize": lambda v: parse_positive_int(v, "IncrementSize"),
            "ExpectedKeyCountHint": lambda v: parse_positive_int(v, "ExpectedKeyCountHint"),
        }
        self.value(element, where, simple[tag])
        _log.warning(
            "%s: %s: <%s> is accepted but not implemented yet; it has no effect",
            self.source,
            where,
            tag,
        )

    def topic(self, element: ET.Element, where: str) -> SowTopic:
        groups = self.group(element, where, IMPLEMENTED + NOT_IMPLEMENTED)
        for tag, items in groups.items():
            if tag not in _REPEATABLE and len(items) > 1:
                self.fail(
                    f"<{tag}> is given {len(items)} times; it is allowed once per topic",
                    items[1][1],
                )
        for first, second in (("Name", "Topic"), ("Durability", "Duration")):
            if first in groups and second in groups:
                self.fail(
                    f"<{second}> is the old synonym of <{first}>; give only one of them",
                    groups[second][0][1],
                )
        named = groups.get("Name") or groups.get("Topic")
        if named is None:
            self.fail(
                "the topic has no <Name> (or pre-5.0 <Topic>); every SOW topic needs one", where
            )
        name = self.text(*named[0])
        fields: dict[str, Any] = {}
        message_type = "json"
        if "MessageType" in groups:
            type_el, type_where = groups["MessageType"][0]
            message_type, fields["schema"] = self.message_type(
                self.text(type_el, type_where), type_where
            )
        fields["keys"] = tuple(self.value(*item, check_key_path) for item in groups.get("Key", []))
        fields["indexes"] = tuple(
            self.value(*item, check_key_path) for item in groups.get("Index", [])
        )
        fields["hash_indexes"] = tuple(
            self.hash_index(*item) for item in groups.get("HashIndex", [])
        )
        single: dict[str, tuple[str, Callable[[str], object]]] = {
            "KeyDomain": ("key_domain", str),
            "Durability": (
                "durability",
                lambda v: Durability(parse_choice(v, ("persistent", "transient"), "Durability")),
            ),
            "RecoveryPoint": ("recovery_point", parse_recovery_point),
            "Expiration": ("expiration_s", parse_expiration),
            "KafkaTopic": ("kafka_topic", str),
            "Partitions": ("partitions", lambda v: parse_positive_int(v, "Partitions")),
        }
        single["Duration"] = single["Durability"]
        for tag, (attribute, parse) in single.items():
            if tag in groups:
                fields[attribute] = self.value(*groups[tag][0], parse)
        if "History" in groups:
            fields["history"] = self.history(*groups["History"][0])
        for tag in ("Preprocessing", "Enrichment"):
            if tag in groups:
                fields[tag.lower()] = self.fields(*groups[tag][0])
        if "KeyGenerator" in groups:
            fields["key_generator"] = self.key_generator(*groups["KeyGenerator"][0])
        for tag in NOT_IMPLEMENTED:
            if tag in groups:
                self.accept_unimplemented(tag, groups[tag])
        if "History" in groups and fields.get("expiration_s") is not None:
            self.fail(
                "<Expiration> must be disabled when <History> is set (as in AMPS)",
                groups["Expiration"][0][1],
            )
        if "Pattern" in groups:
            for tag in ("History", "Preprocessing", "Enrichment"):
                if tag in groups:
                    self.fail(
                        f"a <Pattern> topic cannot have <{tag}> (as in AMPS)", groups[tag][0][1]
                    )
        topic = SowTopic(name=name, message_type=message_type, **fields)
        problem = check_topic(topic, lambda attribute: _XML_NAME[attribute])
        if problem is not None:
            tag = _XML_NAME[problem[0]]
            self.fail(problem[1], groups[tag][0][1] if tag in groups else named[0][1])
        return topic

    def plain_topic(self, element: ET.Element, where: str) -> PlainTopic | str:
        """The plain topic a TransactionLog Topic declares, or its name when it declares
        none (a pattern, or a SOW topic's name: the caller decides)."""
        groups = self.group(element, where, PLAIN_ELEMENTS)
        for tag, items in groups.items():
            if len(items) > 1:
                self.fail(f"<{tag}> is given {len(items)} times; it is allowed once", items[1][1])
        if "Name" not in groups:
            self.fail("the topic has no <Name>; every TransactionLog topic needs one", where)
        name = self.text(*groups["Name"][0])
        if any(c in PATTERN_CHARACTERS for c in name):
            _log.warning(
                "%s: %s: <Name> %r is a pattern; kafka-sow needs each topic without a SOW by "
                "name, so it is ignored",
                self.source,
                where,
                name,
            )
            return name
        fields: dict[str, Any] = {}
        if "MessageType" in groups:
            type_el, type_where = groups["MessageType"][0]
            fields["message_type"], fields["schema"] = self.message_type(
                self.text(type_el, type_where), type_where
            )
        if "KafkaTopic" in groups:
            fields["kafka_topic"] = self.text(*groups["KafkaTopic"][0])
        if "Partitions" in groups:
            fields["partitions"] = self.value(
                *groups["Partitions"][0], lambda v: parse_positive_int(v, "Partitions")
            )
        topic = PlainTopic(name=name, **fields)
        problem = check_topic(topic, lambda attribute: _XML_NAME.get(attribute, attribute))
        if problem is not None:
            tag = _XML_NAME.get(problem[0], problem[0])
            self.fail(problem[1], groups[tag][0][1] if tag in groups else groups["Name"][0][1])
        return topic

    def hash_index(self, element: ET.Element, where: str) -> HashIndexSpec:
        keys = self.group(element, where, ("Key",)).get("Key", [])
        if not keys:
            self.fail("<HashIndex> needs one or more <Key> field paths", where)
        return HashIndexSpec(tuple(self.value(*key, check_key_path) for key in keys))


def load_amps_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> Topology:
    """Load the SOW topics of an AMPS configuration file."""
    return parse_amps_config(read_text(path), str(path), environ=environ)


def parse_amps_config(
    text: str, source: str, *, environ: Mapping[str, str] | None = None
) -> Topology:
    """Parse AMPS configuration ``text``; ``source`` names the file and anchors relative paths.

    ``environ`` replaces ``os.environ`` for ``${VAR}`` expansion (tests).
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        problem = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise TopologyError(
            f"XML syntax error: {problem}", source=source, where=f"line {line}, column {column + 1}"
        ) from None
    if root.tag != "AMPSConfig":
        raise TopologyError(
            f"the root element is <{root.tag}>; an AMPS configuration has <AMPSConfig>",
            source=source,
            where=root.tag,
        )
    reader = _Reader(root, source, os.environ if environ is None else environ)
    sections = [(s, w) for s, w in _children(root, root.tag) if s.tag in SOW_SECTIONS]
    if not sections:
        reader.fail("no <SOW> (or <TopicMetaData>) section, so no SOW topics are defined", root.tag)
    entries: list[tuple[Topic, str, str]] = []
    for section, section_where in sections:
        allowed = TOPIC_ELEMENTS + SOW_NOT_IMPLEMENTED
        for child, where in _children(section, section_where, numbered=TOPIC_ELEMENTS):
            if child.tag in TOPIC_ELEMENTS:
                entries.append((reader.topic(child, where), source, where))
            elif child.tag in SOW_NOT_IMPLEMENTED:
                _log.warning(
                    "%s: %s: <%s> is accepted but not implemented yet; it is ignored",
                    source,
                    where,
                    child.tag,
                )
            else:
                reader.fail(
                    unknown_name("element", child.tag, allowed, parent=f"<{section.tag}>"), where
                )
    names = {topic.name for topic, _, _ in entries}
    for log_section, log_where in _children(root, root.tag):
        if log_section.tag != "TransactionLog":
            continue
        for child, where in _children(log_section, log_where, numbered=("Topic",)):
            if child.tag != "Topic":
                continue  # journal settings: nothing for kafka-sow
            plain = reader.plain_topic(child, where)
            if isinstance(plain, PlainTopic) and plain.name not in names:
                entries.append((plain, source, where))
    return assemble(entries, (source,))
