"""Configuration value syntax: intervals, sizes, timestamps, enums and names."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.topology.model import RecoveryKind
from processor.topology.quantities import (
    check_factory_path,
    check_key_path,
    closest,
    format_interval,
    parse_choice,
    parse_expiration,
    parse_interval,
    parse_positive_int,
    parse_recovery_point,
    parse_size,
    parse_timestamp,
    unknown_name,
)

SECONDS_PER_UNIT = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
    "d": Fraction(86400),
    "w": Fraction(604800),
}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("7d", 604800.0),
        ("1w", 604800.0),
        ("86400s", 86400.0),
        ("250us", 0.00025),
        ("100ms", 0.1),
        ("10ns", 1e-8),
        ("1.5s", 1.5),
        (".5m", 30.0),
        ("0s", 0.0),
        ("30S", 30.0),
        ("5M", 300.0),
        ("250US", 0.00025),
        (" 2 h ", 7200.0),
    ],
)
def test_intervals(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


def test_one_day_is_86400_seconds() -> None:
    assert parse_interval("1d") == parse_interval("86400s")


def test_bare_number_interval_needs_a_unit() -> None:
    with pytest.raises(ValueError, match="a unit is required") as info:
        parse_interval("30")
    assert "30s" in str(info.value)
    assert "ms" in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("5x", "unknown interval unit 'x'"),
        ("5sec", "unknown interval unit 'sec'"),
        ("-5s", "negative"),
        ("", "empty interval"),
        ("soon", "not a valid interval"),
        ("1e3s", "not a valid interval"),
    ],
)
def test_bad_intervals(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as info:
        parse_interval(text)
    assert "ns, us, ms, s, m (minutes), h, d, w" in str(info.value) or fragment == "negative"


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(sorted(SECONDS_PER_UNIT)))
def test_interval_is_exact(number: int, unit: str) -> None:
    assert parse_interval(f"{number}{unit}") == float(number * SECONDS_PER_UNIT[unit])
    assert parse_interval(f"{number}{unit.upper()}") == parse_interval(f"{number}{unit}")


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False))
def test_interval_round_trip(seconds: float) -> None:
    text = format_interval(seconds)
    assert parse_interval(text) == seconds
    assert "e" not in text.rstrip("s")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0s"), (30.0, "30s"), (90.0, "90s"), (3600.0, "1h"), (0.25, "250ms"), (1.5, "1500ms")],
)
def test_format_interval_picks_the_largest_exact_unit(seconds: float, text: str) -> None:
    assert format_interval(seconds) == text


def test_format_interval_rejects_negative() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        format_interval(-1.0)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("512b", 512),
        ("512kb", 512 * 1024),
        ("5MB", 5 * 1024**2),
        ("1GB", 1024**3),
        ("2G", 2 * 1024**3),
        ("1t", 1024**4),
        ("1.5MB", 1536 * 1024),
        ("10 mb", 10 * 1024**2),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("5XB", "unknown size unit 'xb'"),
        ("0.3kb", "whole number of bytes"),
        ("-1MB", "negative"),
        ("big", "not a valid size"),
    ],
)
def test_bad_sizes(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_size(text)


JAN31 = datetime(2024, 1, 31, 10, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "20240131T100000Z",
        "20240131T100000z",
        "20240131T100000",
        "2024-01-31T10:00:00Z",
        "2024-01-31T10:00:00",
        "2024-01-31T10:00Z",
        "2024-01-31T11:00:00+01:00",
        "2024-01-31T05:00:00-0500",
    ],
)
def test_timestamps(text: str) -> None:
    parsed = parse_timestamp(text)
    assert parsed == JAN31
    assert parsed.tzinfo is UTC


def test_timestamp_fractions() -> None:
    assert parse_timestamp("20240131T100000.5Z").microsecond == 500000
    assert parse_timestamp("2024-01-31T10:00:00.000123Z").microsecond == 123


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("20241331T000000Z", "not a valid date and time"),
        ("2024-02-30T00:00:00Z", "not a valid date and time"),
        ("yesterday", "20240131T100000Z"),
        ("2024-01-31", "2024-01-31T10:00:00Z"),
    ],
)
def test_bad_timestamps(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_timestamp(text)


def test_recovery_points() -> None:
    assert parse_recovery_point("epoch").kind is RecoveryKind.EPOCH
    assert parse_recovery_point("NOW").kind is RecoveryKind.NOW
    point = parse_recovery_point("20240131T100000Z")
    assert point.kind is RecoveryKind.TIMESTAMP
    assert point.timestamp == JAN31
    assert point.timestamp_ms == int(JAN31.timestamp() * 1000)
    assert parse_recovery_point(datetime(2024, 1, 31, 10)).timestamp == JAN31
    with pytest.raises(ValueError, match="allowed: epoch, now, or a timestamp"):
        parse_recovery_point("creation")


def test_expiration() -> None:
    assert parse_expiration("disabled") is None
    assert parse_expiration("Enabled") == 0.0
    assert parse_expiration("30s") == 30.0
    with pytest.raises(ValueError, match=r"a unit is required.*'enabled' or 'disabled'"):
        parse_expiration("30")


def test_choice_is_case_insensitive() -> None:
    assert parse_choice(" JSON ", ("json", "avro"), "message_type") == "json"
    with pytest.raises(ValueError, match="allowed: json, avro"):
        parse_choice("xml", ("json", "avro"), "message_type")


def test_positive_int() -> None:
    assert parse_positive_int("12", "Partitions") == 12
    with pytest.raises(ValueError, match="out of range"):
        parse_positive_int("0", "Partitions")
    with pytest.raises(ValueError, match="<= 1024"):
        parse_positive_int("1025", "InitialSlabCount", 1024)
    with pytest.raises(ValueError, match="not a whole number"):
        parse_positive_int("1.5", "Partitions")


def test_key_paths() -> None:
    assert check_key_path(" /a/b ") == "/a/b"
    assert check_key_path("/55") == "/55"
    with pytest.raises(ValueError, match="must start with '/', for example /orderId"):
        check_key_path("orderId")
    for bad in ("/", "/a//b", "/a/"):
        with pytest.raises(ValueError, match="empty segment"):
            check_key_path(bad)


def test_factory_paths() -> None:
    assert check_factory_path("pkg.mod:make") == "pkg.mod:make"
    assert check_factory_path("pkg.mod.make") == "pkg.mod.make"
    for bad in ("make", "pkg mod:make", "libmy.so.1", "libmy_key_generator.so", "pkg.mod:"):
        with pytest.raises(ValueError, match=r"package\.module:factory"):
            check_factory_path(bad)


def test_suggestions() -> None:
    assert closest("partiton", ["partitions", "name"]) == "partitions"
    assert closest("key", ["Key", "Index"]) == "Key"
    assert closest("zzz", ["Key"]) is None
    message = unknown_name("element", "Keys", ["Key", "Index"], parent="<Topic>")
    assert message == "unknown element 'Keys' in <Topic> (did you mean 'Key'?); allowed: Index, Key"
