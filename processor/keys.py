"""SowKey generation and validation.

The SowKey identifies a record in a SOW topic. It is computed before a record enters the log
(by the CLI, the gRPC gateway and client code alike) and checked again by the processor.

Generated keys (a topic with Key paths). The key is the decimal text of an unsigned 64-bit
checksum over the KeyDomain and the Key field values:

1. Each component (the KeyDomain first, then every Key value in configured order) is turned
   into text: strings as they are; integers in decimal; floats by Python's shortest
   round-trip ``repr``; booleans as ``true``/``false``; arrays and objects as compact JSON
   with sorted keys. A value and its text form give the same key (``1`` and ``"1"``), as AMPS
   compares key values as strings.
2. The texts are UTF-8 encoded and each is prefixed by its length as a 4-byte big-endian
   integer (the unambiguous separator: no choice of values can make two different tuples
   produce the same bytes), after the 8-byte tag ``b"sowkey1\\x00"``.
3. The checksum is BLAKE2b with an 8-byte digest over those bytes, read as a big-endian
   unsigned integer. The key is its decimal text (at most 20 digits).

The algorithm is fixed: the same domain and values give the same SowKey in every process,
on every platform and in every release (``tests`` pin known values). A missing or NULL Key
field is an error (:class:`~processor.errors.MissingKeyError`), never a key over NULL.

Publisher-provided keys (no Key paths and no KeyGenerator): the publisher supplies the
SowKey, which must consist of Base64 characters (``A-Z a-z 0-9 + / =``).

Custom generators: ``KeyGeneratorSpec.factory`` names ``package.module:attribute`` (or
``package.module.attribute``); it is called once as ``factory(topic, options)`` and must
return a callable mapping a decoded message to a non-empty SowKey string.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from processor.errors import (
    ConfigurationError,
    InvalidSowKeyError,
    KeyGenerationError,
    MissingKeyError,
    ValueFormatError,
)
from processor.expr.construction import compile_construction
from processor.expr.inputs import MessageContext
from processor.topology.model import SowTopic

KEY_TAG = b"sowkey1\x00"
_BASE64 = re.compile(rb"^[A-Za-z0-9+/=]+$")

#: Maps a decoded message to its SowKey text.
KeyFunction = Callable[[Any], str]


def parse_path(path: str) -> tuple[str, ...]:
    """Split an AMPS field path (``/a/b``) into its segments; raise ValueError if malformed."""
    if not path.startswith("/") or path == "/":
        raise ValueFormatError(f"a field path starts with '/' and names a field, got {path!r}")
    segments = tuple(path[1:].split("/"))
    if any(not s for s in segments):
        raise ValueFormatError(f"a field path has no empty segments, got {path!r}")
    return segments


def extract(message: Any, segments: tuple[str, ...]) -> Any:
    """The value at ``segments`` in a decoded message, or None when any step is missing."""
    value = message
    for segment in segments:
        if not isinstance(value, dict):
            return None
        value = value.get(segment)
        if value is None:
            return None
    return value


def key_text(value: Any) -> str:
    """The canonical text of one key value (see the module docstring, step 1)."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, bytes):
        return value.hex()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError as exc:  # orjson: a type JSON lacks (bytes in a list, an ObjectId...)
        raise KeyGenerationError(
            f"a Key field holds {type(value).__name__} {str(value)[:80]}, which has no key "
            f"text ({exc}); a Key value is a string, a number, a boolean or binary, or an "
            "array or object of strings, numbers and booleans"
        ) from exc


def _component(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(4, "big") + raw


def checksum_key(domain: str, values: tuple[Any, ...]) -> str:
    """The generated SowKey for a KeyDomain and Key values (the documented algorithm)."""
    data = KEY_TAG + _component(domain) + b"".join(_component(key_text(v)) for v in values)
    return str(int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big"))


class FieldKeyGenerator:
    """Generates SowKeys from a topic's Key paths and KeyDomain.

    Thread-safe and stateless after construction; calling it raises MissingKeyError when
    a Key field is absent or NULL.
    """

    __slots__ = ("_hash", "_memo", "_paths", "_prefix", "_single", "paths")

    #: Single-field keys of hot values are remembered; the memo is dropped when it fills.
    MEMO_SIZE = 1 << 16

    def __init__(self, domain: str, paths: tuple[str, ...]) -> None:
        if not paths:
            raise ConfigurationError("a field key generator needs at least one Key path")
        self.paths = paths
        self._paths = tuple(parse_path(p) for p in paths)
        self._prefix = KEY_TAG + _component(domain)
        #: The hash state after the prefix, copied for each single-field key.
        self._hash = hashlib.blake2b(self._prefix, digest_size=8)
        self._single = self._paths[0] if len(self._paths) == 1 else None
        self._memo: dict[object, str] = {}

    def __call__(self, message: Any) -> str:
        single = self._single
        if single is not None:
            value = message
            for segment in single:
                value = value.get(segment) if isinstance(value, dict) else None
                if value is None:
                    raise MissingKeyError(
                        f"the message has no value for Key field {self.paths[0]}; every "
                        "message published to this topic must carry its Key fields"
                    )
            memo = self._memo
            hashable = value.__class__ in (str, int)
            if hashable:
                # str and int never collide as dict keys with equal text ("1" vs 1), but
                # they give the same SowKey anyway, so either entry is right.
                found = memo.get(value)
                if found is not None:
                    return found
            kind = value.__class__
            text = value if kind is str else repr(value) if kind is int else key_text(value)
            raw = text.encode()
            digest = self._hash.copy()  # cheaper than a new blake2b with its arguments
            digest.update(len(raw).to_bytes(4, "big") + raw)
            key = str(int.from_bytes(digest.digest(), "big"))
            if hashable:
                if len(memo) >= self.MEMO_SIZE:
                    memo.clear()
                memo[value] = key
            return key
        parts = [self._prefix]
        for path, segments in zip(self.paths, self._paths, strict=True):
            value = extract(message, segments)
            if value is None:
                raise MissingKeyError(
                    f"the message has no value for Key field {path} (composite key "
                    f"{', '.join(self.paths)}); every message must carry all Key fields"
                )
            parts.append(_component(key_text(value)))
        data = b"".join(parts)
        return str(int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big"))


def validate_user_key(raw: bytes | str | None) -> str:
    """Check a publisher-provided SowKey and return it as text.

    Raises InvalidSowKeyError when it is missing, empty or has a non-Base64 character.
    """
    if raw is None or len(raw) == 0:
        raise InvalidSowKeyError(
            "this topic has no Key fields, so the publisher must provide the SowKey "
            "(the Kafka record key, or --sow-key on the command line)"
        )
    data = raw.encode() if isinstance(raw, str) else raw
    if not _BASE64.match(data):
        raise InvalidSowKeyError(
            f"SowKey {data[:64]!r} has characters outside the Base64 alphabet; "
            "use only A-Z, a-z, 0-9, '+', '/' and '='"
        )
    return data.decode()


def load_factory(dotted: str) -> Callable[..., Any]:
    """Import ``package.module:attribute`` or ``package.module.attribute``."""
    module_name, sep, attribute = dotted.partition(":")
    if not sep:
        module_name, _, attribute = dotted.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"key generator {dotted!r} is not a dotted path; use 'package.module:factory'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import key generator module {module_name!r}: {exc}"
        ) from exc
    try:
        factory = getattr(module, attribute)
    except AttributeError as exc:
        raise ConfigurationError(
            f"key generator module {module_name!r} has no attribute {attribute!r}"
        ) from exc
    if not callable(factory):
        raise ConfigurationError(f"key generator {dotted!r} is not callable")
    return factory  # type: ignore[no-any-return]


def _checked_custom(function: Callable[[Any], Any], dotted: str) -> KeyFunction:
    def generate(message: Any) -> str:
        key = function(message)
        if not isinstance(key, str) or not key or key.startswith("\x00"):
            raise InvalidSowKeyError(
                f"key generator {dotted} returned {key!r}; it must return a non-empty "
                "string that does not start with NUL"
            )
        return key

    return generate


def key_function(topic: SowTopic, *, preprocessed: bool = False) -> KeyFunction | None:
    """The SowKey function for a topic, or None for publisher-provided keys.

    A topic with Preprocessing computes the key of the preprocessed message (AMPS:
    preprocessing -> key); ``preprocessed=True`` gives the function for a message that is
    already preprocessed (the processor, which keeps the preprocessed message).
    """
    generate = _generator(topic)
    if generate is None or preprocessed or not topic.preprocessing:
        return generate
    preprocess = compile_construction(topic.preprocessing, enrichment=False)
    context = MessageContext(topic=topic.name)

    def preprocess_then_key(message: Any) -> str:
        if not isinstance(message, dict):
            raise MissingKeyError(f"a {topic.message_type} message has no fields to preprocess")
        return generate(preprocess.apply(message, None, context))

    return preprocess_then_key


def _generator(topic: SowTopic) -> KeyFunction | None:
    if topic.key_generator is not None:
        spec = topic.key_generator
        factory = load_factory(spec.factory)
        options: Mapping[str, Any] = dict(spec.options)
        return _checked_custom(factory(topic, options), spec.factory)
    if topic.keys:
        return FieldKeyGenerator(topic.domain, topic.keys)
    return None


def partition_for(sow_key: bytes, partitions: int) -> int:
    """The partition a SowKey belongs to: CRC-32 of the key modulo the partition count.

    This equals librdkafka's default ("consistent_random") partitioner for non-empty keys,
    so any librdkafka producer keyed by SowKey agrees with it.
    """
    return zlib.crc32(sow_key) % partitions
