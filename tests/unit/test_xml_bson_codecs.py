"""The xml and bson message types: fields as AMPS reads them (XML paths from the root
element, attributes as @name, repeated elements as lists, text typed; BSON's own types),
building messages back, delta merge, the fix/nvfix separator, and malformed input."""

from __future__ import annotations

import logging

import bson
import pytest

from processor.errors import DecodeError, TopologyError
from processor.expr import compile as compile_expression
from processor.keys import key_function
from processor.messages import codec_for
from processor.topology.amps_xml import parse_amps_config
from processor.topology.model import SowTopic

XML = codec_for(SowTopic("ALERTS", message_type="xml"))
BSON = codec_for(SowTopic("DOCS", message_type="bson"))


def test_xml_paths_start_at_the_root_and_attributes_are_at_names() -> None:
    message = XML.decode(
        b'<?xml version="1.0"?><Order update="true" n="3"><id>7</id><px> 24.5 </px>'
        b"<sym>IBM</sym><leg>A</leg><leg>B</leg><note/><q:venue xmlns:q='urn:v'>X</q:venue>"
        b"<!-- a comment --><detail><qty>10</qty></detail></Order>"
    )
    assert message == {
        "Order": {
            "@update": "true",
            "@n": 3,
            "id": 7,
            "px": 24.5,
            "sym": "IBM",
            "leg": ["A", "B"],
            "note": None,
            "venue": "X",
            "detail": {"qty": 10},
        }
    }
    assert compile_expression(
        "/Order/@update = 'true' AND /Order/leg = 'B' AND /Order/detail/qty > 5"
    ).matches(message)
    assert compile_expression("/Order/note IS NULL").matches(message)
    topic = SowTopic("ALERTS", message_type="xml", keys=("/Order/id",))
    function = key_function(topic)
    assert function is not None
    assert function(message) == function({"Order": {"id": 7}})


def test_xml_builds_back_round_trips_and_merges_a_delta() -> None:
    value = {"Order": {"@v": 2, "id": 1, "sym": "A&B <co>", "legs": ["a", "b"], "gone": None}}
    data = XML.encode_json(value)
    assert data == (
        b'<Order v="2"><id>1</id><sym>A&amp;B &lt;co&gt;</sym><legs>a</legs><legs>b</legs>'
        b"<gone/></Order>"
    )
    assert XML.decode(data) == value
    merged = XML.merge(data, b"<Order><sym>C</sym><extra><x>1</x></extra></Order>", False)
    assert XML.decode(merged)["Order"] == {
        "@v": 2,
        "id": 1,
        "sym": "C",
        "legs": ["a", "b"],
        "gone": None,
        "extra": {"x": 1},
    }
    with pytest.raises(DecodeError, match="one root element"):
        XML.encode_json({"a": 1, "b": 2})
    with pytest.raises(DecodeError, match="not an XML element name"):
        XML.encode_json({"Order": {"1bad": 1}})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"<a><b></a>", "not well-formed"),
        (b"", "not"),
        (b"plain text", "not well-formed"),
        (b"<a/><b/>", "not well-formed"),
    ],
)
def test_malformed_xml_is_a_decode_error(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        XML.decode(payload)


def test_xml_never_reads_an_external_entity() -> None:
    payload = b'<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/hostname">]><a><b>&e;</b></a>'
    assert XML.decode(payload) == {"a": {"b": None}}


def test_bson_carries_its_types_and_its_text_form_is_json() -> None:
    data = bson.encode({"id": 7, "px": 24.5, "sym": "IBM", "ok": True, "legs": [1, 2], "d": {}})
    message = BSON.decode(data)
    assert message == {"id": 7, "px": 24.5, "sym": "IBM", "ok": True, "legs": [1, 2], "d": {}}
    assert compile_expression("/legs = 2 AND /ok AND /px > 24").matches(message)
    assert BSON.to_text(data) == b'{"id":7,"px":24.5,"sym":"IBM","ok":true,"legs":[1,2],"d":{}}'
    assert BSON.from_text(BSON.to_text(data)) == data
    merged = BSON.merge(data, b'{"sym":"MSFT","d":{"x":null}}', True)
    assert BSON.decode(merged)["sym"] == "MSFT"
    assert BSON.decode(merged)["d"] == {"x": None}
    assert BSON.decode(BSON.merge(data, bson.encode({"id": 7, "px": 1.0}), False))["px"] == 1.0


@pytest.mark.parametrize(
    "payload", [b"", b"\x05\x00\x00", b'{"a":1}', b"\x0c\x00\x00\x00\x10a\x00"]
)
def test_malformed_bson_is_a_decode_error(payload: bytes) -> None:
    with pytest.raises(DecodeError, match="not a BSON document"):
        BSON.decode(payload)


def test_a_declared_fix_type_sets_its_field_separator() -> None:
    topology = parse_amps_config(
        "<AMPSConfig><MessageTypes><MessageType><Name>pipefix</Name><Module>nvfix</Module>"
        "<FieldSeparator>|</FieldSeparator></MessageType></MessageTypes><SOW><Topic>"
        "<Name>P</Name><MessageType>pipefix</MessageType><Key>/id</Key></Topic></SOW>"
        "</AMPSConfig>",
        "cfg.xml",
    )
    topic = topology.topic("P")
    assert (topic.message_type, topic.field_separator) == ("nvfix", b"|")
    assert codec_for(topic).decode(b"id=1|sym=IBM|") == {"id": 1, "sym": "IBM"}
    with pytest.raises(TopologyError, match="FieldSeparator") as error:
        parse_amps_config(
            "<AMPSConfig><MessageTypes><MessageType><Name>f</Name><Module>fix</Module>"
            "<FieldSeparator>=</FieldSeparator></MessageType></MessageTypes><SOW><Topic>"
            "<Name>P</Name><MessageType>f</MessageType></Topic></SOW></AMPSConfig>",
            "cfg.xml",
        )
    assert "MessageTypes/MessageType/FieldSeparator" in str(error.value)


@pytest.mark.parametrize(
    "payload",
    [
        b"<o><id>7</id><x>1</x></o>",
        b"<o><x>1</x><id> 7 </id></o>",
        b"<o><id>7</id><id>8</id></o>",  # repeated: a list, by the full decode
        b"<o><id><a>1</a></id></o>",  # nested
        b'<o><id n="1">7</id></o>',  # attributes
        b"<o xmlns:q='urn:q'><q:id>7</q:id></o>",  # a namespace
        b"<o><id/></o>",  # NULL
        b"<o><x>1</x></o>",  # missing
        b"<p><id>7</id></p>",  # another root
    ],
)
def test_the_xml_key_decoder_gives_the_full_decodes_key(payload: bytes) -> None:
    topic = SowTopic("ALERTS", message_type="xml", keys=("/o/id",))
    function = key_function(topic)
    assert function is not None
    decoder = XML.key_decoder(topic.keys)
    assert decoder is not XML.decode

    def key(decode: object) -> object:
        try:
            return function(decode(payload))  # type: ignore[operator]
        except Exception as exc:  # the same failure is the same answer
            return type(exc)

    assert key(decoder) == key(XML.decode)
    with pytest.raises(DecodeError, match="not well-formed"):
        decoder(b"<o><id>7</o>")


def test_fix_framing_separators_are_checked_and_said_not_to_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = (
        "<AMPSConfig><MessageTypes><MessageType><Name>f</Name><Module>fix</Module>"
        "<FieldSeparator>1</FieldSeparator><HeaderSeparator>2</HeaderSeparator>"
        "<MessageSeparator>3</MessageSeparator></MessageType></MessageTypes><SOW><Topic>"
        "<Name>P</Name><MessageType>f</MessageType><Key>/55</Key></Topic></SOW></AMPSConfig>"
    )
    with caplog.at_level(logging.INFO, logger="processor.topology.amps_reader"):
        topic = parse_amps_config(text, "cfg.xml").topic("P")
    assert topic.field_separator == b"\x01"
    assert "MessageType/HeaderSeparator: <HeaderSeparator> does not apply" in caplog.text
    assert "MessageType/MessageSeparator: <MessageSeparator> does not apply" in caplog.text
    with pytest.raises(TopologyError, match="HeaderSeparator"):
        parse_amps_config(text.replace("<HeaderSeparator>2", "<HeaderSeparator>=="), "cfg.xml")
