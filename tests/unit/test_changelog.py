"""The hand-written envelope codec against fastavro and the .avsc schema."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor import changelog, errors

SCHEMA = fastavro.parse_schema(
    json.loads((Path(__file__).parents[2] / "schemas" / "changelog_envelope.avsc").read_text())
)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)

envelopes = st.builds(
    changelog.Envelope,
    topic=st.text(),
    message_type=st.sampled_from(["json", "avro", "binary"]),
    log_topic=st.text(),
    log_partition=st.integers(min_value=0, max_value=2**31 - 1),
    log_offset=st.integers(min_value=0, max_value=2**62),
    sow_key=st.text(),
    data=st.binary(max_size=20000),
    publish_time_ms=longs,
    apply_time_ms=longs,
    expiration_ms=st.none() | longs,
    correlation_id=st.none() | st.text(),
)


@given(envelopes)
def test_matches_fastavro_byte_for_byte(envelope: changelog.Envelope) -> None:
    ours = changelog.encode(envelope)
    buffer = io.BytesIO()
    record = {name: getattr(envelope, name) for name in (f["name"] for f in SCHEMA["fields"])}
    fastavro.schemaless_writer(buffer, SCHEMA, record)
    assert ours == buffer.getvalue()
    assert changelog.decode(ours) == envelope
    assert changelog.data_of(ours) == envelope.data
    assert fastavro.schemaless_reader(io.BytesIO(ours), SCHEMA, None) == record


def test_writer_reuses_encodings_correctly() -> None:
    writer = changelog.EnvelopeWriter("T", "json", "in", 3)
    first = writer.encode(1, b"k", b"{}", 1000, 1000)
    second = writer.encode(2, b"k", b"{}", 1000, 2000, 5, "c")
    assert changelog.decode(first).apply_time_ms == 1000
    decoded = changelog.decode(second)
    assert (decoded.publish_time_ms, decoded.apply_time_ms) == (1000, 2000)
    assert (decoded.expiration_ms, decoded.correlation_id) == (5, "c")


@given(st.binary(max_size=200))
def test_garbage_fails_only_with_envelope_error(data: bytes) -> None:
    """Any other exception type escaping decode() fails this test."""
    with contextlib.suppress(errors.EnvelopeError):
        changelog.decode(data)


def test_truncated_envelope_is_rejected() -> None:
    value = changelog.EnvelopeWriter("T", "json", "in", 0).encode(5, b"k", b"{}", 1, 2)
    with pytest.raises(errors.EnvelopeError):
        changelog.decode(value[:-3])
    with pytest.raises(errors.EnvelopeError, match="left over"):
        changelog.decode(value + b"\x00")


def test_control_values_round_trip() -> None:
    positions = [("in", 0, 5), ("in.sow-repartition", 0, 7)]
    assert changelog.decode_progress(changelog.encode_progress(positions)) == positions
    assert changelog.parse_position(changelog.format_position("a/b", 1, 2)) == ("a/b", 1, 2)
