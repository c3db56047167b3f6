"""Message-type conformance: the same logical record, published as json, avro, fix, nvfix,
xml, bson, bflat, msgpack, protobuf, composite-local and composite-global, gives the same
answers everywhere a user can see it: the round trip, field
extraction (nested paths, repeated fields, subscripts), the SowKey, every filter family of
the expression language, aggregated projections and select lists, and delta merge. A
property test generates records and compares every type against json.

"The same logical record" in each type's own shape:

* nested types (json, avro, xml, bson, msgpack, protobuf) carry
  ``{"order": {..., "detail": {"venue"}}}``; paths are ``/order/...`` (xml: the root
  element is ``order``);
* composite-local carries it in its first part (a msgpack map), ``/0/order/...``;
  composite-global in a json part followed by a binary one, ``/order/...``;
* flat types carry the flattened record: nvfix by field name (``/sym``), fix by a fixed
  table of numeric tags (``/55``); a list is a repeated tag. Each is compared with json
  over the same flat record, and that with json over the nested one.

Values are those every type keeps as it was given: integers, finite floats (their text
always has a ``.`` or an exponent, so FIX and XML read a float back), strings that start
with a letter and end in a non-space, and lists of two or more elements. What a type
cannot keep is asserted as its documented behaviour at the end of this module.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import DecodeError, MessageError, MissingKeyError
from processor.expr import FieldInput, compile, compile_aggregation, extract
from processor.keys import key_function
from processor.messages import Codec, codec_for
from processor.messages.select import parse_select
from processor.topology.model import MessagePart, SchemaRegistry, SowTopic
from tests.schema_registry import SchemaRegistryServer
from tests.unit.expr_helpers import identical
from tests.unit.test_expr_conformance_random import _FLAT_FILTERS

Record = dict[str, Any]

#: The logical record's fields; ``note`` is nullable and may be absent.
FIELDS = ("id", "sym", "px", "qty", "tags", "fills", "venue", "note")
#: The FIX tag of each field (ClOrdID, Symbol, Price, OrderQty, ..., ExDestination, Text).
FIX_TAGS = {
    "id": "11",
    "sym": "55",
    "px": "44",
    "qty": "38",
    "tags": "448",
    "fills": "32",
    "venue": "100",
    "note": "58",
}
NESTED_PATHS = {name: f"/order/{name}" for name in FIELDS} | {
    "venue": "/order/detail/venue",
    "missing": "/order/missing",
}
NVFIX_PATHS = {name: f"/{name}" for name in FIELDS} | {"missing": "/missing"}
FIX_PATHS = {name: f"/{tag}" for name, tag in FIX_TAGS.items()} | {"missing": "/9999"}

AVRO_SCHEMA = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {
            "name": "order",
            "type": {
                "type": "record",
                "name": "Order",
                "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "sym", "type": "string"},
                    {"name": "px", "type": "double"},
                    {"name": "qty", "type": "long"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {"name": "fills", "type": {"type": "array", "items": "long"}},
                    {
                        "name": "detail",
                        "type": {
                            "type": "record",
                            "name": "Detail",
                            "fields": [{"name": "venue", "type": "string"}],
                        },
                    },
                    {"name": "note", "type": ["null", "string"], "default": None},
                ],
            },
        }
    ],
}


PROTO = """
syntax = "proto3";
package conf;
message Detail { optional string venue = 1; }
message Order {
  optional int64 id = 1;
  optional string sym = 2;
  optional double px = 3;
  optional int64 qty = 4;
  repeated string tags = 5;
  repeated int64 fills = 6;
  Detail detail = 7;
  optional string note = 8;
}
message Envelope { Order order = 1; }
"""


def nested(record: Record) -> Record:
    """The nested types' shape of a (possibly partial) logical record."""
    order = {name: value for name, value in record.items() if name != "venue"}
    if "venue" in record:
        order["detail"] = {"venue": record["venue"]}
    return {"order": order}


def flat(record: Record) -> Record:
    return dict(record)


def tagged(record: Record) -> Record:
    return {FIX_TAGS[name]: value for name, value in record.items()}


def avro_read(record: Record) -> Record:
    """What avro reads back: a nullable field left out is null (its default)."""
    return nested({"note": None, **record})


def proto_read(record: Record) -> Record:
    """What protobuf reads back: a null is a field not set, so it is absent."""
    return nested({name: value for name, value in record.items() if value is not None})


def local(record: Record) -> Record:
    """composite-local: the record in the first part."""
    return {"0": nested(record)}


def global_parts(record: Record) -> list[Any]:
    """composite-global's text form: a json part, then an (empty) binary part."""
    return [nested(record), ""]


def local_paths() -> dict[str, str]:
    return {name: "/0" + path for name, path in NESTED_PATHS.items()}


@dataclass(frozen=True)
class Kind:
    """One message type with the logical record's shape in it."""

    name: str
    codec: Codec
    paths: dict[str, str]
    #: The logical record (or a delta) as this type's JSON-like value.
    shape: Callable[[Record], Record]
    #: What decoding this type's payload of a whole record gives.
    read: Callable[[Record], Record]
    #: The fields of a partial record (a select list's) as decoded (default: ``shape``).
    partial: Callable[[Record], Record] | None = None

    def fields(self, record: Record) -> Record:
        return (self.partial or self.shape)(record)

    def payload(self, record: Record) -> bytes:
        return self.codec.encode_json(self.shape(record))

    def decoded(self, record: Record) -> Any:
        return self.codec.decode(self.payload(record))

    def filter(self, template: str) -> str:
        return template.format_map(self.paths)


def _registered(registry: SchemaRegistryServer, proto_file: Path) -> dict[str, SchemaRegistry]:
    """The Schema Registry wire format's topics, their schemas registered (protobuf's as
    the registry serves it to format=serialized: a base64 FileDescriptorProto)."""
    from processor.messages.protobuf import _descriptor_set

    proto = _descriptor_set(str(proto_file)).file[0].SerializeToString()
    registry.register("avro-value", json.dumps(AVRO_SCHEMA))
    registry.register("pb-value", base64.b64encode(proto).decode(), "PROTOBUF")
    registry.register("json-value", json.dumps({"type": "object"}), "JSON")
    return {
        "avro-sr": SchemaRegistry(registry.url, "avro-value"),
        "protobuf-sr": SchemaRegistry(registry.url, "pb-value", "conf.Envelope"),
        "json-sr": SchemaRegistry(registry.url, "json-value"),
    }


def _kinds(schema_file: Path, proto_file: Path, registry: SchemaRegistryServer) -> dict[str, Kind]:
    registries = _registered(registry, proto_file)

    def framed(message_type: str) -> Codec:
        topic = SowTopic(
            "ORDERS", message_type=message_type, schema_registry=registries[message_type]
        )
        return codec_for(topic)

    def codec(message_type: str, **fmt: Any) -> Codec:
        schema = str(schema_file) if message_type == "avro" else None
        fmt.setdefault("schema", schema)
        return codec_for(SowTopic("ORDERS", message_type=message_type, **fmt))

    protobuf = codec("protobuf", schema=str(proto_file), proto_type="conf.Envelope")
    composite_local = codec("composite-local", parts=(MessagePart("msgpack"),))
    composite_global = codec("composite-global", parts=(MessagePart("json"), MessagePart("binary")))

    return {
        "json": Kind("json", codec("json"), NESTED_PATHS, nested, nested),
        "json-flat": Kind("json-flat", codec("json"), NVFIX_PATHS, flat, flat),
        "avro": Kind("avro", codec("avro"), NESTED_PATHS, nested, avro_read),
        "xml": Kind("xml", codec("xml"), NESTED_PATHS, nested, nested),
        "bson": Kind("bson", codec("bson"), NESTED_PATHS, nested, nested),
        "nvfix": Kind("nvfix", codec("nvfix"), NVFIX_PATHS, flat, flat),
        "bflat": Kind("bflat", codec("bflat"), NVFIX_PATHS, flat, flat),
        "fix": Kind("fix", codec("fix"), FIX_PATHS, tagged, tagged),
        "msgpack": Kind("msgpack", codec("msgpack"), NESTED_PATHS, nested, nested),
        "protobuf": Kind("protobuf", protobuf, NESTED_PATHS, nested, proto_read),
        "avro-sr": Kind("avro-sr", framed("avro-sr"), NESTED_PATHS, nested, avro_read),
        "protobuf-sr": Kind("protobuf-sr", framed("protobuf-sr"), NESTED_PATHS, nested, proto_read),
        "json-sr": Kind("json-sr", framed("json-sr"), NESTED_PATHS, nested, nested),
        "composite-local": Kind("composite-local", composite_local, local_paths(), local, local),
        "composite-global": Kind(
            "composite-global", composite_global, NESTED_PATHS, global_parts, nested, nested
        ),
    }


#: Every type compared with ``json`` (json-flat: json over the flattened record).
TYPES = (
    "json-flat",
    "avro",
    "xml",
    "bson",
    "nvfix",
    "bflat",
    "fix",
    "msgpack",
    "protobuf",
    "avro-sr",
    "protobuf-sr",
    "json-sr",
    "composite-local",
    "composite-global",
)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Kind]]:
    schema_file = tmp_path_factory.mktemp("avro") / "order.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    proto_file = schema_file.parent / "order.proto"
    proto_file.write_text(PROTO)
    with SchemaRegistryServer() as registry:
        yield _kinds(schema_file, proto_file, registry)


# -- the records ----------------------------------------------------------------------------

RECORDS: list[Record] = [
    {
        "id": 7,
        "sym": "IBM",
        "px": 24.5,
        "qty": 100,
        "tags": ["urgent", "gen"],
        "fills": [40, 60],
        "venue": "NYSE",
        "note": None,
    },
    {
        "id": 12,
        "sym": "MSFT",
        "px": 310.25,
        "qty": 15,
        "tags": ["late", "retail", "odd lot"],
        "fills": [5, 10],
        "venue": "nasdaq",
        "note": "check",
    },
    {
        "id": -3,
        "sym": "BRK.A",
        "px": -0.75,
        "qty": 0,
        "tags": ["x", "urgent"],
        "fills": [0, -2, 7],
        "venue": "Arca",
    },
    {
        "id": 2**40,
        "sym": "é café",
        "px": 1e-3,
        "qty": 99999,
        "tags": ["ñandú", "große"],
        "fills": [1, 1],
        "venue": "LSE",
        "note": "Rock & <Roll> 'n' \"x\"",
    },
    {
        "id": 8,
        "sym": "IBM",
        "px": 25.0,
        "qty": 51,
        "tags": ["gen", "gen"],
        "fills": [50, 1],
        "venue": "NYSE",
        "note": "second",
    },
]

# -- the filters, by family ({field} names the field's path in each type) -------------------

FILTERS: dict[str, list[str]] = {
    "comparison": [
        "{qty} > 50",
        "{px} <= 24.5",
        "{sym} = 'IBM'",
        "{sym} != 'IBM'",
        "{sym} <> 'MSFT'",
        "{id} = 7",
        "{sym} > 'M'",
        "{px} < {qty}",
        "{id} >= {qty}",
        "{venue} = 'NYSE'",
    ],
    "arithmetic": [
        "{qty} * {px} > 1000",
        "{qty} + {id} = 107",
        "{qty} % 7 = 1",
        "{qty} MOD 2 = 1",
        "{qty} / 4 > 10",
        "-{px} > 0",
        "{px} - {id} < 20",
    ],
    "logic": [
        "{qty} > 10 AND {sym} = 'IBM'",
        "{qty} > 60 OR NOT {px} > 5",
        "NOT ({sym} = 'IBM')",
        "({id} > 0 AND {qty} < 100) OR {venue} = 'LSE'",
    ],
    "between": [
        "{qty} BETWEEN 10 AND 100",
        "{px} NOT BETWEEN 1.5 AND 30.25",
        "{sym} BETWEEN 'A' AND 'J'",
        "{fills} BETWEEN 45 AND 55",
    ],
    "in": [
        "{sym} IN ('IBM', 'MSFT')",
        "{id} NOT IN (1, 7, 12)",
        "{tags} IN ('urgent', 'late')",
        "{venue} IN ('LSE', NULL)",
        "{px} IN (24.5, 25)",
    ],
    "like": [
        "{sym} LIKE '^I'",
        "{venue} LIKE '(?i)nyse'",
        "{tags} LIKE 'gen'",
        "{sym} NOT LIKE 'B.M'",
        "{note} LIKE '&'",
    ],
    "affix": [
        "{sym} BEGINS WITH ('IB', 'MS')",
        "{venue} ENDS WITH ('SE')",
        "{tags} BEGINS WITH ('ur')",
        "{sym} NOT ENDS WITH ('M')",
    ],
    "null": [
        "{note} IS NULL",
        "{note} IS NOT NULL",
        "{missing} IS NULL",
        "{missing} IS NOT NULL",
        "{tags}[5] IS NULL",
        "{px} IS NAN",
        "({qty} / 0) IS NAN",
        "({px} * 'x') IS NAN",
    ],
    "functions": [
        "UPPER({sym}) = 'IBM'",
        "LOWER({venue}) = 'nyse'",
        "CONCAT({sym}, '-', {venue}) = 'IBM-NYSE'",
        "COALESCE({note}, 'none') = 'none'",
        "IF({qty} > 50, {px}, 0) > 10",
        "LENGTH({sym}) = 4",
        "ABS({px}) < 1",
        "ROUND({px}) = 25",
        "ROUND({px}, 1) = 24.5",
        "CONCAT({id}, {px}) LIKE '^7'",
    ],
    "arrays": [
        "{tags} = 'urgent'",
        "{fills} > 50",
        "{fills} = {qty}",
        "{tags}[0] = 'urgent'",
        "{tags}[1] = 'gen'",
        "{fills}[1] > 5",
        "ARRAY_COUNT({tags}) = 3",
        "ARRAY_MAX({fills}) >= 60",
        "ARRAY_SUM({fills}) = 51",
        "ARRAY_TO_STRING({tags}, ',') = 'urgent,gen'",
    ],
}
ALL_FILTERS = [template for family in FILTERS.values() for template in family]

#: Every path to read: scalars, the nested field, repeated fields and subscripts.
READS = (
    *FIELDS,
    "missing",
    "{tags}[0]",
    "{tags}[1]",
    "{tags}[9]",
    "{fills}[1]",
)


def _read(kind: Kind, message: Any, field: str) -> Any:
    text = kind.paths[field] if field in kind.paths else field.format_map(kind.paths)
    return compile(text)(message)


# -- 1. round trip ----------------------------------------------------------------------------


@pytest.mark.parametrize("type_name", ["json", *TYPES])
@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_a_record_round_trips(kinds: dict[str, Kind], type_name: str, index: int) -> None:
    kind = kinds[type_name]
    record = RECORDS[index]
    data = kind.payload(record)
    assert kind.codec.decode(data) == kind.read(record)
    text = kind.codec.to_text(data)
    assert kind.codec.decode(kind.codec.from_text(text)) == kind.read(record)
    if kind.codec.traits.composite:  # a JSON array of the parts' text forms
        assert orjson.loads(text)[0] == nested(record)
    elif kind.codec.traits.json_text:
        assert orjson.loads(text) == kind.read(record)  # the text form is JSON
    else:
        assert text == data  # the text form is the payload


# -- 2. field extraction ----------------------------------------------------------------------


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("field", READS)
def test_every_path_reads_the_same_value(
    kinds: dict[str, Kind], type_name: str, field: str
) -> None:
    kind, reference = kinds[type_name], kinds["json"]
    for record in RECORDS:
        want = _read(reference, reference.decoded(record), field)
        got = _read(kind, kind.decoded(record), field)
        assert identical(got, want), (record, got, want)


def test_the_reads_are_what_the_record_holds(kinds: dict[str, Kind]) -> None:
    json_kind = kinds["json"]
    message = json_kind.decoded(RECORDS[0])
    assert [_read(json_kind, message, field) for field in READS] == [
        7, "IBM", 24.5, 100, ["urgent", "gen"], [40, 60], "NYSE", None, None,
        "urgent", "gen", None, 60,
    ]  # fmt: skip
    # An object has no scalar value, in every nested type.
    for type_name in ("json", "avro", "xml", "bson"):
        assert compile("/order/detail")(kinds[type_name].decoded(RECORDS[0])) is None


# -- 3. SowKey --------------------------------------------------------------------------------

KEYS = (("id",), ("sym",), ("px",), ("sym", "venue"), ("tags",), ("venue", "fills", "id"))


def _key(kind: Kind, fields: tuple[str, ...], message: Any) -> str:
    topic = SowTopic(
        "ORDERS", message_type="json", keys=tuple(kind.paths[f] for f in fields)
    )  # the key function reads decoded messages: the message type does not choose it
    function = key_function(topic)
    assert function is not None
    return function(message)


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("fields", KEYS, ids="+".join)
def test_the_sow_key_is_the_same(
    kinds: dict[str, Kind], type_name: str, fields: tuple[str, ...]
) -> None:
    kind, reference = kinds[type_name], kinds["json"]
    keys = [_key(kind, fields, kind.decoded(record)) for record in RECORDS]
    assert keys == [_key(reference, fields, reference.decoded(record)) for record in RECORDS]
    assert len(set(keys)) == len({orjson.dumps([r[f] for f in fields]) for r in RECORDS})


@pytest.mark.parametrize("type_name", ["json", *TYPES])
def test_a_null_or_absent_key_field_is_refused(kinds: dict[str, Kind], type_name: str) -> None:
    kind = kinds[type_name]
    for record in (RECORDS[0], RECORDS[2]):  # note null; note absent
        with pytest.raises(MissingKeyError):
            _key(kind, ("note",), kind.decoded(record))
        with pytest.raises(MissingKeyError):
            _key(kind, ("id", "note"), kind.decoded(record))


# -- 4. filters -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FILTERS)
def test_every_filter_family_matches_the_same_records(kinds: dict[str, Kind], family: str) -> None:
    reference = kinds["json"]
    for template in FILTERS[family]:
        want = [compile(reference.filter(template)).matches(reference.decoded(r)) for r in RECORDS]
        for type_name in TYPES:
            kind = kinds[type_name]
            got = [compile(kind.filter(template)).matches(kind.decoded(r)) for r in RECORDS]
            assert got == want, (type_name, template)


@pytest.mark.parametrize("family", FILTERS)
def test_each_family_both_matches_and_rejects(kinds: dict[str, Kind], family: str) -> None:
    """The corpus is not degenerate: each family has a match and a non-match."""
    reference = kinds["json"]
    answers = {
        compile(reference.filter(template)).matches(reference.decoded(record))
        for template in FILTERS[family]
        for record in RECORDS
    }
    assert answers == {True, False}


# -- 5. projection ----------------------------------------------------------------------------

PROJECTIONS = [
    (
        "{sym} AS /sym, COUNT({id}) AS /n, SUM({qty}) AS /qty, AVG({px}) AS /avg, "
        "MAX({px}) AS /top, MIN({venue}) AS /venue, GROUP_CONCAT({tags}, '|') AS /tags, "
        "SUM({fills}) AS /fills, COALESCE({note}, 'none') AS /note, "
        "COUNT_DISTINCT({venue}) AS /venues",
        "{sym}",
    ),
    (
        "{venue} AS /where/venue, SUM({qty} * {px}) AS /notional, MIN({id}) AS /first, "
        "ANY({tags}[1]) AS /tag, COUNT({note}) AS /notes",
        "{venue}",
    ),
]


def _aggregate(kind: Kind, projection: str, grouping: str) -> list[dict[str, Any]]:
    aggregation = compile_aggregation(kind.filter(projection), kind.filter(grouping))
    groups: dict[tuple[Any, ...], Any] = {}
    for record in RECORDS:
        message = kind.decoded(record)
        values = []
        for item in aggregation.inputs:
            assert isinstance(item, FieldInput)
            values.append(extract(message, item.steps))
        group = aggregation.group_key(values)
        if group not in groups:
            groups[group] = aggregation.accumulator()
        groups[group].add(values)
    return [accumulator.result() for accumulator in groups.values()]


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("query", range(len(PROJECTIONS)))
def test_an_aggregated_projection_is_the_same(
    kinds: dict[str, Kind], type_name: str, query: int
) -> None:
    projection, grouping = PROJECTIONS[query]
    want = _aggregate(kinds["json"], projection, grouping)
    assert len(want) == 4
    assert _aggregate(kinds[type_name], projection, grouping) == want


@pytest.mark.parametrize("type_name", ["json", *TYPES])
def test_a_select_list_keeps_the_same_fields(kinds: dict[str, Kind], type_name: str) -> None:
    kind, reference = kinds[type_name], kinds["json"]
    kept = ("sym", "venue", "tags")
    select = parse_select("[-/," + ",".join("+" + kind.paths[f] for f in kept) + "]")
    for record in RECORDS:
        projected = select.project(kind.decoded(record))
        assert projected == kind.fields({f: record[f] for f in kept})
        whole = reference.decoded(record)
        for field in READS:
            name = field.strip("{").partition("}")[0]
            want = _read(reference, whole, field) if name in kept else None
            assert identical(_read(kind, projected, field), want), field
        # A subscriber is sent its JSON text (subscriptions/shape.py); the text types
        # can build the partial message too (avro cannot: it is not a whole record).
        assert orjson.loads(kind.codec.text_of(projected)) == projected
        if kind.codec.traits.partial_native and kind.codec.traits.builds:
            assert kind.codec.decode(kind.codec.encode_json(projected)) == projected


# -- 6. delta merge ---------------------------------------------------------------------------

DELTAS: list[Record] = [
    {"qty": 5, "px": 1.25},
    {"venue": "BATS", "note": "filled"},
    {"tags": ["p", "q", "r"], "fills": [9, 8]},
    {"note": None, "sym": "ORCL", "id": 99},
]


def _merged(kind: Kind, stored: Record, delta: Record, text_form: bool) -> Any:
    if text_form and not kind.codec.traits.partial_native:
        given = orjson.dumps(kind.shape(delta))  # avro's, protobuf's: the delta as JSON
    elif text_form:
        given = kind.codec.to_text(kind.payload(delta))
    else:
        given = kind.payload(delta)
    return kind.codec.decode(kind.codec.merge(kind.payload(stored), given, text_form))


@pytest.mark.parametrize("type_name", ["json", *TYPES])
@pytest.mark.parametrize("text_form", [False, True], ids=["payload", "text"])
def test_a_delta_merges_the_same(kinds: dict[str, Kind], type_name: str, text_form: bool) -> None:
    kind, reference = kinds[type_name], kinds["json"]
    if not kind.codec.traits.delta:
        pytest.skip("composite-global takes no delta: test_message_type_registry")
    if not kind.codec.traits.partial_native and not text_form:
        pytest.skip(
            "a payload delta gives no nulls: test_avro_payload_deltas, test_message_type_registry"
        )
    for stored in RECORDS:
        for delta in DELTAS:
            merged = _merged(kind, stored, delta, text_form)
            assert merged == kind.read({**stored, **delta})
            want = _merged(reference, stored, delta, text_form)
            for field in READS:
                assert identical(_read(kind, merged, field), _read(reference, want, field))


@pytest.mark.parametrize("type_name", ["json", *TYPES])
def test_a_delta_with_no_stored_record_is_the_record(
    kinds: dict[str, Kind], type_name: str
) -> None:
    kind = kinds[type_name]
    if not kind.codec.traits.delta:
        pytest.skip("composite-global takes no delta: test_message_type_registry")
    whole = kind.payload(RECORDS[1])
    assert kind.codec.decode(kind.codec.merge(None, whole, False)) == kind.read(RECORDS[1])
    avro = kind.name in ("avro", "avro-sr")
    partial = orjson.dumps(nested(DELTAS[0])) if avro else kind.payload(DELTAS[0])
    if avro:  # documented: Avro cannot store a partial record
        with pytest.raises(MessageError, match="every field the schema requires"):
            kind.codec.merge(None, partial, True)
    else:
        assert kind.codec.decode(kind.codec.merge(None, partial, False)) == kind.shape(DELTAS[0])


# -- 7. the property test ---------------------------------------------------------------------

#: Text every type keeps as it is: not empty, no surrounding spaces (XML drops them),
#: not an ASCII number (FIX and XML type their text), no control characters (XML has
#: none, SOH separates FIX fields). Non-ASCII digits are text, not numbers (spec 1.4).
_ASCII_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d*)?", re.ASCII)
_WORDS = st.text(
    alphabet="abcxyzEe019 .+-_&<>'\"=/;@[]{}#%\\éß€😀\u0661\u0663\uff10", min_size=1, max_size=8
).filter(lambda text: text == text.strip() and not _ASCII_NUMBER.fullmatch(text))
_INTEGERS = st.integers(-(2**63), 2**63 - 1)
_NOTES = st.one_of(st.none(), _WORDS, st.just(...))  # ...: no note field at all


def _record(values: tuple[Any, ...]) -> Record:
    record = dict(zip(FIELDS, values, strict=True))
    if record["note"] is ...:
        del record["note"]
    return record


RANDOM_RECORDS = st.tuples(
    _INTEGERS,
    _WORDS,
    st.floats(allow_nan=False, allow_infinity=False),
    _INTEGERS,
    st.lists(_WORDS, min_size=2, max_size=4),
    st.lists(_INTEGERS, min_size=2, max_size=4),
    _WORDS,
    _NOTES,
).map(_record)
_OPERANDS = ("id", "sym", "px", "qty", "tags", "fills", "venue", "note", "missing")
_FLAT_FIELD = re.compile(r"/([abc])\b")


def _generated(text: str, fields: tuple[str, str, str]) -> str:
    """A filter of test_expr_conformance_random's flat generator over /a, /b, /c, with
    those fields mapped onto three fields of the record."""
    chosen = dict(zip("abc", fields, strict=True))
    return _FLAT_FIELD.sub(lambda match: "{" + chosen[match.group(1)] + "}", text)


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    record=RANDOM_RECORDS,
    template=st.sampled_from(ALL_FILTERS),
    generated=_FLAT_FILTERS,
    operands=st.tuples(*[st.sampled_from(_OPERANDS)] * 3),
    update=RANDOM_RECORDS,
    changed=st.sets(st.sampled_from(FIELDS), min_size=1),
)
def test_every_type_agrees_with_json_on_generated_records(
    kinds: dict[str, Kind],
    record: Record,
    template: str,
    generated: str,
    operands: tuple[str, str, str],
    update: Record,
    changed: set[str],
) -> None:
    reference = kinds["json"]
    want_message = reference.decoded(record)
    filters = (template, _generated(generated, operands))
    want_reads = [_read(reference, want_message, field) for field in READS]
    want_keys = [_key(reference, fields, want_message) for fields in KEYS]
    want_matches = [compile(reference.filter(f)).matches(want_message) for f in filters]
    # A delta gives at least one field (an empty XML root element would be NULL).
    delta = {name: value for name, value in update.items() if name in changed} or {"id": 1}
    for type_name in TYPES:
        kind = kinds[type_name]
        message = kind.decoded(record)
        assert message == kind.read(record), type_name
        reads = [_read(kind, message, field) for field in READS]
        assert all(map(identical, reads, want_reads)), (type_name, reads, want_reads)
        assert [_key(kind, fields, message) for fields in KEYS] == want_keys, type_name
        matches = [compile(kind.filter(f)).matches(message) for f in filters]
        assert matches == want_matches, (type_name, filters)
        if kind.codec.traits.delta:
            merged = _merged(kind, record, delta, text_form=not kind.codec.traits.partial_native)
            assert merged == kind.read({**record, **delta}), type_name


# -- documented differences -------------------------------------------------------------------


def _each(kinds: dict[str, Kind], *names: str) -> Iterator[Kind]:
    return (kinds[name] for name in names)


def test_a_one_element_list_reads_back_as_a_value_in_xml_and_fix(
    kinds: dict[str, Kind],
) -> None:
    """xml.py: XML has no arrays; fix.py: a tag given once is a field, not a list. Reads
    and filters still agree; a SowKey over the list does not."""
    record = {**RECORDS[0], "tags": ["solo"]}
    reference = kinds["json"]
    want_key = _key(reference, ("tags",), reference.decoded(record))
    for kind in _each(kinds, "avro", "bson", "bflat", "json-flat"):
        assert _key(kind, ("tags",), kind.decoded(record)) == want_key
    for kind in _each(kinds, "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert message == kind.read({**record, "tags": "solo"})
        assert _read(kind, message, "tags") == "solo"
        assert _read(kind, message, "{tags}[0]") == "solo"
        assert compile(kind.filter("{tags} = 'solo'")).matches(message)
        assert _key(kind, ("tags",), message) != want_key
        solo = _key(reference, ("sym",), {"order": {"sym": "solo"}})
        assert _key(kind, ("tags",), message) == solo


def test_an_empty_list_is_null_everywhere_but_absent_in_xml_and_fix(
    kinds: dict[str, Kind],
) -> None:
    record = {**RECORDS[0], "fills": []}
    for kind in _each(kinds, "json", "avro", "bson", "bflat", "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert _read(kind, message, "fills") is None
        assert compile(kind.filter("{fills} IS NULL")).matches(message)
        kept = kind.name in ("json", "avro", "bson", "bflat")
        assert (message == kind.read(record)) is kept


@pytest.mark.parametrize("text", ["007", "24", "2.50", "1e3", "-5"])
def test_text_types_read_a_number_like_string_as_a_number(
    kinds: dict[str, Kind], text: str
) -> None:
    """base.py typed_text (spec 1.5): XML, FIX and NVFIX type their text, so a string
    that spells a number reads back as the number. Comparisons with a number still
    agree (a string converts); the SowKey and string functions see the number's text."""
    record = {**RECORDS[0], "sym": text}
    reference = kinds["json"]
    number = json.loads(text) if text != "007" else 7
    for kind in _each(kinds, "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert _read(kind, message, "sym") == number
        assert compile(kind.filter(f"{{sym}} = {number}")).matches(message)
        assert compile(reference.filter(f"{{sym}} = {number}")).matches(reference.decoded(record))
    for kind in _each(kinds, "avro", "bson", "bflat", "json-flat"):
        assert _read(kind, kind.decoded(record), "sym") == text
    if str(number) != text:
        xml = kinds["xml"]
        assert _key(xml, ("sym",), xml.decoded(record)) != _key(
            reference, ("sym",), reference.decoded(record)
        )


def test_a_boolean_reads_back_as_text_or_a_number(kinds: dict[str, Kind]) -> None:
    """fix.py, xml.py: a boolean is written true/false and read back as that string, which
    is not a boolean in a filter; bflat.py: it is written as the int8 1, which is (TRUE
    compares as 1). json and bson keep the boolean."""
    record = {**RECORDS[0], "note": True}
    for kind in _each(kinds, "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert _read(kind, message, "note") == "true"
        assert not compile(kind.filter("{note}")).matches(message)
        assert compile(kind.filter("{note} = 'true'")).matches(message)
    for kind in _each(kinds, "json", "bson", "bflat"):
        message = kind.decoded(record)
        assert _read(kind, message, "note") == (1 if kind.name == "bflat" else True)
        assert compile(kind.filter("{note} AND {note} = 1")).matches(message)
        assert not compile(kind.filter("{note} = 'true'")).matches(message)


def test_empty_strings_and_surrounding_spaces(kinds: dict[str, Kind]) -> None:
    """An empty string is NULL in every type (spec 1.5): json, avro, bson and bflat keep
    the "" they were given, XML and FIX read it back as null. XML ignores the spaces
    around a value's text (xml.py); the others keep them."""
    record = {**RECORDS[0], "note": "", "venue": "  NYSE "}
    for kind in _each(kinds, "json", "avro", "bson", "bflat", "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        kept = kind.name in ("json", "avro", "bson", "bflat")
        assert (message == kind.read(record)) is kept
        assert _read(kind, message, "note") is None
        assert compile(kind.filter("{note} IS NULL")).matches(message)
        assert _read(kind, message, "venue") == ("NYSE" if kind.name == "xml" else "  NYSE ")


def test_avro_reads_an_absent_nullable_field_as_null(kinds: dict[str, Kind]) -> None:
    record = RECORDS[2]
    assert "note" not in record
    avro = kinds["avro"]
    assert avro.decoded(record)["order"]["note"] is None
    assert "note" not in kinds["json"].decoded(record)["order"]
    assert _read(avro, avro.decoded(record), "note") is None


def test_avro_refuses_a_field_outside_its_schema(kinds: dict[str, Kind]) -> None:
    """A field outside the schema cannot be written: a delta that adds one adds it in
    json and is refused by avro with the field's name (never silently dropped)."""
    avro, reference = kinds["avro"], kinds["json"]
    extra = {"order": {"extra": 1}}
    stored = avro.payload(RECORDS[0])
    with pytest.raises(DecodeError, match="extra"):
        avro.codec.merge(stored, orjson.dumps(extra), True)
    merged = reference.codec.merge(reference.payload(RECORDS[0]), orjson.dumps(extra), False)
    assert reference.codec.decode(merged)["order"]["extra"] == 1


def test_avro_payload_deltas(kinds: dict[str, Kind]) -> None:
    """avro.py: a delta given as an Avro record gives every field but its nulls, so a
    null leaves the stored value (json's null sets it)."""
    avro, reference = kinds["avro"], kinds["json"]
    stored, delta = RECORDS[1], {**RECORDS[0], "note": None}
    merged = avro.codec.decode(avro.codec.merge(avro.payload(stored), avro.payload(delta), False))
    assert merged == avro.read({**delta, "note": stored["note"]})
    by_json = reference.codec.merge(reference.payload(stored), reference.payload(delta), False)
    assert reference.codec.decode(by_json) == nested(delta)


def test_xml_attributes_read_as_at_fields(kinds: dict[str, Kind]) -> None:
    """xml.py: an attribute is the field @name, as a json or bson key "@name" is."""
    value = {"order": {"@ver": 3, "@src": "FIXGW", **nested(RECORDS[0])["order"]}}
    xml = kinds["xml"]
    data = xml.codec.encode_json(value)
    assert data.startswith(b'<order ver="3" src="FIXGW">')
    for kind in _each(kinds, "json", "bson", "xml"):
        message = kind.codec.decode(kind.codec.encode_json(value))
        assert message == value
        assert compile("/order/@ver")(message) == 3
        assert compile("/order/@src = 'FIXGW' AND /order/@ver > 2").matches(message)


def test_fix_and_xml_refuse_what_they_cannot_carry(kinds: dict[str, Kind]) -> None:
    for kind in _each(kinds, "nvfix", "fix"):
        with pytest.raises(DecodeError, match="flat"):
            kind.codec.encode_json({"11": {"id": 1}})
    with pytest.raises(DecodeError, match="one root element"):
        kinds["xml"].codec.encode_json(flat(RECORDS[0]))


def test_binary_has_no_fields() -> None:
    binary = codec_for(SowTopic("BLOBS", message_type="binary"))
    data = b"id=7\x01sym=IBM\x01"
    assert binary.decode(data) == data
    assert binary.decode(binary.from_text(binary.to_text(data))) == data
    assert compile("/id IS NULL").matches(binary.decode(data))
    assert not compile("/id = 7").matches(binary.decode(data))
    function = key_function(SowTopic("BLOBS", message_type="binary", keys=("/id",)))
    assert function is not None
    with pytest.raises(MissingKeyError):
        function(binary.decode(data))
    for operation in (
        lambda: binary.decode_delta(data, False),
        lambda: binary.merge(data, data, False),
        lambda: binary.text_of({"id": 7}),
    ):
        with pytest.raises(DecodeError, match="opaque bytes without fields"):
            operation()


def test_other_scripts_digits_are_text_not_numbers(kinds: dict[str, Kind]) -> None:
    """Numbers are ASCII digits (spec 1.4: AMPS reads bytes): Arabic-Indic or full-width
    digits stay strings in the text types and never convert in a comparison, as in
    json."""
    record = {**RECORDS[0], "sym": "\u0661\u0662", "venue": "\uff11.\uff15"}
    reference = kinds["json"]
    want_key = _key(reference, ("sym", "venue"), reference.decoded(record))
    for kind in _each(kinds, "json", "avro", "bson", "bflat", "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert message == kind.read(record)
        assert _read(kind, message, "sym") == record["sym"]
        assert not compile(kind.filter("{sym} = 12 OR {venue} = 1.5")).matches(message)
        assert compile(kind.filter("{sym} > 12 AND ({venue} + 0) IS NAN")).matches(message)
        assert _key(kind, ("sym", "venue"), message) == want_key


@pytest.mark.parametrize(
    ("type_name", "value", "problem"),
    [
        ("xml", {"order": {"sym": "a\x0bb"}}, "XML 1.0 cannot carry"),
        ("xml", {"order": {"@src": "a\x00b"}}, "XML 1.0 cannot carry"),
        ("xml", {"order": {"sym": "a\ud800"}}, "XML 1.0 cannot carry"),
        ("nvfix", {"sym": "a\x01b"}, "field separator"),
        ("nvfix", {"a=b": 1}, "cannot be a nvfix tag"),
        ("nvfix", {"": 1}, "cannot be a nvfix tag"),
        ("fix", {"sym": 1}, "FIX tags are numbers"),
    ],
)
def test_a_message_that_would_not_read_back_is_refused(
    kinds: dict[str, Kind], type_name: str, value: Record, problem: str
) -> None:
    """Building a message (enrichment, delta merge) never writes a payload its own type
    cannot decode, or decodes as other fields: it refuses the value."""
    with pytest.raises(DecodeError, match=problem):
        kinds[type_name].codec.encode_json(value)


def test_xml_keeps_carriage_returns_and_a_separator_free_fix_value_keeps_equals(
    kinds: dict[str, Kind],
) -> None:
    record = {**RECORDS[0], "sym": "a\r\nb", "venue": "x=y\tz"}
    for kind in _each(kinds, "json", "avro", "bson", "bflat", "xml", "nvfix", "fix"):
        message = kind.decoded(record)
        assert _read(kind, message, "sym") == "a\r\nb"
        assert _read(kind, message, "venue") == "x=y\tz"
