"""The bflat message type against the BFlat wire layout (lead byte: array bit, type,
tag length; LEB128 lengths; little-endian fixed widths), typed values, arrays, repeated
tags, building messages in the most compact types, delta merge and malformed input."""

from __future__ import annotations

import struct

import pytest

from processor.errors import DecodeError
from processor.expr import compile as compile_expression
from processor.messages import codec_for
from processor.topology.model import SowTopic

BFLAT = codec_for(SowTopic("REPS", message_type="bflat"))

#: Fields written by hand from the layout: a=1 (int8), s="hi" (string), x=[300,-2]
#: (int16 array), p=1.5 (double), abcdefgh=NULL (an 8-byte tag: its length as LEB128),
#: big=2**63 (leb128), d=1700000000000 (datetime), raw=b"\x00\xff" (binary).
WIRE = (
    b"\x19a\x01"
    + b"\x09s\x02hi"
    + b"\xa1x\x02\x2c\x01\xfe\xff"
    + b"\x39p"
    + struct.pack("<d", 1.5)
    + b"\x00\x08abcdefgh"
    + b"\x4bbig\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"
    + b"\x41d"
    + struct.pack("<q", 1_700_000_000_000)
    + b"\x13raw\x02\x00\xff"
)


def test_the_wire_layout_decodes_to_typed_fields() -> None:
    assert BFLAT.decode(WIRE) == {
        "a": 1,
        "s": "hi",
        "x": [300, -2],
        "p": 1.5,
        "abcdefgh": None,
        "big": 2**63,
        "d": 1_700_000_000_000,
        "raw": b"\x00\xff",
    }


def test_messages_are_built_in_the_most_compact_types() -> None:
    value = {"a": 1, "s": "hi", "x": [300, -2], "p": 1.5, "abcdefgh": None, "big": 2**63}
    assert BFLAT.encode_json(value) == WIRE[: WIRE.index(b"\x41d")]
    assert BFLAT.decode(BFLAT.encode_json({"n": -129, "m": [1, 2.5], "t": True})) == {
        "n": -129,
        "m": [1.0, 2.5],
        "t": 1,
    }
    with pytest.raises(DecodeError, match="flat"):
        BFLAT.encode_json({"nested": {"a": 1}})
    with pytest.raises(DecodeError, match="one"):
        BFLAT.encode_json({"mixed": [1, "a"]})


def test_filters_keys_and_a_delta_work_on_bflat_fields() -> None:
    message = BFLAT.decode(BFLAT.encode_json({"id": 7, "tags": ["a", "b"], "px": 2.5}))
    assert compile_expression("/tags = 'b' AND /px > 2 AND /id = 7").matches(message)
    merged = BFLAT.merge(BFLAT.encode_json(message), BFLAT.encode_json({"px": 3.0}), False)
    assert BFLAT.decode(merged) == {"id": 7, "tags": ["a", "b"], "px": 3.0}
    assert BFLAT.decode(BFLAT.merge(merged, b'{"id": 8}', True))["id"] == 8
    assert BFLAT.from_text(BFLAT.to_text(merged)) == merged


def test_a_leb128_integer_outside_64_bits_is_refused() -> None:
    with pytest.raises(DecodeError, match="outside the 64-bit range"):
        BFLAT.decode(b"\x4bbig" + b"\x80" * 10 + b"\x01")  # 2**70
    with pytest.raises(DecodeError, match="outside the 64-bit range"):
        BFLAT.encode_json({"big": 2**64})


def test_a_repeated_tag_is_a_list() -> None:
    assert BFLAT.decode(b"\x19a\x01\x19a\x02") == {"a": [1, 2]}


@pytest.mark.parametrize(
    "payload",
    [WIRE[:-1], b"\x19", b"\x09s\x05hi", b"\x00\x00", b"\x79q\x01", b"\x39p\x00\x00"],
)
def test_malformed_bflat_is_a_decode_error(payload: bytes) -> None:
    with pytest.raises(DecodeError, match="bflat"):
        BFLAT.decode(payload)
