"""Reading the elements of one AMPS configuration file: paths, text, variables, declarations.

:class:`AmpsReader` is what every AMPS XML parser (topics in
:mod:`processor.topology.amps_xml`, views, conflated topics and queues in
:mod:`processor.topology.amps_entries` and :mod:`processor.topology.amps_queues`) reads
elements with. Every problem raises :class:`~processor.errors.TopologyError` naming the
file and the element path (``AMPSConfig/SOW/Topic[2]/Key``), what was wrong and what is
allowed.

* Element paths number an element from 1 when its tag is repeated under its parent, or
  always for the tags a caller lists (``Topic``).
* ``${VAR}`` in a text value is replaced by the environment variable ``VAR`` (an unset
  variable is an error); ``AMPS_CONFIG_DIRECTORY`` and ``AMPS_CONFIG_PATH`` default to the
  configuration file's directory and path. Only values that are read are expanded.
* Message types: ``json``, ``fix``, ``nvfix``, ``binary``, or the ``Name`` of an
  ``AMPSConfig/MessageTypes/MessageType`` (``avro`` needs one, with a ``Schema``).
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar

from processor.errors import TopologyError
from processor.topology.model import MESSAGE_TYPES, HashIndexSpec, History, KeyGeneratorSpec
from processor.topology.quantities import (
    check_factory_path,
    check_key_path,
    parse_choice,
    parse_interval,
    parse_separator,
    unknown_name,
)

_log = logging.getLogger(__name__)
T = TypeVar("T")

#: An element and its path.
Child = tuple[ET.Element, str]

#: Message types a MessageType may name without a declaration (avro needs its schema).
_UNDECLARED = tuple(t for t in MESSAGE_TYPES if t != "avro")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def children(element: ET.Element, where: str, numbered: tuple[str, ...] = ()) -> list[Child]:
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


class AmpsReader:
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

    def label(self, element: str) -> str:
        """An element as messages write it: ``<Join>``."""
        return f"<{element}>"

    def word(self, element: str) -> str:
        """An element or kind named in prose: ``MessageType``."""
        return element

    def _declared(self, root: ET.Element, section: str, item: str) -> dict[str, Child]:
        found: dict[str, Child] = {}
        for parent, parent_where in children(root, root.tag):
            if parent.tag == section:
                for child, where in children(parent, parent_where):
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
        self,
        element: ET.Element,
        where: str,
        allowed: tuple[str, ...],
        repeatable: tuple[str, ...] | None = None,
    ) -> dict[str, list[Child]]:
        """Children by tag; an element not in ``allowed`` is an error, and so is one given
        twice unless it is ``repeatable`` (None: any may repeat)."""
        groups: dict[str, list[Child]] = {}
        for child, child_where in children(element, where):
            if child.tag not in allowed:
                self.fail(
                    unknown_name("element", child.tag, allowed, parent=f"<{element.tag}>"),
                    child_where,
                )
            groups.setdefault(child.tag, []).append((child, child_where))
        if repeatable is not None:
            for tag, items in groups.items():
                if tag not in repeatable and len(items) > 1:
                    self.fail(
                        f"<{tag}> is given {len(items)} times; it is allowed once in "
                        f"<{element.tag}>",
                        items[1][1],
                    )
        return groups

    def synonym(
        self, groups: dict[str, list[Child]], first: str, second: str
    ) -> list[Child] | None:
        """The items of ``first`` or of its old synonym ``second``; both is an error."""
        if first in groups and second in groups:
            self.fail(
                f"<{second}> is the old synonym of <{first}>; give only one of them",
                groups[second][0][1],
            )
        return groups.get(first) or groups.get(second)

    def message_type(self, value: str, where: str) -> tuple[str, str | None]:
        """(message type, schema path) of a MessageType value."""
        message_type, schema, _ = self.declared_type(value, where)
        return message_type, schema

    def declared_type(self, value: str, where: str) -> tuple[str, str | None, bytes | None]:
        """(message type, schema path, fix/nvfix FieldSeparator) of a MessageType value."""
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
                return parse_choice(value, _UNDECLARED, "MessageType"), None, None
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
        separator = self._separator(element, decl_where, module)
        schema_where = f"{decl_where}/Schema"
        if schema_el is None:
            if module == "avro":
                self.fail(
                    "a MessageType with Module avro needs <Schema>, the .avsc file path", decl_where
                )
            return module, None, separator
        if module != "avro":
            self.fail(f"<Schema> is allowed only with Module avro, not {module}", schema_where)
        path = (self.base / self.text(schema_el, schema_where)).resolve()
        if not path.is_file():
            self.fail(
                f"schema file {str(path)!r} does not exist; give a path relative to this file",
                schema_where,
            )
        return module, str(path), None

    def _separator(self, element: ET.Element, where: str, module: str) -> bytes | None:
        """A declared fix/nvfix type's FieldSeparator (None when not given). Its
        HeaderSeparator and MessageSeparator are checked the same way and logged as not
        applying: they frame AMPS's own protocol, and a kafka-sow payload is the message
        alone (its header travels as gRPC fields and Kafka headers)."""
        for tag in ("HeaderSeparator", "MessageSeparator"):
            framing = element.find(tag)
            if framing is None:
                continue
            framing_where = f"{where}/{tag}"
            if module not in ("fix", "nvfix"):
                self.fail(f"<{tag}> is allowed only with Module fix or nvfix", framing_where)
            try:
                parse_separator(framing.text or "")
            except ValueError as exc:
                self.fail(str(exc).replace("FieldSeparator", tag), framing_where)
            _log.info(
                "%s: %s: <%s> does not apply in kafka-sow: it frames AMPS's fix protocol, and "
                "a kafka-sow payload is the message alone (headers travel as gRPC fields and "
                "Kafka headers)",
                self.source,
                framing_where,
                tag,
            )
        separator_el = element.find("FieldSeparator")
        if separator_el is None:
            return None
        separator_where = f"{where}/FieldSeparator"
        if module not in ("fix", "nvfix"):
            self.fail(
                f"<FieldSeparator> is allowed only with Module fix or nvfix, not {module}",
                separator_where,
            )
        try:
            return parse_separator(separator_el.text or "")
        except ValueError as exc:
            self.fail(str(exc), separator_where)

    def key_generator(self, element: ET.Element, where: str) -> KeyGeneratorSpec:
        groups = self.group(element, where, ("Module", "Options"), repeatable=())
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
            for option, option_where in children(options_el, options_where):
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
        fields = self.field_elements(element, where, ", each 'expression AS /target'")
        return tuple(self.text(*field) for field in fields)

    def field_elements(self, element: ET.Element, where: str, hint: str = "") -> list[Child]:
        """The ``<Field>`` children of ``element``; it must have one at least."""
        fields = self.group(element, where, ("Field",)).get("Field", [])
        if not fields:
            self.fail(f"<{element.tag}> needs <Field>s{hint}", where)
        return fields

    def hash_index(self, element: ET.Element, where: str) -> HashIndexSpec:
        keys = self.group(element, where, ("Key",)).get("Key", [])
        if not keys:
            self.fail("<HashIndex> needs one or more <Key> field paths", where)
        return HashIndexSpec(tuple(self.value(*key, check_key_path) for key in keys))
