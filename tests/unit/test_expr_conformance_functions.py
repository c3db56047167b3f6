"""Conformance of the built-in functions with the AMPS semantics (spec section 2):
string, date/time, numeric, geospatial, array and generic functions, and the message
context functions.

Every row is (expression text, message, expected value) evaluated with
``processor.expr.evaluate``. Rows whose behaviour AMPS does not document (spec section 9,
or an "unconfirmed" point) carry ``impl`` in their id: they pin this implementation's
choice, not AMPS behaviour. Every row is also run through the reference compiler (no
inline fast paths) and through ``Expression.scan`` (both strategies), which must agree.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from processor.expr import ContextInput, FieldInput, MessageContext, compile, evaluate
from processor.expr.functions_numeric import _CRC64_TABLE, crc_reflected
from tests.unit.expr_helpers import NAN, Approx, agrees, same

MIXED = [24, 20, "cat", 75, 1.3, 200, "75", "42"]  # spec 2.7: 24, 020, 'cat', 75, ...
CONTEXT = MessageContext(sow_key="k1", topic="orders", message_size=120, last_updated=1.5)

ROWS: list[tuple[str, str, dict[str, Any], Any]] = [
    # --- 2.1 string functions
    ("length", "LENGTH('fandango')", {}, 8),
    ("length-bytes", "LENGTH('é')", {}, 2),
    ("length-number", "LENGTH(12345)", {}, 5),
    ("length-null", "LENGTH(/x)", {}, None),
    ("concat", "CONCAT('a', 'b', 'c')", {}, "abc"),
    ("impl27-concat-null", "CONCAT('a', NULL, 'b')", {}, "ab"),
    ("concat-numbers", "CONCAT(1, 2.5)", {}, "12.5"),
    ("impl27-concat-all-null", "CONCAT(/x)", {}, None),
    ("impl-concat-bool", "CONCAT(TRUE_VALUE())", {}, "true"),
    ("upper", "UPPER('abc')", {}, "ABC"),
    ("lower", "LOWER('ABC')", {}, "abc"),
    ("upper-ascii-only", "UPPER('aé')", {}, "Aé"),
    ("upper-null", "UPPER(/x)", {}, None),
    ("replace", "REPLACE('fandango', 'dan', 'din')", {}, "fandingo"),
    ("replace-all", "REPLACE('aaa', 'a', 'b')", {}, "bbb"),
    ("impl-replace-empty-deletes", "REPLACE('fandango', 'an', '')", {}, "fdgo"),
    ("regexp-replace", "REGEXP_REPLACE('fandango', 'n.*n', 'r')", {}, "fargo"),
    ("regexp-replace-all", "REGEXP_REPLACE('fandango', 'a', 'o')", {}, "fondongo"),
    ("regexp-replace-flags", "REGEXP_REPLACE('abc', '(?i)B', 'x')", {}, "axc"),
    ("substr-4", 'SUBSTR("fandango", 4)', {}, "dango"),
    ("substr-1", 'SUBSTR("fandango", 1)', {}, "fandango"),
    ("substr-minus-2", 'SUBSTR("fandango", -2)', {}, "go"),
    ("substr-minus-99", 'SUBSTR("fandango", -99)', {}, "fandango"),
    ("substr-99-null", 'SUBSTR("fandango", 99) IS NULL', {}, True),
    ("substr-1-3", 'SUBSTR("fandango", 1, 3)', {}, "fan"),
    ("substr-minus-4-2", 'SUBSTR("fandango", -4, 2)', {}, "an"),
    ("substr-minus-8-8", 'SUBSTR("fandango", -8, 8)', {}, "fandango"),
    ("substr-minus-23-3", 'SUBSTR("fandango", -23, 3)', {}, "fan"),
    ("substr-99-8-null", 'SUBSTR("fandango", 99, 8) IS NULL', {}, True),
    ("substr-5", "SUBSTR('fandango', 5)", {}, "ango"),
    ("reverse-substr", "REVERSE(SUBSTR('fandango', 5))", {}, "ogna"),
    ("impl9-substr-start-0", "SUBSTR('fandango', 0)", {}, "fandango"),
    ("impl9-substr-length-0", "SUBSTR('fandango', 2, 0)", {}, None),
    ("impl9-substr-negative-length", "SUBSTR('fandango', 2, -1)", {}, None),
    ("impl-substr-truncates-start", "SUBSTR('fandango', 2.9)", {}, "andango"),
    ("left", "LEFT('fandango', 3)", {}, "fan"),
    ("right", "RIGHT('fandango', 3)", {}, "ngo"),
    ("impl9-left-beyond", "LEFT('fan', 10)", {}, "fan"),
    ("impl9-left-zero", "LEFT('fan', 0)", {}, None),
    ("trim", "TRIM('  a b  ')", {}, "a b"),
    ("ltrim", "LTRIM('  a ')", {}, "a "),
    ("rtrim", "RTRIM('  a ')", {}, "  a"),
    ("trim-chars", "TRIM('xxaxx', 'x')", {}, "a"),
    ("trim-char-set", "TRIM('abcba', 'ab')", {}, "c"),
    ("trim-spaces-only", r"TRIM('\ta\t')", {}, "\ta\t"),
    ("trim-to-null", "TRIM('   ')", {}, None),
    ("reverse", "REVERSE('fandango')", {}, "ognadnaf"),
    ("char-value", "CHAR_VALUE(65)", {}, "A"),
    ("char-value-escape", r"CHAR_VALUE(1) = '\x01'", {}, True),
    ("impl-char-value-range", "CHAR_VALUE(300)", {}, None),
    ("function-case-insensitive", "length('abc')", {}, 3),
    ("function-mixed-case", "Concat('a', 'b')", {}, "ab"),
    # --- 2.2 date/time
    ("strftime-epoch", "STRFTIME('%Y-%m-%d %H:%M:%S', 0)", {}, "1970-01-01 00:00:00"),
    ("impl11-strftime-iso", "STRFTIME('%Y%m%dT%H%M%SZ', 1420202100)", {}, "20150102T123500Z"),
    ("strftime-micros", "STRFTIME('%f', 1.5)", {}, "500000"),
    ("strftime-millis", "STRFTIME('%03f', 1.25)", {}, "250"),
    ("strftime-seconds-millis", "STRFTIME('%S.%03f', 61.123456)", {}, "01.123"),
    ("strftime-percent", "STRFTIME('100%%', 0)", {}, "100%"),
    ("impl11-strptime-iso", "STRPTIME('20150102T123500Z', '%Y%m%dT%H%M%SZ')", {}, 1420202100.0),
    ("strptime-millis", "STRPTIME('1970-01-01 00:00:01.250', '%Y-%m-%d %H:%M:%S.%03f')", {}, 1.25),
    ("strptime-mismatch", "STRPTIME('garbage', '%Y')", {}, None),
    ("unix-timestamp", "UNIX_TIMESTAMP() > 1600000000", {}, True),
    ("legacy-year", "YEAR(1420202100)", {}, 2015),
    ("legacy-month", "MONTH(1420202100)", {}, 1),
    ("legacy-day", "DAY(1420202100)", {}, 2),
    ("legacy-date-utc", "DATE_UTC(1420202100)", {}, 1420156800.0),
    # --- 2.3 numeric
    ("abs-int", "ABS(-5)", {}, 5),
    ("abs-float", "ABS(-2.5)", {}, 2.5),
    ("greatest", "GREATEST(1, 5, 3)", {}, 5),
    ("least", "LEAST(1, 5, 3)", {}, 1),
    ("greatest-skips-text", "GREATEST('a', 2)", {}, 2),
    ("greatest-no-number-nan", "GREATEST('a', 'b')", {}, NAN),
    ("greatest-skips-null", "GREATEST(1, NULL, 3)", {}, 3),
    ("impl-ceiling-float", "CEILING(1.2)", {}, 2.0),
    ("ceiling-int", "CEILING(5)", {}, 5),
    ("impl-floor-float", "FLOOR(-1.5)", {}, -2.0),
    ("impl-round-half-away", "ROUND(2.5)", {}, 3.0),
    ("impl-round-half-away-negative", "ROUND(-2.5)", {}, -3.0),
    ("round-places", "ROUND(1.2345, 2)", {}, 1.23),
    ("round-int", "ROUND(7)", {}, 7),
    ("sign-negative", "SIGN(-3)", {}, -1),
    ("sign-zero", "SIGN(0)", {}, 0),
    ("sign-positive-float", "SIGN(2.5)", {}, 1),
    ("sqrt", "SQRT(16)", {}, 4.0),
    ("impl-sqrt-negative-nan", "SQRT(-1)", {}, NAN),
    ("exp", "EXP(0)", {}, 1.0),
    ("ln", "LN(1)", {}, 0.0),
    ("log2", "LOG2(8)", {}, 3.0),
    ("log10", "LOG10(1000)", {}, Approx(3.0)),
    ("impl-ln-zero", "LN(0)", {}, -math.inf),
    ("power", "POWER(2, 10)", {}, 1024.0),
    ("power-negative-exponent", "POWER(2, -1)", {}, 0.5),
    ("sin", "SIN(0)", {}, 0.0),
    ("cos", "COS(0)", {}, 1.0),
    ("tan", "TAN(0)", {}, 0.0),
    ("cot", "COT(RADIANS(45))", {}, Approx(1.0)),
    ("asin", "ASIN(1)", {}, Approx(math.pi / 2)),
    ("acos", "ACOS(1)", {}, 0.0),
    ("atan", "ATAN(1)", {}, Approx(math.pi / 4)),
    ("atan2", "ATAN2(1, 1)", {}, Approx(math.pi / 4)),
    ("atan2-axis", "ATAN2(1, 0)", {}, Approx(math.pi / 2)),
    ("sinh", "SINH(0)", {}, 0.0),
    ("cosh", "COSH(0)", {}, 1.0),
    ("tanh", "TANH(0)", {}, 0.0),
    ("radians", "RADIANS(180)", {}, Approx(math.pi)),
    ("degrees", "DEGREES(ATAN2(0, -1))", {}, Approx(180.0)),
    ("impl-asin-domain-nan", "ASIN(2)", {}, NAN),
    ("numeric-function-text-nan", "ABS('abc')", {}, NAN),
    ("numeric-function-null", "ABS(/x)", {}, None),
    ("width-bucket", "WIDTH_BUCKET(5, 0, 10, 5)", {}, 3),
    ("width-bucket-below", "WIDTH_BUCKET(-1, 0, 10, 5)", {}, 0),
    ("impl10-width-bucket-overflow", "WIDTH_BUCKET(10, 0, 10, 5)", {}, 6),
    ("width-bucket-first", "WIDTH_BUCKET(0, 0, 10, 5)", {}, 1),
    ("width-bucket-last", "WIDTH_BUCKET(9.99, 0, 10, 5)", {}, 5),
    ("impl-md5-hex", "MD5('abc')", {}, "900150983cd24fb0d6963f7d28e17f72"),
    ("crc32c-check", "CRC32('123456789')", {}, 0xE3069283),
    ("impl-crc32-null", "CRC32(/x)", {}, 0),
    ("impl-crc64-null", "CRC64(/x)", {}, 0),
    # --- 2.4 geospatial
    ("impl-geo-distance-degree", "GEO_DISTANCE(0, 0, 0, 1)", {}, Approx(111194.9266, 1e-6)),
    (
        "geo-distance-london-new-york",
        "GEO_DISTANCE(51.5074, -0.1278, 40.7128, -74.0060)",
        {},
        Approx(5_570_000, 0.01),
    ),
    ("geo-distance-same-point", "GEO_DISTANCE(10, 20, 10, 20)", {}, 0.0),
    # --- 2.5 array reduce
    ("array-count", "ARRAY_COUNT(/a)", {"a": [1, 2, 3]}, 3),
    ("impl-array-count-nulls", "ARRAY_COUNT(/a)", {"a": [1, None, 3]}, 3),
    ("impl-array-count-scalar", "ARRAY_COUNT(/a)", {"a": 5}, 1),
    ("impl-array-count-missing", "ARRAY_COUNT(/a)", {}, None),
    ("array-max-mixed", "ARRAY_MAX(/v)", {"v": MIXED}, "cat"),
    ("array-min-mixed", "ARRAY_MIN(/v)", {"v": MIXED}, 1.3),
    ("array-sum", "ARRAY_SUM(/a)", {"a": [1, 2, None, 3]}, 6),
    ("array-sum-float", "ARRAY_SUM(/a)", {"a": [1, 2.5]}, 3.5),
    ("array-sum-text-nan", "ARRAY_SUM(/a)", {"a": [1, "x"]}, NAN),
    ("array-to-string", "ARRAY_TO_STRING(/a, '-', 'null')", {"a": [1, None, "x"]}, "1-null-x"),
    ("array-to-string-two-args", "ARRAY_TO_STRING(/a, ',')", {"a": [1, 2]}, "1,2"),
    # --- 2.6 generic and message functions
    ("coalesce", "COALESCE(/a, /b, 'd')", {"b": 2}, 2),
    ("coalesce-default", "COALESCE(/a, /b, 'd')", {}, "d"),
    ("coalesce-all-null", "COALESCE(/a, /b)", {}, None),
    ("true-value", "TRUE_VALUE()", {}, True),
    ("false-value", "FALSE_VALUE()", {}, False),
    ("nan-value", "NAN_VALUE()", {}, NAN),
]

CONTEXT_ROWS: list[tuple[str, str, Any]] = [
    ("sow-key", "SOW_KEY()", "k1"),
    ("sow-key-hash", "SOW_KEY_HASH()", "k1"),
    ("topic-name", "TOPIC_NAME()", "orders"),
    ("correlation-id-absent", "CORRELATION_ID()", None),
    ("message-size", "MESSAGE_SIZE()", 120),
    ("last-updated", "LAST_UPDATED()", 1.5),
    ("bookmark-absent", "BOOKMARK()", None),
    ("sow-key-filter", "SOW_KEY() = 'k1' AND /a = 1", True),
    ("message-size-filter", "MESSAGE_SIZE() > 100", True),
]


@pytest.mark.parametrize(
    ("text", "message", "expected"), [pytest.param(t, m, e, id=i) for i, t, m, e in ROWS]
)
def test_conformance(text: str, message: dict[str, Any], expected: Any) -> None:
    assert same(evaluate(text, message), expected), evaluate(text, message)


@pytest.mark.parametrize(("text", "message"), [pytest.param(t, m, id=i) for i, t, m, _ in ROWS])
def test_fast_paths_agree_with_reference(text: str, message: dict[str, Any]) -> None:
    agrees(text, message)


@pytest.mark.parametrize(
    ("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in CONTEXT_ROWS]
)
def test_message_context_functions(text: str, expected: Any) -> None:
    assert same(evaluate(text, {"a": 1}, CONTEXT), expected)
    agrees(text, {"a": 1}, CONTEXT)
    assert compile(text)({"a": 1}) is None or compile(text).matches({"a": 1}) is False


def test_context_inputs_are_reported() -> None:
    expression = compile("SOW_KEY() = 'k1' AND /a = 1 AND SOW_KEY() != 'x'")
    assert expression.inputs == (ContextInput("SOW_KEY"), FieldInput("/a", ("a",)))


def test_crc64_parameters() -> None:
    """The table is the reflected 0x95AC9329AC4BC9B5 polynomial (CRC-64/REDIS check value
    with init and xorout 0); CRC64() adds init and xorout all-ones."""
    data = b"123456789"
    assert crc_reflected(data, _CRC64_TABLE, 0, 0) == 0xE9C6D914C4B8D9CA

    def bitwise(payload: bytes) -> int:
        crc = 0xFFFFFFFFFFFFFFFF
        for byte in payload:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0x95AC9329AC4BC9B5 if crc & 1 else crc >> 1
        return crc ^ 0xFFFFFFFFFFFFFFFF

    assert evaluate("CRC64('123456789')", {}) == bitwise(data)
    assert evaluate("CRC64(/s)", {"s": "héllo"}) == bitwise("héllo".encode())
