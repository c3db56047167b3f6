"""The xml message type (lxml): one root element, its children and attributes as fields.

A message decodes to ``{root_tag: content}``, so paths start at the root element as in
AMPS (``/Order/Symbol``, ``/alert/id``):

* an element with neither children nor attributes is a value, typed from its text as
  AMPS types XML text (``<b>24</b>`` an integer, ``24.0`` a float, else a string; an
  empty element ``<a/>`` is NULL), surrounding whitespace ignored;
* an element with children or attributes is an object: each child element by its tag,
  each attribute as ``@name`` (``/Order/@update``); its own text, if any, under
  ``#text``;
* a tag that repeats among siblings is a repeated field: its value is the list of the
  elements' values, in order (a filter on it is existential, as on an array);
* namespace prefixes are dropped (``{urn:x}Order`` is ``Order``); comments and
  processing instructions are ignored.

Building a message (projection, delta merge, enrichment) writes a JSON-like value with
exactly one top-level field, the root: objects become elements (``@name`` keys
attributes, ``#text`` the text), lists repeated elements, NULL an empty element,
booleans ``true``/``false``. XML has no arrays, so a one-element list is read back as a
value. Text XML 1.0 cannot carry (control characters but tab, line feed and carriage
return) is refused. Parsing refuses DTDs' external entities and never touches the network.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from lxml import etree

from processor.errors import DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec, typed_text
from processor.topology.message_types import TRAITS

#: Characters of an XML name (a conservative subset: ASCII letters, digits, _ - .).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: Characters XML 1.0 has no form for, not even as a character reference.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: Carriage returns are written as references: a parser reads a raw one as a line feed.
_ENTITIES = {"\r": "&#13;"}
_TEXT = "#text"
_local = threading.local()


def _parser() -> Any:
    """This thread's parser (lxml parsers must not be shared between threads)."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = etree.XMLParser(
            resolve_entities=False, no_network=True, remove_comments=True, remove_pis=True
        )
    return parser


def _parse(data: bytes) -> Any:
    """The root element of a document; DecodeError when it is not well-formed XML."""
    try:
        return etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        raise DecodeError(f"the payload is not well-formed XML: {exc}") from exc
    except ValueError as exc:  # lxml: a str with an encoding declaration, empty input
        raise DecodeError(f"the payload is not an XML document: {exc}") from exc


def _tag(element: Any) -> str:
    tag: str = element.tag
    return tag.rpartition("}")[2] if tag[0] == "{" else tag


def _value(element: Any, tag: str, depth: int) -> Any:
    """The value of ``element`` (named ``tag``, ``depth`` elements deep), held to the
    limits (:mod:`processor.messages.limits`)."""
    text = element.text
    attributes = element.attrib
    if not len(element) and not attributes:
        return typed_text(text.strip(), tag) if text else None
    fields: dict[str, Any] = {}
    if attributes:
        if len(attributes) > limits.MAX_ATTRIBUTES:
            raise DecodeError(
                f"element <{tag}> has {len(attributes)} attributes, more than "
                f"{limits.MAX_ATTRIBUTES} (the limit of attributes of one element)"
            )
        for qualified, raw in attributes.items():
            name = "@" + (qualified.rpartition("}")[2] if qualified[0] == "{" else qualified)
            fields[name] = typed_text(raw, name)
    if text is not None and text.strip():
        fields[_TEXT] = typed_text(text.strip(), tag)
    if depth >= limits.MAX_DEPTH and len(element):
        raise limits.too_deep(f"element <{tag}>")
    for child in element:
        tag = child.tag
        if tag.__class__ is not str:
            continue  # an unresolved entity reference: external entities are never read
        if tag[0] == "{":
            tag = tag.rpartition("}")[2]
        value = _value(child, tag, depth + 1)
        if tag in fields:
            held = fields[tag]
            if held.__class__ is list:  # values are never lists but for repetition
                if len(held) >= limits.MAX_REPEATS:
                    raise limits.too_many_repeats(tag, "element")
                held.append(value)
            else:
                fields[tag] = [held, value]
        else:
            fields[tag] = value
    if not fields:  # only entity references: nothing readable
        return None
    return fields


#: A run of digits as long as the shortest integer text out of 64-bit range.
_LONG_DIGITS = re.compile(rb"\d{19}")


def _plainly_within(data: bytes) -> bool:
    """Whether the document's bytes alone show it is within every limit: few elements
    (so neither depth, repeats nor values can pass theirs), few attributes, and no
    integer text long enough to be out of range."""
    return (
        data.count(b"<") <= limits.MAX_DEPTH
        and data.count(b"=") <= limits.MAX_ATTRIBUTES
        and _LONG_DIGITS.search(data) is None
    )


def _decoded(root: Any, size: int) -> Any:
    """The message of a parsed document of ``size`` bytes (see the module doc)."""
    # An element or attribute takes 4 bytes at least (<a/>, ' a=""').
    if size > 4 * limits.MAX_VALUES:
        count = sum(1 + len(element.attrib) for element in root.iter())
        if count > limits.MAX_VALUES:
            raise limits.too_many_values(count)
    tag = _tag(root)
    return {tag: _value(root, tag, 1)}


def _text(value: Any, name: str) -> str:
    """A leaf value as element or attribute text."""
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        bad = _NOT_XML.search(value)
        if bad is not None:
            raise DecodeError(
                f"field {name!r} holds the character {bad.group()!r}, which XML 1.0 "
                "cannot carry (control characters other than tab, line feed and carriage "
                "return; unpaired surrogates)"
            )
        return value
    raise DecodeError(f"field {name!r} holds a {type(value).__name__}, which XML cannot carry")


def _element(name: str, value: Any, out: list[str]) -> None:
    if not _NAME.fullmatch(name):
        raise DecodeError(
            f"{name!r} is not an XML element name (letters, digits, '_', '-', '.'; not "
            "starting with a digit)"
        )
    if isinstance(value, list):
        for item in value:
            _element(name, item, out)
        return
    if not isinstance(value, dict):
        text = _text(value, name)
        out.append(f"<{name}>{escape(text, _ENTITIES)}</{name}>" if text else f"<{name}/>")
        return
    attributes = "".join(
        f" {key[1:]}={quoteattr(_text(item, key))}"
        for key, item in value.items()
        if key.startswith("@")
    )
    out.append(f"<{name}{attributes}>")
    if _TEXT in value:
        out.append(escape(_text(value[_TEXT], _TEXT), _ENTITIES))
    for key, item in value.items():
        if not key.startswith("@") and key != _TEXT:
            _element(key, item, out)
    out.append(f"</{name}>")


class XmlCodec(FieldsCodec):
    """XML documents; see the module doc. Thread-safe."""

    name = "xml"
    traits = TRAITS["xml"]

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        """Parse the whole document (so a payload is checked as :meth:`decode` checks
        it), then read only the Key fields: each must be the one element of its name
        under its parent, with neither children nor attributes; anything else (a
        repeated or nested field, an attribute, a subscript, a namespace) takes the full
        decode, so the answer always equals :meth:`decode`'s. So does a document whose
        bytes do not show it within the limits (over 100 elements, over 256 ``=``, a
        run of 19 digits): what the processor stores must be servable, so every value of
        such a document is checked, as :meth:`decode` does."""
        steps = [tuple(p.strip("/").split("/")) for p in paths]
        if not steps or any(
            not all(_NAME.fullmatch(step) for step in path) or len(path) < 2 for path in steps
        ):
            return self.decode

        def key_fields(data: bytes) -> Any:
            root = _parse(data)
            if not _plainly_within(data):
                return _decoded(root, len(data))  # every value checked against the limits
            fields: dict[str, Any] = {}
            for path in steps:
                if root.tag != path[0]:
                    return _decoded(root, len(data))
                node = root
                for step in path[1:]:
                    found = node.iterchildren(step)
                    node = next(found, None)
                    if node is None or next(found, None) is not None:
                        return _decoded(root, len(data))
                if len(node) or node.attrib:
                    return _decoded(root, len(data))
                text = node.text
                target = fields
                for step in path[:-1]:
                    target = target.setdefault(step, {})
                target[path[-1]] = typed_text(text.strip(), path[-1]) if text else None
            return fields

        return key_fields

    def decode(self, data: bytes) -> Any:
        return _decoded(_parse(data), len(data))

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict) or len(value) != 1:
            count = len(value) if isinstance(value, dict) else 0
            raise DecodeError(
                "an xml message has one root element: give exactly one top-level field "
                f"(got {count if isinstance(value, dict) else type(value).__name__})"
            )
        ((name, content),) = value.items()
        if isinstance(content, list):
            raise DecodeError(f"the root element {name!r} cannot repeat")
        out: list[str] = []
        _element(str(name), content, out)
        return "".join(out).encode()
