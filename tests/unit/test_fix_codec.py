"""The fix and nvfix message types: fields typed as AMPS types them, repeated tags,
building messages, delta merge, keys and filters on their fields, and malformed input."""

from __future__ import annotations

import pytest

from processor.errors import DecodeError
from processor.expr import compile as compile_expression
from processor.keys import key_function
from processor.messages import codec_for
from processor.topology.model import SowTopic

NVFIX = codec_for(SowTopic("ORDERS", message_type="nvfix"))
FIX = codec_for(SowTopic("TRADES", message_type="fix"))


def test_nvfix_fields_are_typed_as_amps_types_them() -> None:
    message = NVFIX.decode(b"id=7\x01price=24.5\x01qty=24\x01sym=IBM\x01note=\x01e=1e3\x01")
    assert message == {"id": 7, "price": 24.5, "qty": 24, "sym": "IBM", "note": None, "e": 1000.0}


def test_a_repeated_tag_is_a_list_and_a_filter_on_it_is_existential() -> None:
    message = FIX.decode(b"35=D\x01448=A\x01448=B\x0138=100\x01")
    assert message == {"35": "D", "448": ["A", "B"], "38": 100}
    assert compile_expression("/448 = 'B' AND /38 > 50").matches(message)
    assert not compile_expression("/448 = 'C'").matches(message)


def test_messages_build_back_and_round_trip() -> None:
    value = {"id": 1, "sym": "IBM", "px": 2.5, "legs": ["a", "b"], "gone": None}
    data = NVFIX.encode_json(value)
    assert data == b"id=1\x01sym=IBM\x01px=2.5\x01legs=a\x01legs=b\x01gone=\x01"
    assert NVFIX.decode(data) == value
    with pytest.raises(DecodeError, match="flat"):
        NVFIX.encode_json({"nested": {"a": 1}})


def test_a_delta_replaces_the_fields_it_gives_and_keeps_the_others() -> None:
    stored = NVFIX.encode_json({"id": 1, "sym": "IBM", "qty": 10})
    merged = NVFIX.merge(stored, b"id=1\x01qty=20\x01", text_form=False)
    assert NVFIX.decode(merged) == {"id": 1, "sym": "IBM", "qty": 20}
    assert NVFIX.merge(None, b"id=2\x01", text_form=False) == b"id=2\x01"


def test_the_sow_key_comes_from_the_key_fields() -> None:
    topic = SowTopic("ORDERS", message_type="nvfix", keys=("/id",))
    generate = key_function(topic)
    assert generate is not None
    one = generate(NVFIX.decode(b"id=1\x01qty=5\x01"))
    assert one == generate(NVFIX.decode(b"qty=9\x01id=1\x01"))
    assert one != generate(NVFIX.decode(b"id=2\x01"))


@pytest.mark.parametrize(
    ("codec", "data", "problem"),
    [
        (NVFIX, b"id=1\x01broken\x01", "not tag=value"),
        (NVFIX, b"=1\x01", "not tag=value"),
        (FIX, b"35=D\x01Symbol=IBM\x01", "FIX tags are numbers"),
    ],
)
def test_malformed_messages_are_decode_errors_saying_where(
    codec: object, data: bytes, problem: str
) -> None:
    with pytest.raises(DecodeError, match=problem):
        codec.decode(data)  # type: ignore[attr-defined]
