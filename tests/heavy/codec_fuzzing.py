"""Hostile payloads for every message type (issue 31 point 10): any Kafka producer can
write any bytes to an input topic, so each codec must answer any payload quickly, in
bounded memory, and what it accepts must be servable.

A seeded :class:`random.Random` mutates valid messages of each type (and the hostile
payloads the issue's trials found) with byte edits, repeats of a slice, deep nesting and
long digit runs. :func:`check` decodes one payload: it either raises the codec error
(:class:`~processor.errors.DecodeError`) or gives a value that every serving path takes:
the JSON text of a query (``text_of``), the text form (``to_text``), key texts, a filter
on its fields, a delta merge and the changed fields of a delta subscription. Anything else
(another exception, a case over the time bound) is a failure of the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import resource
import time
from typing import Any

import bson
import orjson
from google.protobuf.descriptor import Descriptor

from processor.errors import DecodeError, KeyGenerationError
from processor.expr import MessageContext, compile
from processor.keys import key_text
from processor.messages import Codec
from processor.messages.avro import AvroCodec
from processor.messages.bflat import BflatCodec
from processor.messages.binary import BinaryCodec
from processor.messages.bson import BsonCodec
from processor.messages.composite import CompositeCodec
from processor.messages.fields import changed, merge
from processor.messages.fix import TagValueCodec
from processor.messages.json import JsonCodec
from processor.messages.limits import MAX_VALUES
from processor.messages.msgpack import MsgpackCodec
from processor.messages.protobuf import ProtobufCodec
from processor.messages.xml import XmlCodec
from tests.heavy import fuzzing

#: The message types fuzzed, short (tests/unit/test_codec_fuzz.py) and heavy (composite-
#: global frames its parts as composite-local does: composite-local stands for both).
TYPES = (
    "json",
    "avro",
    "fix",
    "nvfix",
    "xml",
    "bson",
    "bflat",
    "binary",
    "msgpack",
    "protobuf",
    "composite-local",
)


#: The time one case may take, and more per megabyte of payload: fastavro's Python
#: reader, which reads a recursive schema's payloads over 1,000 bytes (the fuzz's schema
#: is one), takes about 10 microseconds a value: up to 13 s for a megabyte of empty strings.
LIMIT_S = 1.0
LIMIT_S_PER_MB = {"avro": 25.0}
DEFAULT_S_PER_MB = 2.0
#: The largest payload a mutation makes (Kafka's default message.max.bytes is 1 MB).
MAX_PAYLOAD = 1_100_000

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Node",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sym", "type": "string"},
        {"name": "px", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ],
}


def _proto_node() -> Descriptor:
    """A recursive protobuf message (ids, text, a double, repeated strings, a map, itself
    once and repeated), built as a descriptor: no protoc needed."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    proto = descriptor_pb2.FileDescriptorProto(name="fuzz.proto", package="fuzz", syntax="proto3")
    node = proto.message_type.add(name="Node")
    f = descriptor_pb2.FieldDescriptorProto
    for number, name, kind, label in (
        (1, "id", f.TYPE_INT64, f.LABEL_OPTIONAL),
        (2, "sym", f.TYPE_STRING, f.LABEL_OPTIONAL),
        (3, "px", f.TYPE_DOUBLE, f.LABEL_OPTIONAL),
        (4, "tags", f.TYPE_STRING, f.LABEL_REPEATED),
        (5, "blob", f.TYPE_BYTES, f.LABEL_OPTIONAL),
    ):
        node.field.add(name=name, number=number, type=kind, label=label)
    entry = node.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    node.field.add(
        name="attrs", number=6, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
        type_name=".fuzz.Node.AttrsEntry",
    )  # fmt: skip
    for number, name, label in ((7, "next", f.LABEL_OPTIONAL), (8, "kids", f.LABEL_REPEATED)):
        node.field.add(
            name=name, number=number, type=f.TYPE_MESSAGE, label=label, type_name=".fuzz.Node"
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool.FindMessageTypeByName("fuzz.Node")


def _nested_proto(depth: int) -> bytes:
    """A Node whose ``next`` nests ``depth`` deep."""
    data = b"\x08\x01"
    for _ in range(depth):
        data = b"\x3a" + _varint(len(data)) + data
    return data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def codecs() -> dict[str, Codec]:
    """One codec of each message type."""
    return {
        "msgpack": MsgpackCodec(),
        "protobuf": ProtobufCodec(_proto_node()),
        "composite-local": CompositeCodec(
            "composite-local", (JsonCodec(), BinaryCodec(), MsgpackCodec())
        ),
        "json": JsonCodec(),
        "avro": AvroCodec(AVRO_SCHEMA),
        "fix": TagValueCodec("fix"),
        "nvfix": TagValueCodec("nvfix"),
        "xml": XmlCodec(),
        "bson": BsonCodec(),
        "bflat": BflatCodec(),
        "binary": BinaryCodec(),
    }


_NESTED: list[dict[str, Any]] = [
    {"order": {"id": 7, "sym": "IBM", "px": 24.5, "tags": ["a", "b"], "detail": {"v": "N"}}},
    {"order": {"id": -3, "lines": [{"n": 1, "q": 2.5}, {"n": 2, "q": None}], "ok": True}},
    {"a": {"b": {"c": {"d": [1, [2, [3]]]}}}, "x": "é\u2603", "n": None},
]
_FLAT: list[dict[str, Any]] = [
    {"11": 7, "55": "IBM", "44": 24.5, "38": 100, "448": ["urgent", "gen"]},
    {"11": -9223372036854775808, "55": "x", "58": None, "32": [1, 2, 3]},
]
_NAMED: list[dict[str, Any]] = [
    {"id": 7, "sym": "IBM", "px": 24.5, "tags": ["a", "b"], "qty": 18446744073709551615},
    {"id": "k", "n": None, "f": [1.5, 2.5]},
]
_AVRO: list[dict[str, Any]] = [
    {"id": 1, "sym": "A", "px": 1.5, "tags": ["t"], "attrs": {"k": 2}, "next": None},
    {
        "id": 2,
        "sym": "B",
        "px": -0.5,
        "tags": [],
        "attrs": {},
        "next": {"id": 3, "sym": "C", "px": 0.0, "tags": ["u", "v"], "attrs": {}, "next": None},
    },
]

#: The payloads the issue's trials found, by message type (the long ones are made below).
HOSTILE: dict[str, list[bytes]] = {
    "bflat": [
        bytes.fromhex("1a 69 64 33 81 6e ff ff ff ff ff ff ff ff 7f"),  # NULLs, no end
        bytes.fromhex("49 6e") + b"\x80" * 9 + b"\x02",  # a leb128 of 2**64
    ],
    "nvfix": [b"a=1\x01" * 150_000, b"id=1\x01p=" + b"9" * 5000 + b"\x01"],
    "fix": [b"11=1\x01" * 100_000, b"11=18446744073709551616\x01", b"11=" + b"1" * 4301],
    "xml": [
        b"<O><id>1</id><p>" + b"9" * 5000 + b"</p></O>",
        b"<a " + b" ".join(b'a%d="1"' % i for i in range(100_000)) + b"/>",
        b"<a>" * 1000 + b"</a>" * 1000,
    ],
    "json": [b'{"a":' * 500 + b"1" + b"}" * 500, b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}"],
    "bson": [],  # made in _hostile_bson
    "avro": [  # records nested 100,000 deep (fastavro's compiled reader overflows the stack)
        (b"\x02\x02A" + b"\x00" * 8 + b"\x00\x00\x02") * 100_000
        + (b"\x02\x02A" + b"\x00" * 8 + b"\x00\x00\x00"),
        (b"\x02\x02A" + b"\x00" * 8 + b"\x00\x00\x02") * 150
        + (b"\x02\x02A" + b"\x00" * 8 + b"\x00\x00\x00"),
    ],
    "binary": [b""],
    "msgpack": [
        b"\x81\xa1a" * 500 + b"\x01",  # maps nested 500 deep
        b"\x81\xa1a" + b"\x91" * 100_000 + b"\x01",  # arrays nested 100,000 deep
        b"\xdf\xff\xff\xff\xff",  # a map that claims 2**32 - 1 entries
        b"\x81\xa1a\xdd\x00\x10\x00\x00" + b"\xc0" * 1000,  # an array that claims 1M
        # maps keyed by maps, 300 deep: each key's text would hold the one below it
        # escaped, so the texts grow exponentially (a trial's find: 4 GB in 30 s)
        b"\x81" * 300 + b"\xa1a\x01" + b"\x01" * 300,
    ],
    "protobuf": [_nested_proto(150), _nested_proto(10_000), b"\x3a\xff\xff\xff\xff\x0f"],
    "composite-local": [
        b"\xff\xff\xff\xff{}",  # a part that claims 4 GB
        b"\x00\x00\x00\x02{}" + b"\x00\x00\x00\x00" * 100_000,  # 100,000 empty parts
        b"\x00\x00\x00\x02{}\x00\x00",  # a length cut short
    ],
}


def _hostile_bson() -> list[bytes]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(300):
        value = {"x": value}
    return [bytes(bson.encode(value, check_keys=False))]


def seeds(name: str, codec: Codec) -> list[bytes]:
    """Valid payloads of a message type, then the hostile ones."""
    values = {
        "json": _NESTED,
        "bson": _NESTED,
        "xml": [{"order": item["order"]} for item in _NESTED[:2]],
        "fix": _FLAT,
        "nvfix": _NAMED,
        "bflat": _NAMED,
        "avro": _AVRO,
        "binary": [],
        "msgpack": _NESTED,
        "protobuf": _AVRO,
        "composite-local": [[item, "AAE=", {"n": 1}] for item in _NESTED],
    }[name]
    out = [codec.encode_json(value) for value in values]
    if name == "binary":
        out = [b"\x00\x01binary", b"x" * 100]
    return out + HOSTILE[name] + (_hostile_bson() if name == "bson" else [])


_DIGITS = [b"9" * 19, b"-9223372036854775809", b"18446744073709551616", b"1" * 5000]


_LEAVES: list[Any] = [
    0, -1, 1 << 63, (1 << 64) - 1, -(1 << 63), 1.5, -0.0, 1e308, float("inf"), float("nan"),
    "", "x", "é\u2603", "a=b", "<x>", "9" * 25, "\t\n", None, True, False, b"\x00\xff",
]  # fmt: skip


def generated(rng: random.Random, name: str, codec: Codec) -> bytes | None:
    """A message built from a random value (deep, wide, or with edge values) by the
    codec itself, or None when the codec cannot build it."""
    flat = name in ("fix", "nvfix", "bflat")
    depth = 1 if flat else rng.choice((1, 3, 20, 99, 100, 101, 150))

    def value(level: int) -> Any:
        roll = rng.random()
        if level < depth and roll < 0.3:  # mostly one field: a chain, not a bush
            return {f"f{i}": value(level + 1) for i in range(rng.choice((1, 1, 1, 2)))}
        if roll < 0.4 and level < depth:  # a short list of values (each may nest)
            return [value(level + 1) for _ in range(rng.choice((0, 1, 2, 3)))]
        if roll < 0.45:  # a long list of one leaf (a repeated tag in the flat types)
            return [rng.choice(_LEAVES)] * rng.choice((2, 100, 10_001, 30_000))
        return rng.choice(_LEAVES)

    fields = {("55" if name == "fix" else f"f{i}"): value(1) for i in range(rng.randint(1, 4))}
    if name == "xml":
        fields = {"root": fields}
    try:
        return codec.encode_json(fields)[:MAX_PAYLOAD]
    except (DecodeError, ValueError, TypeError, OverflowError):
        return None


def mutate(rng: random.Random, pool: list[bytes], name: str, codec: Codec) -> bytes:
    """One mutated payload: a message built from a random value (one case in five), or
    1 to 3 edits of a seed."""
    if rng.random() < 0.2:
        made = generated(rng, name, codec)
        if made is not None:
            return made
    data = rng.choice(pool)
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.randrange(10)
        at = rng.randint(0, len(data))
        if roll < 3:  # flip or replace bytes
            edited = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                if edited:
                    edited[rng.randrange(len(edited))] = rng.randrange(256)
            data = bytes(edited)
        elif roll == 3:  # insert random bytes
            data = data[:at] + rng.randbytes(rng.randint(1, 12)) + data[at:]
        elif roll == 4:  # delete a range
            data = data[:at] + data[at + rng.randint(1, 16) :]
        elif roll == 5:  # repeat a slice many times
            end = min(len(data), at + rng.randint(1, 24))
            piece = data[at:end] or b"\x00"
            times = rng.choice((2, 10, 1000, 20_000))
            data = data[:at] + piece * min(times, MAX_PAYLOAD // len(piece)) + data[at:]
        elif roll == 6:  # splice with another seed
            other = rng.choice(pool)
            data = data[:at] + other[rng.randint(0, len(other)) :]
        elif roll == 7:  # a long digit run
            data = data[:at] + rng.choice(_DIGITS) + data[at:]
        elif roll == 8:  # nest
            depth = rng.choice((50, 101, 300, 3000))
            opener, closer = {
                "json": (b'{"a":', b"}"),
                "bson": (b"\x03a\x00", b"\x00"),
                "xml": (b"<a>", b"</a>"),
                "avro": (b"\x02", b""),
            }.get(name, (b"[", b"]"))
            data = data[:at] + opener * depth + data[at:] + closer * depth
        else:  # truncate, or random bytes
            data = data[:at] if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 40))
    return data[:MAX_PAYLOAD]


_FILTERS = [
    compile(text)
    for text in (
        "/id = 7 OR /sym LIKE 'I.M' OR /px > 1.5",
        "/order/id IN (7, -3) AND /order/tags = 'a'",
        "/11 = 7 OR /55 BETWEEN 'A' AND 'Z' OR /448 IS NOT NULL",
        "/a/b/c/d > 0 OR /x = 'y' OR /n IS NULL OR /tags[0] = 't'",
        "/order/@side = 'B' OR /O/id = 1 OR /O/p > 0",
    )
]
_CONTEXT = MessageContext(sow_key="1", topic="t", message_size=1, last_updated=1.0)


def servable(codec: Codec, data: bytes, value: Any) -> None:
    """Every serving path's conversions of a decoded message succeed (or raise)."""
    if codec.name == "binary":
        codec.to_text(data)
        return
    assert isinstance(value, dict), f"{codec.name} decoded a {type(value).__name__}"
    orjson.loads(codec.text_of(value))
    codec.to_text(data)
    for item in value.values():
        with contextlib.suppress(KeyGenerationError):  # a clean dead letter of its own
            key_text(item)
    for expression in _FILTERS:
        expression.matches(value)
        expression(value, _CONTEXT)
    merged = merge(value, value)
    changed(value, merged)
    _count(value)


def _count(value: Any) -> None:
    stack, count = [value], 0
    while stack:
        node = stack.pop()
        items = node.values() if isinstance(node, dict) else node
        count += len(node)
        stack.extend(item for item in items if isinstance(item, dict | list))
    assert count <= MAX_VALUES, f"{count} values in one decoded message"


def check(codec: Codec, data: bytes) -> None:
    """Decode ``data``: DecodeError, or a servable value (see the module doc)."""
    try:
        value = codec.decode(data)
    except DecodeError:
        raise
    servable(codec, data, value)


@dataclasses.dataclass
class Report(fuzzing.Report):
    """What a run saw (:class:`tests.heavy.fuzzing.Report`: ``errors`` are the payloads
    refused with a DecodeError), and how much the peak RSS grew."""

    rss_growth_mb: float = 0.0

    def summary(self, what: str) -> str:
        return (
            f"{what}: {self.cases} cases, {self.errors} DecodeErrors, {len(self.failures)} "
            f"failures, {len(self.slow)} slow, max {self.max_s * 1000:.1f} ms, wall "
            f"{self.wall_s:.1f} s, peak RSS +{self.rss_growth_mb:.0f} MB"
        )


def fuzz(name: str, count: int, seed: int) -> Report:
    """``count`` mutated payloads of message type ``name`` through :func:`check`; the
    seeds themselves come first."""
    codec = codecs()[name]
    pool = seeds(name, codec)
    rng = random.Random(seed)
    report = Report()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    for index in range(count):
        data = pool[index] if index < len(pool) else mutate(rng, pool, name, codec)
        limit = LIMIT_S + LIMIT_S_PER_MB.get(name, DEFAULT_S_PER_MB) * len(data) / 1e6
        elapsed, outcome = fuzzing.timed(lambda case: check(codec, case), data)
        if elapsed > limit:  # once more, alone: a pause of a shared machine is no hang
            elapsed, outcome = fuzzing.timed(lambda case: check(codec, case), data)
            if elapsed > limit:
                report.slow.append((repr(data[:200]), elapsed))
        report.cases += 1
        report.max_s = max(report.max_s, elapsed)
        if isinstance(outcome, DecodeError):
            report.errors += 1
        elif outcome is not None and len(report.failures) < 50:
            error = f"{type(outcome).__name__}: {str(outcome)[:300]}"
            report.failures.append((repr(data[:300]) + f" ({len(data)} bytes)", error))
    report.wall_s = time.perf_counter() - started
    growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    report.rss_growth_mb = growth_kb / 1024
    return report
