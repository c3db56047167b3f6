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
from processor.topology.message_types import (
    MESSAGE_TYPES,
    TRAITS,
    UNDECLARED,
    parse_message_type,
    proto_schema,
)
from processor.topology.message_types import traits as message_traits
from processor.topology.model import (
    HashIndexSpec,
    History,
    KeyGeneratorSpec,
    MessagePart,
    SchemaRegistry,
)
from processor.topology.quantities import (
    check_factory_path,
    check_key_path,
    parse_interval,
    parse_separator,
    unknown_name,
)

_log = logging.getLogger(__name__)
T = TypeVar("T")

#: An element and its path.
Child = tuple[ET.Element, str]

#: What the declaration of a type that needs one gives, for messages.
_NEEDS = {
    name: "<Schema>file</Schema>"
    if t.schema is not None and not t.schema_type
    else "<ProtoPath>dir</ProtoPath><ProtoFile>file.proto</ProtoFile><Type>pkg.Message</Type>"
    if t.schema_type
    else "<SchemaRegistry>http://registry:8081</SchemaRegistry>"
    if t.registry
    else "<MessageType>json</MessageType><MessageType>binary</MessageType>"
    for name, t in TRAITS.items()
}
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
        fmt = self.declared_type(value, where)
        return fmt["message_type"], fmt["schema"]

    def declared_type(self, value: str, where: str, *, part: bool = False) -> dict[str, Any]:
        """The model fields of a MessageType value (``message_type``, ``schema``, and as
        the type takes them ``field_separator``, ``proto_type``, ``parts``): a type AMPS
        loads by default, or the Name of a declared MessageType."""
        declared = self.message_types.get(value) or next(
            (d for name, d in self.message_types.items() if name.lower() == value.lower()), None
        )
        if declared is None:
            try:
                kind = parse_message_type(value, "MessageType")
            except ValueError as exc:
                names = ", ".join(sorted(self.message_types)) or "none"
                self.fail(
                    f"{exc}, or a MessageType declared in AMPSConfig/MessageTypes "
                    f"(declared: {names})",
                    where,
                )
            if kind not in UNDECLARED:
                self.fail(
                    f"MessageType {kind} needs a declaration: <MessageTypes><MessageType><Name>N"
                    f"</Name><Module>{kind}</Module>{_NEEDS[kind]}</MessageType></MessageTypes> "
                    "in AMPSConfig, and N as the MessageType",
                    where,
                )
            return {"message_type": kind, "schema": None}
        element, decl_where = declared
        module_el = element.find("Module")
        if module_el is None:
            self.fail(
                "the MessageType declaration has no <Module>; allowed: " + ", ".join(MESSAGE_TYPES),
                decl_where,
            )
        module = self.value(
            module_el, f"{decl_where}/Module", lambda v: parse_message_type(v, "Module")
        )
        traits = message_traits(module)
        if part and traits.composite:
            self.fail(f"a part of a composite MessageType cannot be {module} itself", where)
        fmt: dict[str, Any] = {"message_type": module, "schema": None}
        separator = self._separator(element, decl_where, module)
        if separator is not None:
            fmt["field_separator"] = separator
        self._only(
            element,
            decl_where,
            module,
            "Schema",
            traits.schema is not None and not traits.schema_type,
        )
        self._only(element, decl_where, module, "ProtoFile", traits.schema_type)
        self._only(element, decl_where, module, "ProtoPath", traits.schema_type)
        self._only(element, decl_where, module, "Type", traits.schema_type)
        self._only(element, decl_where, module, "MessageType", traits.composite)
        for tag in ("SchemaRegistry", "Subject", "RegistryMessage"):
            self._only(element, decl_where, module, tag, traits.registry)
        if traits.registry:
            fmt["schema_registry"] = self._registry(element, decl_where)
        if traits.schema_type:
            fmt["schema"], fmt["proto_type"] = self._proto(element, decl_where)
        elif traits.schema is not None:
            fmt["schema"] = self._file(element, decl_where, "Schema", traits.schema)
        if traits.composite:
            parts = []
            for item, item_where in children(element, decl_where):
                if item.tag == "MessageType":
                    named = self.declared_type(self.text(item, item_where), item_where, part=True)
                    parts.append(MessagePart(**named))
            if not parts:
                self.fail(
                    f"a MessageType with Module {module} lists its parts: one <MessageType> "
                    "per part, in order (json, binary, or a declared type's Name)",
                    decl_where,
                )
            fmt["parts"] = tuple(parts)
        return fmt

    def _registry(self, element: ET.Element, where: str) -> SchemaRegistry:
        """A Schema Registry type's registry: SchemaRegistry (its URL), Subject and
        RegistryMessage (protobuf-sr's message type), as YAML's schema_registry."""
        values = {
            tag: "" if found is None else self.text(found, f"{where}/{tag}")
            for tag in ("SchemaRegistry", "Subject", "RegistryMessage")
            for found in [element.find(tag)]
        }
        url = values["SchemaRegistry"]
        if not url:
            self.fail("this MessageType needs <SchemaRegistry>, the registry's URL", where)
        for one in url.split(","):
            if not one.strip().startswith(("http://", "https://")):
                self.fail(
                    f"the registry's URL {one.strip()!r} is not an http:// or https:// URL",
                    f"{where}/SchemaRegistry",
                )
        return SchemaRegistry(url, values["Subject"], values["RegistryMessage"])

    def _only(self, element: ET.Element, where: str, module: str, tag: str, allowed: bool) -> None:
        found = element.find(tag)
        if found is not None and not allowed:
            self.fail(f"<{tag}> does not apply to Module {module}", f"{where}/{tag}")

    def _file(self, element: ET.Element, where: str, tag: str, what: str) -> str:
        found = element.find(tag)
        if found is None:
            self.fail(f"this MessageType needs <{tag}>, the path of {what}", where)
        path = (self.base / self.text(found, f"{where}/{tag}")).resolve()
        if not path.is_file():
            self.fail(
                f"file {str(path)!r} does not exist; give a path relative to this file",
                f"{where}/{tag}",
            )
        return str(path)

    def _proto(self, element: ET.Element, where: str) -> tuple[str, str]:
        """A protobuf MessageType's schema (its ProtoFile, found in a ProtoPath directory
        or this file's, and the ProtoPath directories) and Type."""
        type_el = element.find("Type")
        if type_el is None:
            self.fail(
                "a protobuf MessageType needs <Type>, the message each payload is "
                "(package.Message)",
                where,
            )
        include: list[Path] = []
        path_el = element.find("ProtoPath")
        if path_el is not None:
            for entry in self.text(path_el, f"{where}/ProtoPath").split(";"):
                if entry.strip():
                    include.append((self.base / entry.strip()).resolve())
        file_el = element.find("ProtoFile")
        if file_el is None:
            self.fail(
                "a protobuf MessageType needs <ProtoFile>, the .proto file (or compiled "
                "descriptor set) of its Type",
                where,
            )
        written = self.text(file_el, f"{where}/ProtoFile")
        candidates = [root / written for root in (*include, self.base)]
        found = next((c.resolve() for c in candidates if c.is_file()), None)
        if found is None:
            self.fail(
                f"ProtoFile {written!r} is in none of the ProtoPath directories nor this "
                f"file's ({', '.join(str(c.parent) for c in candidates)})",
                f"{where}/ProtoFile",
            )
        schema = proto_schema(str(found), [str(d) for d in include if d.is_dir()])
        return schema, self.text(type_el, f"{where}/Type")

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
            if not message_traits(module).flat:
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
        if not message_traits(module).flat:
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
