"""delta_publish merge (spec 3.3, section 9 item 21) and delta subscriptions' changed fields
(spec 3.10), through the json and avro codecs and the field functions they use."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import DecodeError, MessageError
from processor.messages.avro import AvroCodec
from processor.messages.binary import BinaryCodec
from processor.messages.fields import changed, merge
from processor.messages.json import JsonCodec

SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "status", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": ["null", "int"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}


def _json_merge(stored: dict[str, Any] | None, delta: dict[str, Any]) -> Any:
    codec = JsonCodec()
    raw = None if stored is None else orjson.dumps(stored)
    return orjson.loads(codec.merge(raw, orjson.dumps(delta), text_form=False))


def test_two_deltas_merge_into_one_record() -> None:
    first = _json_merge({"id": 1, "a": 1}, {"id": 1, "b": 2})
    assert _json_merge(first, {"id": 1, "c": 3}) == {"id": 1, "a": 1, "b": 2, "c": 3}


def test_nested_objects_merge_leaf_by_leaf() -> None:
    merged = _json_merge({"id": 1, "a": {"x": 1, "y": 2}}, {"id": 1, "a": {"x": 9}})
    assert merged == {"id": 1, "a": {"x": 9, "y": 2}}


def test_arrays_and_their_subdocuments_are_replaced_whole() -> None:
    stored = {"id": 42, "contents": {"packages": [{"box": "chocolates"}, {"bowl": "noodles"}]}}
    delta = {"id": 42, "contents": {"packages": [{"basket": "eggs"}]}}
    assert _json_merge(stored, delta) == delta  # the spec's own example


def test_a_delta_cannot_remove_a_field() -> None:
    assert _json_merge({"id": 1, "keep": "me"}, {"id": 1}) == {"id": 1, "keep": "me"}


def test_a_delta_with_no_record_is_the_record() -> None:
    assert _json_merge(None, {"id": 7, "x": [1]}) == {"id": 7, "x": [1]}


def test_a_json_null_is_a_given_value() -> None:
    assert _json_merge({"id": 1, "a": 5}, {"id": 1, "a": None}) == {"id": 1, "a": None}


def test_avro_binary_delta_gives_its_non_null_fields() -> None:
    codec = AvroCodec(SCHEMA)
    stored = codec.encode_json({"id": 1, "status": "open", "qty": 5, "tags": ["a"]})
    delta = codec.encode_json({"id": 1, "status": None, "qty": 9, "tags": ["b", "c"]})
    merged = codec.decode(codec.merge(stored, delta, text_form=False))
    assert merged == {"id": 1, "status": "open", "qty": 9, "tags": ["b", "c"]}


def test_avro_text_delta_gives_the_fields_present() -> None:
    codec = AvroCodec(SCHEMA)
    stored = codec.encode_json({"id": 1, "status": "open", "qty": 5, "tags": ["a"]})
    merged = codec.decode(codec.merge(stored, b'{"id": 1, "qty": 6}', text_form=True))
    assert merged == {"id": 1, "status": "open", "qty": 6, "tags": ["a"]}


def test_avro_partial_delta_without_record_takes_defaults() -> None:
    codec = AvroCodec(SCHEMA)
    merged = codec.decode(codec.merge(None, b'{"id": 3, "qty": 1}', text_form=True))
    assert merged == {"id": 3, "status": None, "qty": 1, "tags": []}


def test_avro_delta_the_schema_cannot_hold_is_refused_with_the_field() -> None:
    codec = AvroCodec(SCHEMA)
    with pytest.raises(MessageError, match="id") as caught:
        codec.merge(None, b'{"qty": 1}', text_form=True)
    assert "partial record" in str(caught.value)


def test_binary_messages_refuse_deltas() -> None:
    with pytest.raises(DecodeError, match="delta_publish"):
        BinaryCodec().merge(b"old", b"new", text_form=False)


def test_changed_gives_leaf_paths_and_whole_arrays() -> None:
    old = {"id": 1, "a": {"x": 1, "y": 2}, "list": [1, 2], "same": "s", "gone": 1}
    new = {"id": 1, "a": {"x": 1, "y": 3}, "list": [1, 2, 3], "same": "s", "added": True}
    assert changed(old, new) == {"a": {"y": 3}, "list": [1, 2, 3], "added": True}


def test_changed_tells_types_apart() -> None:
    assert changed({"a": 1}, {"a": 1.0}) == {"a": 1.0}
    assert changed({"a": 1}, {"a": True}) == {"a": True}


_leaf = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.none())
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    ),
    max_leaves=12,
)
_messages = st.dictionaries(st.sampled_from("abcdef"), _values, max_size=5)


_settings = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(_messages, _messages)
def test_merge_gives_every_delta_leaf_and_keeps_the_rest(
    stored: dict[str, Any], delta: dict[str, Any]
) -> None:
    merged = merge(stored, delta)
    # merging the same delta again changes nothing, and the delta's fields read back
    assert merge(merged, delta) == merged
    assert changed(merged, merge(merged, delta)) == {}
    for name in stored:
        assert name in merged  # nothing is removed


@_settings
@given(_messages, _messages)
def test_changed_is_what_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    diff = changed(old, new)
    # the changed fields merged into old give every leaf of new (a field only old has is
    # not represented: a delta never removes one)
    assert changed(merge(old, diff), new) == {}
    assert changed(old, merge(old, diff)) == diff


def _shape(**options: Any) -> Any:
    from processor.subscriptions.shape import MessageShape
    from processor.topology.model import SowTopic

    topic = SowTopic("ORDERS", keys=("/id", "/desk/book"))
    return MessageShape.for_request([topic], {"ORDERS": JsonCodec()}, **options)


def test_a_delta_update_is_the_changed_leaves_plus_the_key_fields() -> None:
    shape = _shape(delta=True)
    old = orjson.dumps({"id": 1, "desk": {"book": 2, "name": "a"}, "px": 1, "tags": [1, 2]})
    new = orjson.dumps({"id": 1, "desk": {"book": 2, "name": "b"}, "px": 1, "tags": [1, 3]})
    assert orjson.loads(_delta(shape.update("ORDERS", old, new))) == {
        "id": 1,
        "desk": {"book": 2, "name": "b"},
        "tags": [1, 3],
    }
    # nothing changed: the Key fields alone, or nothing at all with no_empties
    assert orjson.loads(_delta(shape.update("ORDERS", old, old))) == {"id": 1, "desk": {"book": 2}}
    assert _shape(delta=True, no_empties=True).update("ORDERS", old, old) is None


def test_with_a_select_list_only_selected_changes_count() -> None:
    shape = _shape(delta=True, no_empties=True, select="[-/,+/px]")
    old = orjson.dumps({"id": 1, "desk": {"book": 2}, "px": 1, "qty": 1})
    unselected = orjson.dumps({"id": 1, "desk": {"book": 2}, "px": 1, "qty": 2})
    selected = orjson.dumps({"id": 1, "desk": {"book": 2}, "px": 5, "qty": 3})
    assert shape.update("ORDERS", old, unselected) is None
    assert orjson.loads(_delta(shape.update("ORDERS", old, selected))) == {
        "id": 1,
        "desk": {"book": 2},
        "px": 5,
    }
    assert orjson.loads(shape.full("ORDERS", selected)) == {"px": 5}


def test_options_a_message_type_cannot_take_are_refused() -> None:
    from processor.errors import InvalidRequestError
    from processor.subscriptions.shape import MessageShape
    from processor.topology.model import SowTopic

    avro = SowTopic("A", message_type="avro", keys=("/id",))
    binary = SowTopic("B", message_type="binary")
    codecs: dict[str, Any] = {"A": AvroCodec(SCHEMA), "B": BinaryCodec()}
    with pytest.raises(InvalidRequestError, match="text_form"):
        MessageShape.for_request([avro], codecs, delta=True)
    with pytest.raises(InvalidRequestError, match="binary messages have no fields"):
        MessageShape.for_request([binary], codecs, select="[+/a]")
    shape = MessageShape.for_request([avro, binary], codecs, delta=True, text_form=True)
    assert shape is not None
    assert shape.shapes("A")
    assert not shape.shapes("B")
    assert MessageShape.for_request([avro], codecs) is None


@pytest.mark.parametrize("expiration", [None, 1_700_000_000_000])
@pytest.mark.parametrize("correlation", [None, "", "c-1é"])
def test_the_stored_message_and_correlation_id_read_without_a_full_decode(
    expiration: int | None, correlation: str | None
) -> None:
    from processor import changelog

    writer = changelog.EnvelopeWriter("ORDERS", "json", "in.ORDERS", 1)
    envelope = writer.encode(12345, b"987", b'{"id":1}', 10, 20, expiration, correlation)
    whole = changelog.decode(envelope)
    assert changelog.data_and_correlation_of(envelope) == (whole.data, whole.correlation_id)


def _delta(update: tuple[bytes, bool] | None) -> bytes:
    """The data of an update that must be a delta."""
    assert update is not None
    data, is_delta = update
    assert is_delta
    return data
