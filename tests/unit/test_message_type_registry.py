"""The message types' one table (processor/topology/message_types.py) and the names seed
001 gives: every type has a codec that carries its row, every name of the seed's "Message
Types" chapter loads in both topology formats (struct is refused, out of scope, with its
reason), and what the new types (msgpack, protobuf, composite) do that json has no
counterpart for, as their modules document it.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from processor.errors import ConfigurationError, DecodeError, TopologyError
from processor.expr import compile
from processor.messages import CODECS, codec_for
from processor.messages.composite import Unparsed, join, split
from processor.topology.loader import load_topology
from processor.topology.message_types import MESSAGE_TYPES, OUT_OF_SCOPE, TRAITS
from processor.topology.model import MessagePart, SchemaRegistry, SowTopic

SEED = Path(__file__).resolve().parents[1] / "data" / "seeds" / "seed001_message_types.txt"

PROTO = """
syntax = "proto3";
package ett;
message Leg { optional string venue = 1; int64 qty = 2; }
message Order {
  optional int64 id = 1;
  string sym = 2;
  int64 qty = 3;
  enum Side { BUY = 0; SELL = 1; }
  Side side = 4;
  repeated Leg legs = 5;
  map<string, int64> counts = 6;
  bytes blob = 7;
  optional string note = 8;
}
"""

#: The seed's section names and the Module names they stand for ("Default Message Types":
#: those AMPS loads by default, per its configuration guide).
SECTIONS = {
    "Default Message Types": ("fix", "nvfix", "xml", "json", "bflat", "msgpack", "bson", "binary"),
    "BFlat Messages": ("bflat",),
    "MessagePack Messages": ("msgpack",),
    "Composite Messages": ("composite-local", "composite-global"),
    "Protobuf Message Types": ("protobuf",),
    "Struct Message Types": ("struct",),
    "Configuring Message Types": (),
}


@pytest.fixture(scope="module")
def proto(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("proto") / "order.proto"
    path.write_text(PROTO)
    return path


def _protobuf(proto: Path, type_name: str = "ett.Order") -> object:
    return codec_for(
        SowTopic("O", message_type="protobuf", schema=str(proto), proto_type=type_name)
    )


# -- the table --------------------------------------------------------------------------------


def test_every_message_type_has_a_codec_that_carries_its_traits(proto: Path) -> None:
    assert set(CODECS) == set(MESSAGE_TYPES) == set(TRAITS)
    for name in MESSAGE_TYPES:
        topic = SowTopic(
            "T",
            message_type=name,
            schema=str(proto) if TRAITS[name].schema_type else None,
            proto_type="ett.Order" if TRAITS[name].schema_type else None,
            parts=(MessagePart("json"),) if TRAITS[name].composite else (),
            # A registry is asked for schemas only when a payload needs one.
            schema_registry=SchemaRegistry("http://127.0.0.1:9") if TRAITS[name].registry else None,
        )
        if name == "avro":
            continue  # needs an .avsc: test_message_conformance builds it
        codec = codec_for(topic)
        assert codec.name == name
        assert codec.traits is TRAITS[name]


def _seed_names() -> list[str]:
    headings = [
        re.sub(r"^\W+", "", line).strip() for line in SEED.read_text().splitlines() if line.strip()
    ]
    assert headings[0] == "Message Types"
    assert set(headings[1:]) == set(SECTIONS), "a section of the seed has no mapping here"
    return sorted({name for heading in headings[1:] for name in SECTIONS[heading]})


def _yaml(name: str, proto: Path) -> str:
    extra = ""
    if TRAITS.get(name) and TRAITS[name].schema_type:
        extra = f", schema: {proto}, proto_type: ett.Order"
    elif TRAITS.get(name) and TRAITS[name].composite:
        extra = ", parts: [json, binary]"
    return f"topics:\n  - {{name: T, message_type: {name}{extra}}}\n"


def _xml(name: str, proto: Path) -> str:
    declared = f"<Module>{name}</Module>"
    if TRAITS.get(name) and TRAITS[name].schema_type:
        declared += f"<ProtoPath>{proto.parent}</ProtoPath><ProtoFile>{proto.name}</ProtoFile>"
        declared += "<Type>ett.Order</Type>"
    elif TRAITS.get(name) and TRAITS[name].composite:
        declared += "<MessageType>json</MessageType><MessageType>binary</MessageType>"
    return (
        "<AMPSConfig><MessageTypes><MessageType><Name>mine</Name>"
        f"{declared}</MessageType></MessageTypes>"
        "<SOW><Topic><Name>T</Name><MessageType>mine</MessageType></Topic></SOW></AMPSConfig>"
    )


@pytest.mark.parametrize("name", _seed_names())
def test_every_message_type_seed_001_names_loads(tmp_path: Path, proto: Path, name: str) -> None:
    for file, text in (("t.yaml", _yaml(name, proto)), ("t.xml", _xml(name, proto))):
        path = tmp_path / file
        path.write_text(text)
        if name in OUT_OF_SCOPE:
            with pytest.raises(TopologyError, match="not implemented"):
                load_topology(path)
            continue
        topic = load_topology(path).topics["T"]
        assert topic.message_type == name
        assert codec_for(topic).traits.name == name


def test_the_default_types_load_undeclared(tmp_path: Path) -> None:
    for name in SECTIONS["Default Message Types"]:
        path = tmp_path / "t.xml"
        path.write_text(
            f"<AMPSConfig><SOW><Topic><Name>T</Name><MessageType>{name}</MessageType>"
            "</Topic></SOW></AMPSConfig>"
        )
        assert load_topology(path).topics["T"].message_type == name


def test_a_type_that_needs_a_declaration_says_so(tmp_path: Path) -> None:
    for name, needs in (("protobuf", "<ProtoFile>"), ("composite-local", "<MessageType>json")):
        path = tmp_path / "t.xml"
        path.write_text(
            f"<AMPSConfig><SOW><Topic><Name>T</Name><MessageType>{name}</MessageType>"
            "</Topic></SOW></AMPSConfig>"
        )
        with pytest.raises(TopologyError, match="needs a declaration") as info:
            load_topology(path)
        assert needs in str(info.value)


def test_a_view_cannot_produce_what_amps_refuses(tmp_path: Path) -> None:
    for name in ("protobuf", "composite-global", "composite-local"):
        path = tmp_path / "t.yaml"
        path.write_text(
            "topics:\n  - {name: A, key: /a}\n"
            f"views:\n  - {{name: V, message_type: {name}, underlying: A, "
            "projection: [/a], grouping: [/a]}\n"
        )
        with pytest.raises(TopologyError):
            load_topology(path)


def test_composite_global_takes_no_enrichment(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    topic = "{name: A, key: /a, message_type: composite-global, parts: [json]"
    path.write_text(f"topics:\n  - {topic}, enrichment: ['1 AS /b']}}\n")
    with pytest.raises(TopologyError, match="cannot be built from fields"):
        load_topology(path)
    path.write_text(
        f"topics:\n  - {topic}}}\n"
        "conflated_topics:\n  - {name: C, underlying: A, enrichment: ['1 AS /b']}\n"
    )
    with pytest.raises(TopologyError, match="cannot be built from fields"):
        load_topology(path)


# -- msgpack ------------------------------------------------------------------------------------


def test_msgpack_keys_binaries_and_refusals() -> None:
    import msgpack

    codec = codec_for(SowTopic("M", message_type="msgpack"))
    data = msgpack.packb({"a": b"\x00\x01", 7: "seven", "n": {"x": [1, 2]}}, use_bin_type=True)
    message = codec.decode(data)
    assert message == {"a": b"\x00\x01", "7": "seven", "n": {"x": [1, 2]}}
    assert compile("/7 = 'seven' AND /n/x = 2").matches(message)
    assert orjson.loads(codec.to_text(data)) == {"a": "AAE=", "7": "seven", "n": {"x": [1, 2]}}
    for bad, problem in (
        (msgpack.packb([1, 2]), "must be a map"),
        (b"\xc1", "not a MessagePack message"),
        (msgpack.packb({"a": msgpack.ExtType(3, b"x")}), "extension value"),
        (msgpack.packb({"a": 1}) + b"\x01", "not a MessagePack message"),
        (b"\x81\xa1a" + b"\x91" * 150 + b"\x01", "nests deeper"),
        (b"\x81" * 300 + b"\xa1a\x01" + b"\x01" * 300, "map key of the payload is a map"),
    ):
        with pytest.raises(DecodeError, match=problem):
            codec.decode(bad)


# -- protobuf -----------------------------------------------------------------------------------


def test_protobuf_fields_as_filters_read_them(proto: Path) -> None:
    codec = _protobuf(proto)
    data = codec.encode_json(
        {"id": 7, "side": "SELL", "legs": [{"venue": "NYSE", "qty": 5}], "counts": {"a": 2}}
    )
    message = codec.decode(data)
    # proto3 scalars without presence read as their defaults; optional ones only when set.
    assert message == {
        "id": 7,
        "sym": "",
        "qty": 0,
        "side": "SELL",
        "blob": b"",
        "legs": [{"venue": "NYSE", "qty": 5}],
        "counts": {"a": 2},
    }
    assert compile("/qty = 0 AND /sym IS NULL AND /note IS NULL").matches(message)
    assert compile("/side = 'SELL' AND /legs/venue = 'NYSE' AND /counts/a = 2").matches(message)
    # A payload delta gives what is on the wire: an unset field, or one at its default,
    # is not given (nor is a null: give those as JSON text).
    stored = codec.encode_json({"id": 7, "sym": "IBM", "qty": 9, "note": "x"})
    merged = codec.decode(codec.merge(stored, codec.encode_json({"id": 7, "qty": 0}), False))
    assert (merged["sym"], merged["qty"], merged["note"]) == ("IBM", 9, "x")
    text = orjson.dumps({"id": 7, "qty": 0, "note": None})
    merged = codec.decode(codec.merge(stored, text, True))
    assert (merged["sym"], merged["qty"], "note" in merged) == ("IBM", 0, False)


def test_protobuf_refusals_name_the_problem(proto: Path, tmp_path: Path) -> None:
    codec = _protobuf(proto)
    with pytest.raises(DecodeError, match='no field named "extra"'):
        codec.encode_json({"extra": 1})
    with pytest.raises(DecodeError, match=r"not a ett\.Order message"):
        codec.decode(b"\xff\xff\xff")
    with pytest.raises(ConfigurationError, match=r"it defines ett\.Leg, ett\.Order"):
        _protobuf(proto, "Order")
    broken = tmp_path / "broken.proto"
    broken.write_text('syntax = "proto3"; message A { strin x = 1; }')
    with pytest.raises(ConfigurationError, match=r"does not compile: .*strin"):
        _protobuf(broken, "A")
    not_a_set = tmp_path / "order.desc"
    not_a_set.write_text("{")
    with pytest.raises(ConfigurationError, match="not a compiled descriptor set"):
        _protobuf(not_a_set, "A")


def test_a_descriptor_set_is_the_proto_file(proto: Path, tmp_path: Path) -> None:
    described = tmp_path / "order.desc"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto.parent}",
            "--include_imports",
            f"--descriptor_set_out={described}",
            str(proto),
        ],
        check=True,
    )
    by_file, by_set = _protobuf(proto), _protobuf(described)
    data = by_file.encode_json({"id": 1, "legs": [{"qty": 3}]})
    assert by_set.decode(data) == by_file.decode(data)
    assert by_set.encode_json(by_set.decode(data)) == data


# -- composite ----------------------------------------------------------------------------------


def test_composite_parts_are_length_prefixed_big_endian(proto: Path) -> None:
    parts = (
        MessagePart("json"),
        MessagePart("nvfix"),
        MessagePart("binary"),
        MessagePart("protobuf", str(proto), "ett.Order"),
    )
    codec = codec_for(SowTopic("C", message_type="composite-local", parts=parts))
    order = _protobuf(proto).encode_json({"id": 3, "sym": "IBM"})
    pieces = [b'{"a":{"b":1}}', b"x=2\x01y=hi\x01", b"\x00\xffraw", order, b"payload"]
    data = b"".join(struct.pack(">I", len(p)) + p for p in pieces)
    assert data == join(pieces)
    assert split(data) == pieces
    message = codec.decode(data)
    assert message["0"] == {"a": {"b": 1}}
    assert message["1"] == {"x": 2, "y": "hi"}
    assert message["2"] == Unparsed(b"\x00\xffraw")
    assert message["4"] == Unparsed(b"payload")
    assert compile("/0/a/b = 1 AND /1/x = 2 AND /3/sym = 'IBM'").matches(message)
    assert not compile("/2 = 'x' OR /2 IS NULL").matches(message)  # an opaque part
    # The text form: JSON parts as JSON, others as text, unparsed parts as Base64.
    items = orjson.loads(codec.to_text(data))
    assert items[:3] == [{"a": {"b": 1}}, "x=2\x01y=hi\x01", "AP9yYXc="]
    assert codec.decode(codec.from_text(codec.to_text(data))) == message
    # A delta merges part by part and keeps what it does not give.
    delta = orjson.dumps([{"a": {"c": 2}}, None, None, {"qty": 4}])
    merged = codec.decode(codec.merge(data, delta, True))
    assert merged["0"] == {"a": {"b": 1, "c": 2}}
    assert merged["3"]["qty"] == 4
    assert (merged["2"], merged["4"]) == (message["2"], message["4"])
    with pytest.raises(DecodeError, match="/x of a composite-local message is not a part"):
        codec.encode_json({**message, "x": 1})  # e.g. an enrichment writing /x
    for bad, problem in (
        (data[:-2], "claims 7 bytes"),
        (data + b"\x00\x00", "into the length of part 5"),
        (join(pieces[:2]), "has 4 parts"),
        (join([b"{", *pieces[1:]]), "part 0 \\(json\\)"),
    ):
        with pytest.raises(DecodeError, match=problem):
            codec.decode(bad)


def test_composite_global_is_one_tree_and_takes_no_delta() -> None:
    parts = (MessagePart("json"), MessagePart("nvfix"), MessagePart("binary"))
    codec = codec_for(SowTopic("G", message_type="composite-global", parts=parts))
    data = join([b'{"a":1,"b":{"c":2}}', b"a=9\x01d=4\x01", b"\x01"])
    message = codec.decode(data)
    assert message == {"a": 1, "b": {"c": 2}, "d": 4}  # the first part's /a wins
    assert compile("/a = 1 AND /b/c = 2 AND /d = 4").matches(message)
    with pytest.raises(DecodeError, match="no delta_publish"):
        codec.merge(data, data, False)
    with pytest.raises(DecodeError, match="JSON array of its parts"):
        codec.encode_json(message)


def test_delta_and_select_subscriptions_ask_the_types_traits(proto: Path) -> None:
    """subscriptions/shape.py: a type without deltas sends whole (selected) messages to a
    delta subscriber; a type whose partial messages have no payload (protobuf) gives
    select lists and deltas only in the text form."""
    from processor.errors import InvalidRequestError
    from processor.subscriptions.shape import MessageShape

    glob = SowTopic(
        "G", message_type="composite-global", keys=("/id",), parts=(MessagePart("json"),)
    )
    pb = SowTopic("P", message_type="protobuf", schema=str(proto), proto_type="ett.Order")
    codecs = {t.name: codec_for(t) for t in (glob, pb)}
    shape = MessageShape.for_request([glob], codecs, delta=True, select="[-/,+/id,+/b]")
    assert shape is not None
    held, data = join([b'{"id": 1, "a": 1, "b": 1}']), join([b'{"id": 1, "a": 2, "b": 1}'])
    assert shape.update("G", held, data) == (b'{"id":1,"b":1}', False)  # whole, selected
    with pytest.raises(InvalidRequestError, match="text form"):
        MessageShape.for_request([pb], codecs, select="[-/,+/id]")
    shape = MessageShape.for_request([pb], codecs, select="[-/,+/id]", text_form=True)
    assert shape is not None
    assert shape.full("P", codecs["P"].encode_json({"id": 4, "sym": "X"})) == b'{"id":4}'


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ("<Module>protobuf</Module><ProtoFile>order.proto</ProtoFile>", "needs <Type>"),
        ("<Module>protobuf</Module><Type>ett.Order</Type>", "needs <ProtoFile>"),
        (
            "<Module>protobuf</Module><ProtoFile>nowhere.proto</ProtoFile><Type>T</Type>",
            "in none of the ProtoPath directories",
        ),
        ("<Module>protobuf</Module><Schema>a.avsc</Schema>", "<Schema> does not apply"),
        ("<Module>json</Module><Type>T</Type>", "<Type> does not apply to Module json"),
        ("<Module>composite-local</Module>", "lists its parts"),
        (
            "<Module>composite-global</Module><MessageType>mine</MessageType>",
            "cannot be composite-global itself",
        ),
        ("<Module>struct</Module>", "not implemented"),
    ],
)
def test_an_amps_declaration_that_cannot_load_says_why(
    tmp_path: Path, proto: Path, declared: str, said: str
) -> None:
    (tmp_path / "order.proto").write_text(PROTO)
    path = tmp_path / "t.xml"
    path.write_text(
        "<AMPSConfig><MessageTypes><MessageType><Name>mine</Name>"
        f"{declared}</MessageType></MessageTypes>"
        "<SOW><Topic><Name>T</Name><MessageType>mine</MessageType></Topic></SOW></AMPSConfig>"
    )
    with pytest.raises(TopologyError, match=re.escape(said)) as info:
        load_topology(path)
    assert "MessageType" in str(info.value)
