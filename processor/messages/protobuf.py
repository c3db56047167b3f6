"""The protobuf message type: Google Protocol Buffers (proto2 and proto3) of one message
type, described by a .proto file or a compiled descriptor set.

The topic's ``schema`` names either

* a compiled descriptor set (a ``FileDescriptorSet``, as ``protoc --include_imports
  --descriptor_set_out=F`` writes; any name but ``*.proto``), read as it is; or
* a ``.proto`` file (with the directories its imports are found in, AMPS's
  ``ProtoPath``), compiled to a descriptor set when the codec is built, by protoc as the
  ``grpcio-tools`` package ships it (a dependency of kafka-sow: AMPS takes .proto files,
  so kafka-sow does too, without a protoc on the machine).

and ``proto_type`` the message (``package.Message``) each payload is.

Fields, as filters and Key paths read them (AMPS names protobuf fields by name): a nested
message is an object (``/order/detail/venue``), a repeated field an array (``/tags[0]``;
existential in a filter), a map an object of its keys' text; an enum is its value's
name; bytes stay bytes (their text form is Base64). A field with presence (proto2, a
proto3 ``optional``, a message) is there only when it was set; a proto3 scalar without
presence reads as its value, its default (0, "", false) when unset, since protobuf
cannot tell them apart. An empty repeated field is absent (NULL, as an empty array).

The text form is JSON (the fields above); a JSON object becomes the message of the same
fields (a field the message type lacks is a DecodeError naming it). delta_publish merges
field by field (:func:`processor.messages.fields.merge`): a delta given as a payload gives
the fields it sets (a proto3 scalar without presence set to its default is not on the
wire, so it is not given: give such a delta as JSON text); as JSON text, every field it
names, a null too (it clears the field). A partial message (a reshaped delta) travels as
JSON text for the same reason.
"""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtoDecodeError
from google.protobuf.message import EncodeError, Message

from processor.errors import ConfigurationError, DecodeError
from processor.messages import limits
from processor.messages.base import FieldsCodec, jsonable
from processor.messages.json import json_object
from processor.topology.message_types import TRAITS, proto_files

_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_GROUP = FieldDescriptor.TYPE_GROUP
_ENUM = FieldDescriptor.TYPE_ENUM
_BYTES = FieldDescriptor.TYPE_BYTES


class ProtobufCodec(FieldsCodec):
    """Messages of one protobuf type; see the module doc. Thread-safe."""

    name = "protobuf"
    traits = TRAITS["protobuf"]

    def __init__(self, descriptor: Descriptor, source: str = "<descriptor>") -> None:
        self.descriptor = descriptor
        self.source = source
        self._class: type[Message] = message_factory.GetMessageClass(descriptor)
        self._has_bytes = _has_bytes(descriptor, set())

    @classmethod
    def from_file(cls, schema: str, type_name: str) -> ProtobufCodec:
        """The codec of ``type_name`` in the descriptor set or .proto file ``schema``."""
        files = _descriptor_set(schema)
        pool = descriptor_pool.DescriptorPool()
        _add_all(pool, files, schema)
        try:
            descriptor = pool.FindMessageTypeByName(type_name)
        except KeyError:
            names = sorted(
                f"{f.package}.{m.name}" if f.package else m.name
                for f in files.file
                for m in f.message_type
            )
            raise ConfigurationError(
                f"{proto_files(schema)[0]}: no message type {type_name!r}; it defines "
                f"{', '.join(names) or 'none'} (give the full name, package.Message)"
            ) from None
        return cls(descriptor, source=f"{proto_files(schema)[0]} {type_name}")

    def decode(self, data: bytes) -> Any:
        return self._fields(self._parse(data), len(data), defaults=True)

    def decode_delta(self, data: bytes, text_form: bool) -> Any:
        if text_form:
            return json_object(data, "the delta text", "a protobuf delta")
        return self._fields(self._parse(data), len(data), defaults=False)

    def encode_json(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise DecodeError(f"a protobuf message is an object, not a {type(value).__name__}")
        message = self._class()
        try:
            json_format.ParseDict(_base64(value) if self._has_bytes else value, message)
            return message.SerializeToString()
        except (json_format.ParseError, EncodeError, ValueError, TypeError) as exc:
            raise DecodeError(
                f"the value is not a {self.descriptor.full_name} message: {exc}"
            ) from exc

    def from_text(self, text: bytes) -> bytes:
        return self.encode_json(json_object(text, "the message text", "a protobuf message"))

    def to_text(self, data: bytes) -> bytes:
        return orjson.dumps(self.decode(data), default=jsonable)

    def _parse(self, data: bytes) -> Message:
        message = self._class()
        try:
            message.ParseFromString(data)
        except (ProtoDecodeError, RecursionError, ValueError) as exc:
            raise DecodeError(
                f"the payload is not a {self.descriptor.full_name} message: {exc}"
            ) from exc
        return message

    def _fields(self, message: Message, size: int, *, defaults: bool) -> dict[str, Any]:
        value = _tree(message, defaults)
        # A nested message or a repeated value takes two bytes at least on the wire.
        limits.check_tree(value, size // 2, size)
        return value

    def key_decoder(self, paths: tuple[str, ...]) -> Callable[[bytes], Any]:
        """Parse the whole payload (so it is checked as :meth:`decode` checks it), then
        read only the Key fields when each is a singular scalar under singular messages;
        a repeated field, a map or a subscript takes the full decode, and so does a
        payload long enough that :meth:`decode` would walk its tree against the limits."""
        plan = [_field_path(self.descriptor, path) for path in paths]
        if not plan or any(fields is None for fields in plan):
            return self.decode
        short = 2 * limits.MAX_DEPTH

        def key_fields(data: bytes) -> Any:
            if len(data) > short:
                return self.decode(data)
            message = self._parse(data)
            out: dict[str, Any] = {}
            for fields in plan:
                assert fields is not None
                node, target = message, out
                for field in fields[:-1]:
                    if not node.HasField(field.name):
                        break
                    node, target = getattr(node, field.name), target.setdefault(field.name, {})
                else:
                    last = fields[-1]
                    if not last.has_presence or node.HasField(last.name):
                        target[last.name] = _single(last, getattr(node, last.name), True)
            return out

        return key_fields


def _field_path(descriptor: Descriptor, path: str) -> tuple[FieldDescriptor, ...] | None:
    """The fields a Key path names, when each is singular and the last a scalar."""
    fields: list[FieldDescriptor] = []
    current: Descriptor | None = descriptor
    for step in path.strip("/").split("/"):
        field = None if current is None else current.fields_by_name.get(step)
        if field is None or _repeated(field):
            return None
        fields.append(field)
        current = field.message_type if field.type in (_MESSAGE, _GROUP) else None
    return tuple(fields) if fields and current is None else None


#: How a field's value becomes the tree's (None: as it is, a singular scalar).
_Convert = Callable[[Any, bool], Any]
_CONVERTERS: dict[FieldDescriptor, _Convert | None] = {}


def _tree(message: Message, defaults: bool) -> dict[str, Any]:
    out: dict[str, Any] = dict(_implicit_defaults(message.DESCRIPTOR)) if defaults else {}
    for field, value in message.ListFields():
        try:
            convert = _CONVERTERS[field]
        except KeyError:
            convert = _CONVERTERS.setdefault(field, _converter(field))
        out[field.name] = value if convert is None else convert(value, defaults)
    return out


def _converter(field: FieldDescriptor) -> _Convert | None:
    kind = field.type
    if kind in (_MESSAGE, _GROUP):
        entry = _message_of(field)
        if entry.GetOptions().map_entry:
            item = entry.fields_by_name["value"]
            return lambda value, d: {_key_text(k): _single(item, value[k], d) for k in value}
        if _repeated(field):
            return lambda value, d: [_tree(item, d) for item in value]
        return _tree
    if kind == _ENUM:
        if _repeated(field):
            return lambda value, d: [_single(field, item, d) for item in value]
        return lambda value, d: _single(field, value, d)
    if _repeated(field):
        return lambda value, d: list(value)
    return None


def _single(field: FieldDescriptor, value: Any, defaults: bool) -> Any:
    if field.type in (_MESSAGE, _GROUP):
        return _tree(value, defaults)
    if field.type == _ENUM and field.enum_type is not None:
        found = field.enum_type.values_by_number.get(value)
        return value if found is None else found.name
    return value


def _message_of(field: FieldDescriptor) -> Descriptor:
    descriptor = field.message_type
    assert descriptor is not None  # a message field has its message's descriptor
    return descriptor


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _key_text(key: Any) -> str:
    return ("true" if key else "false") if isinstance(key, bool) else str(key)


@functools.lru_cache(maxsize=256)
def _implicit_defaults(descriptor: Descriptor) -> dict[str, Any]:
    """The proto3 scalars without presence, at their defaults (read when unset)."""
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.has_presence or _repeated(field) or field.type in (_MESSAGE, _GROUP):
            continue
        out[field.name] = _single(field, field.default_value, False)
    return out


def _has_bytes(descriptor: Descriptor, seen: set[str]) -> bool:
    if descriptor.full_name in seen:
        return False
    seen.add(descriptor.full_name)
    return any(
        field.type == _BYTES
        or (field.type in (_MESSAGE, _GROUP) and _has_bytes(_message_of(field), seen))
        for field in descriptor.fields
    )


def _base64(value: Any) -> Any:
    """A tree with its bytes as Base64 text (protobuf's JSON form of bytes)."""
    if isinstance(value, dict):
        return {k: _base64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_base64(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _add_all(
    pool: descriptor_pool.DescriptorPool, files: descriptor_pb2.FileDescriptorSet, schema: str
) -> None:
    """Add a set's files to ``pool``, each after the files it imports."""
    pending = {f.name: f for f in files.file}
    added: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in added:
            return
        proto = pending.get(name)
        if proto is None:
            raise ConfigurationError(
                f"{proto_files(schema)[0]}: {chain[-1]} imports {name}, which the descriptor "
                "set does not hold; write it with protoc --include_imports"
            )
        if name in chain:
            raise ConfigurationError(f"{proto_files(schema)[0]}: {name} imports itself")
        for dependency in proto.dependency:
            add(dependency, (*chain, name))
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{proto_files(schema)[0]}: {name}: {exc}") from exc
        added.add(name)

    for name in pending:
        add(name, ())


def _descriptor_set(schema: str) -> descriptor_pb2.FileDescriptorSet:
    path, include = proto_files(schema)
    if path.endswith(".proto"):
        data = _compiled(path, include, _mtime(path))
    else:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the descriptor set {path}: {exc}") from exc
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except ProtoDecodeError as exc:
        raise ConfigurationError(
            f"{path} is not a compiled descriptor set (a FileDescriptorSet, as protoc "
            f"--include_imports --descriptor_set_out writes), nor a .proto file: {exc}"
        ) from exc
    if not files.file:
        raise ConfigurationError(f"{path}: the descriptor set holds no .proto file")
    return files


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError as exc:
        raise ConfigurationError(f"cannot read the .proto file {path}: {exc}") from exc


@functools.lru_cache(maxsize=32)
def _compiled(path: str, include: tuple[str, ...], mtime: float) -> bytes:
    """``path`` compiled by grpcio-tools' protoc into a descriptor set (cached per file
    version: a topology builds a codec per topic and per process)."""
    try:
        import grpc_tools
    except ImportError as exc:  # pragma: no cover - a dependency of kafka-sow
        raise ConfigurationError(
            f"{path}: compiling a .proto file needs the grpcio-tools package; install it "
            "or give a descriptor set (protoc --include_imports --descriptor_set_out=F)"
        ) from exc
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    roots = (*include, str(Path(path).parent))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "set.desc"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            *(f"-I{root}" for root in roots),
            f"-I{well_known}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            path,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ConfigurationError(
                f"{path} does not compile: {done.stderr.strip() or done.stdout.strip()}"
            )
        return out.read_bytes()
