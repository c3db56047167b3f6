"""Hostile payloads, a short run (issue 31 point 10; the heavy run, 200,000 payloads per
message type, is tests/heavy/test_codec_fuzz.py): every codec answers the payloads the
issue's trials found, and mutations of valid messages, with a DecodeError or a value every
serving path takes, in time linear in the payload (tests/heavy/codec_fuzzing.py)."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import DecodeError
from processor.messages import limits
from tests.heavy.codec_fuzzing import HOSTILE, TYPES, check, codecs, fuzz

CODECS = codecs()


@pytest.mark.parametrize("name", TYPES)
def test_mutated_payloads_are_refused_or_servable(name: str) -> None:
    report = fuzz(name, 300, seed=7)
    print(report.summary(name))
    assert not report.failures, "\n".join(
        f"{case}\n  -> {error}" for case, error in report.failures
    )
    assert not report.slow, report.slow


@pytest.mark.parametrize(
    ("name", "payload", "limit"),
    [(name, payload, f"{name}-{i}") for name in TYPES for i, payload in enumerate(HOSTILE[name])],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_trials_hostile_payloads_are_refused_quickly(
    name: str, payload: bytes, limit: str
) -> None:
    started = time.perf_counter()
    if name == "binary":
        check(CODECS[name], payload)  # opaque bytes: every payload is one
        return
    with pytest.raises(DecodeError):
        CODECS[name].decode(payload)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("name", "payload", "said"),
    [
        ("bflat", bytes.fromhex("1a 69 64 33 81 6e ff ff ff ff ff ff ff ff 7f"), "10000"),
        ("bflat", bytes.fromhex("1a 69 64 33 81 6e 91 4e"), "array 'n' holds 10001 NULLs"),
        ("nvfix", b"a=1\x01" * (limits.MAX_REPEATS + 1), "10000 times"),
        ("xml", b"<O><p>" + b"9" * 5000 + b"</p></O>", "field 'p'"),
        ("fix", b"44=18446744073709551616\x01", "field '44'"),
        ("json", b'{"a":' * 101 + b"1" + b"}" * 101, "100 levels"),
        ("xml", b"<a " + b" ".join(b'a%d="1"' % i for i in range(300)) + b"/>", "256"),
    ],
)
def test_a_refusal_names_what_where_and_the_limit(name: str, payload: bytes, said: str) -> None:
    with pytest.raises(DecodeError, match=said):
        CODECS[name].decode(payload)


def test_the_xml_key_only_decode_checks_every_field() -> None:
    """The processor's hot path decodes only the Key fields of a small document: a field
    it does not read must still be within the limits, or the stored record could not be
    served."""
    decode = CODECS["xml"].key_decoder(("/O/id",))
    assert decode(b"<O><id>1</id><p>12</p></O>") == {"O": {"id": 1}}
    with pytest.raises(DecodeError, match="field 'p'"):
        decode(b"<O><id>1</id><p>" + b"9" * 5000 + b"</p></O>")
    with pytest.raises(DecodeError, match="100 levels"):
        decode(b"<O><id>1</id>" + b"<a>" * 120 + b"</a>" * 120 + b"</O>")


def test_values_at_the_limits_are_accepted() -> None:
    deep: dict[str, object] = {"a": 1}
    for _ in range(limits.MAX_DEPTH - 1):
        deep = {"x": deep}
    for name in ("json", "bson"):
        codec = CODECS[name]
        check(codec, codec.encode_json(deep))
    flat = {"a": [limits.MAX_INTEGER, limits.MIN_INTEGER]}
    for name in ("nvfix", "bflat"):
        codec = CODECS[name]
        assert codec.decode(codec.encode_json(flat)) == flat
    assert CODECS["nvfix"].decode(b"a=1\x01" * limits.MAX_REPEATS)["a"] == [1] * 10_000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(TYPES), payload=st.binary(max_size=200))
def test_any_bytes_are_refused_or_servable(name: str, payload: bytes) -> None:
    with contextlib.suppress(DecodeError):
        check(CODECS[name], payload)


def test_a_delta_merge_whose_result_passes_a_limit_is_refused() -> None:
    """Each side within the limits, their merge not: stored, it would not decode again."""
    codec = CODECS["json"]
    stored = codec.encode_json({"id": 1, "a": [0] * 600_000})
    delta = codec.encode_json({"id": 1, "b": [0] * 600_000})
    with pytest.raises(DecodeError, match="1000000"):
        codec.merge(stored, delta, False)
    assert codec.decode(codec.merge(stored, b'{"id": 1, "c": 2}', True))["c"] == 2
