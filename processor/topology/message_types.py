"""The message types and what each can do: the one table every room asks.

A message type's name is what a topic's ``message_type`` holds (the AMPS ``Module`` of a
declared type). :data:`TRAITS` says, per type, what the rest of kafka-sow may do with its
messages, so no module compares type names to decide a behaviour: the topology's rules
(keys, indexes, views, enrichment), the gateway and the engine (how a delta travels), the
subscriptions (select lists, delta messages) and the command line (the text form) ask
``traits(name).<capability>``. The codecs (:mod:`processor.messages`, one module per
type) are chosen by the same names, and each carries its row (``Codec.traits``);
``tests/unit/test_message_conformance.py`` checks that every name here has a codec.

The capabilities follow AMPS's Message Types chapter: every type but binary is parsed;
views cannot produce binary, protobuf, composite-global or struct messages (nor, in
kafka-sow, composite-local: which part a projected field goes to is not said); delta
publish and delta subscriptions are not supported for composite-global. ``struct`` (a
type defined by a C-struct layout) is out of scope: :func:`traits` refuses it by name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from processor.errors import ValueFormatError


@dataclass(frozen=True, slots=True)
class MessageTraits:
    """What one message type can do (see the module doc)."""

    name: str
    #: Its messages are parsed into fields: Key fields, indexes, filters, select lists,
    #: preprocessing and enrichment read them (binary: no).
    parsed: bool = True
    #: Its fields are flat (tag=value): a nested field cannot be written (fix, nvfix).
    flat: bool = False
    #: What ``schema`` names for it (None: it takes no schema): its messages cannot be
    #: read without that file.
    schema: str | None = None
    #: Its text form (the command line, ``text_form`` requests) is JSON (else it is the
    #: message text itself, or Base64 for binary).
    json_text: bool = True
    #: Its text form is the payload itself (json, fix, nvfix, xml): a message or a delta
    #: given as text travels as it is.
    text_payload: bool = False
    #: A partial message (a select list's fields, a delta) has a payload of this type;
    #: else (avro: a record is whole) it travels as JSON text.
    partial_native: bool = True
    #: delta_publish merges into a stored record and delta subscriptions send the changed
    #: fields (else a delta_publish is refused and delta subscribers get whole messages).
    delta: bool = True
    #: A message can be built from a tree of fields (enrichment, preprocessing, a delta
    #: merge, a view's output).
    builds: bool = True
    #: A view may produce messages of this type (AMPS: not binary, protobuf,
    #: composite-global; kafka-sow: not composite-local either).
    view_output: bool = True
    #: It is declared from parts, each of its own message type (composite types).
    composite: bool = False
    #: Its schema defines several message types and the configuration names the one its
    #: messages are (protobuf's ``Type``; with the directories its imports are in).
    schema_type: bool = False
    #: Its payloads are in the Schema Registry wire format (a magic byte, the schema id,
    #: the body): the topic names the registry its schemas come from (``schema_registry``)
    #: instead of a schema file (docs/schema-registry.md).
    registry: bool = False

    def capabilities(self) -> list[str]:
        """What it can do, in words (``sow check-config`` lists them per topic)."""
        words = {
            "parsed": "fields (keys, filters, select lists)",
            "delta": "delta publish and subscribe",
            "builds": "messages built from fields (enrichment, views)",
            "view_output": "view output",
            "json_text": "JSON text form",
        }
        return [word for name, word in words.items() if getattr(self, name)]


_PROTO_SCHEMA = "a .proto file or a compiled descriptor set (.desc, .pb)"

_TABLE = (
    MessageTraits("json", text_payload=True),
    MessageTraits("avro", schema="an Avro schema (.avsc)", partial_native=False),
    MessageTraits("fix", flat=True, json_text=False, text_payload=True),
    MessageTraits("nvfix", flat=True, json_text=False, text_payload=True),
    MessageTraits("xml", json_text=False, text_payload=True),
    MessageTraits("bson"),
    MessageTraits("bflat"),
    MessageTraits("msgpack"),
    MessageTraits(
        "protobuf",
        schema=_PROTO_SCHEMA,
        schema_type=True,
        partial_native=False,
        view_output=False,
    ),
    # The Schema Registry wire format of avro, protobuf and JSON (JSON Schema): a partial
    # message (a select list, a delta) is not a framed record, so it travels as JSON text;
    # a view writes no framed records (it has no subject to register under).
    MessageTraits("avro-sr", registry=True, partial_native=False, view_output=False),
    MessageTraits("protobuf-sr", registry=True, partial_native=False, view_output=False),
    MessageTraits("json-sr", registry=True, partial_native=False, view_output=False),
    MessageTraits("composite-local", view_output=False, composite=True),
    MessageTraits("composite-global", delta=False, builds=False, view_output=False, composite=True),
    MessageTraits(
        "binary",
        parsed=False,
        json_text=False,
        delta=False,
        builds=False,
        view_output=False,
    ),
)

#: Every message type, by name.
TRAITS = MappingProxyType({t.name: t for t in _TABLE})
#: The message type names, in the order messages list them.
MESSAGE_TYPES = tuple(TRAITS)
#: Types a configuration may name without declaring them (AMPS loads them by default):
#: those that need no schema and no parts.
UNDECLARED = tuple(
    t.name for t in _TABLE if t.schema is None and not t.composite and not t.registry
)

#: AMPS message types kafka-sow does not implement, and why.
OUT_OF_SCOPE = MappingProxyType(
    {
        "struct": "struct message types (a layout of C struct fields) are not implemented",
        "soapfix": "soapfix (FIX in a SOAP envelope) is not implemented; use fix or xml",
    }
)


def traits(name: str) -> MessageTraits:
    """The traits of message type ``name``; a ValueError naming the types otherwise."""
    found = TRAITS.get(name)
    if found is None:
        raise ValueFormatError(unknown_type(name))
    return found


def parse_message_type(
    text: str, what: str = "message type", allowed: tuple[str, ...] = MESSAGE_TYPES
) -> str:
    """The member of ``allowed`` that ``text`` names (ignoring case); a ValueError naming
    the allowed types, or saying why an AMPS type is out of scope."""
    word = text.strip().lower()
    if word in OUT_OF_SCOPE:
        raise ValueFormatError(f"{what} {text.strip()!r}: {OUT_OF_SCOPE[word]}")
    for choice in allowed:
        if choice == word:
            return choice
    raise ValueFormatError(f"{what} {text.strip()!r} is not allowed; allowed: {', '.join(allowed)}")


def unknown_type(name: str) -> str:
    """The message for a name that is not a message type."""
    if name.lower() in OUT_OF_SCOPE:
        return f"message type {name!r}: {OUT_OF_SCOPE[name.lower()]}"
    return f"unknown message type {name!r}; allowed: {', '.join(MESSAGE_TYPES)}"


def proto_schema(file: str, include: Sequence[str] = ()) -> str:
    """A protobuf topic's ``schema``: its .proto file (or descriptor set) and the
    directories the file's imports are found in (AMPS ``ProtoPath``), as one text."""
    return os.pathsep.join((file, *include))


def proto_files(schema: str) -> tuple[str, tuple[str, ...]]:
    """The file and the import directories of a protobuf ``schema``."""
    file, *include = schema.split(os.pathsep)
    return file, tuple(include)
