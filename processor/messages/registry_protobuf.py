"""The protobuf schemas of a Schema Registry: a schema (a .proto file, asked for in its
serialized form: a base64 ``FileDescriptorProto``) and the schemas it imports (its
references, each a subject's version; Google's well-known types are built in), built
into a descriptor pool; the message indexes of a payload name the message type in it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError as ProtoDecodeError

from processor.errors import DecodeError
from processor.messages.protobuf import ProtobufCodec
from processor.messages.registry import Registry

#: Google's well-known types: a schema imports them without a reference.
_WELL_KNOWN_TYPES = (
    "any api descriptor duration empty field_mask source_context struct timestamp type wrappers"
)
_WELL_KNOWN = {
    module.DESCRIPTOR.name: module.DESCRIPTOR.serialized_pb
    for module in (
        importlib.import_module(f"google.protobuf.{name}_pb2") for name in _WELL_KNOWN_TYPES.split()
    )
}


def protobuf_codec(registry: Registry, schema: Any, path: tuple[int, ...], source: str) -> Any:
    """The codec of the message type at ``path`` in ``schema`` (with its imports)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    main = _file(schema.schema_str, "schema.proto", source)
    _add_references(registry, pool, schema.references or [], added, source)
    _add_well_known(pool, main, added)
    try:
        pool.Add(main)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"{source}: the .proto file does not build: {exc}") from exc
    name = _message_name(main, path, source)
    return ProtobufCodec(pool.FindMessageTypeByName(name), source=f"{source} {name}")


def _file(text: str | None, name: str, source: str) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.standard_b64decode((text or "").encode("ascii")))
    except (ProtoDecodeError, binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise DecodeError(
            f"{source} is not a serialized protobuf schema (a base64 FileDescriptorProto, "
            f"as the registry gives with format=serialized): {exc}"
        ) from exc
    proto.name = proto.name or name
    return proto


def _add_well_known(
    pool: descriptor_pool.DescriptorPool, proto: descriptor_pb2.FileDescriptorProto, added: set[str]
) -> None:
    for dependency in proto.dependency:
        if dependency in _WELL_KNOWN and dependency not in added:
            pool.AddSerializedFile(_WELL_KNOWN[dependency])
            added.add(dependency)


def _add_references(
    registry: Registry,
    pool: descriptor_pool.DescriptorPool,
    references: list[Any],
    added: set[str],
    source: str,
) -> None:
    """Add each referenced schema after the schemas it refers to."""
    for reference in references:
        if reference.name in added or reference.name in _WELL_KNOWN:
            continue
        added.add(reference.name)
        registered = registry.call(
            f"schema {reference.subject!r} version {reference.version} (imported by {source})",
            functools.partial(
                registry.client.get_version, reference.subject, reference.version, fmt="serialized"
            ),
        )
        imported = registered.schema
        _add_references(registry, pool, imported.references or [], added, source)
        proto = _file(imported.schema_str, reference.name, source)
        proto.name = reference.name
        _add_well_known(pool, proto, added)
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as exc:
            raise DecodeError(
                f"{source}: its import {reference.name} does not build: {exc}"
            ) from exc


def _message_name(
    proto: descriptor_pb2.FileDescriptorProto, path: tuple[int, ...], source: str
) -> str:
    """The full name of the message type the index path names."""
    messages = proto.message_type
    names = [proto.package] if proto.package else []
    for depth, index in enumerate(path):
        if index >= len(messages):
            raise DecodeError(
                f"the payload's message index {list(path)} names no message type of {source} "
                f"(level {depth} has {len(messages)})"
            )
        message = messages[index]
        names.append(message.name)
        messages = message.nested_type
    return ".".join(names)


def message_path(schema: Any, name: str, source: str) -> tuple[int, ...]:
    """The message index path of the message type ``name`` in ``schema`` (its full name,
    ``package.Message``; "": the first message type)."""
    proto = _file(schema.schema_str, "schema.proto", source)
    if not name:
        if not proto.message_type:
            raise DecodeError(f"{source} defines no message type")
        return (0,)
    prefix = f"{proto.package}." if proto.package else ""
    found: list[str] = []

    def visit(messages: Any, scope: str, path: tuple[int, ...]) -> tuple[int, ...] | None:
        for index, message in enumerate(messages):
            full = f"{scope}{message.name}"
            found.append(full)
            if full == name:
                return (*path, index)
            inner = visit(message.nested_type, f"{full}.", (*path, index))
            if inner is not None:
                return inner
        return None

    path = visit(proto.message_type, prefix, ())
    if path is None:
        raise DecodeError(
            f"{source} has no message type {name!r} (schema_registry.message); it defines "
            f"{', '.join(found) or 'none'}"
        )
    return path
