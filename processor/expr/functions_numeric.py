"""AMPS numeric, checksum and geospatial functions (spec 2.3, 2.4).

Arguments convert to numbers (a string that is not numeric is NaN); NaN propagates;
domain errors give NaN and overflows infinity, as the C maths library does (never an
exception). Integer arguments keep integer results where the operation is exact
(ABS, CEILING, FLOOR, ROUND, SIGN); transcendental functions return floats.

Checksums work on the UTF-8 bytes of the argument's string form:

* ``MD5``: lowercase hex digest.
* ``CRC32``: CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, init and final XOR
  0xFFFFFFFF (the iSCSI/ext4 CRC; ``CRC32('123456789')`` = 0xE3069283).
* ``CRC64``: the reflected polynomial 0x95AC9329AC4BC9B5 (the "Jones" polynomial,
  0xAD93D23594C935A9 in normal form), init and final XOR 0xFFFFFFFFFFFFFFFF. AMPS
  documents only the polynomial; these other parameters are this implementation's.

A NULL argument to CRC32/CRC64 is the checksum of no bytes (0 with these parameters).
"""

from __future__ import annotations

import decimal
import hashlib
import math
from collections.abc import Callable
from typing import Any

from processor.expr.ast import Value
from processor.expr.values import NAN, isnan, num, text_of

INF = math.inf
EARTH_RADIUS_M = 6_371_000.0


def _number(value: Value) -> int | float:
    number = num(value)
    return NAN if number is None else number


def abs_(value: Value) -> Value:
    """ABS(x)."""
    return abs(_number(value))


def _rounder(method: Callable[[float], int]) -> Callable[[Value], Value]:
    def round_to_integer(value: Value) -> Value:
        number = _number(value)
        if number.__class__ is int or isnan(number) or number in (INF, -INF):
            return number
        return float(method(number))

    return round_to_integer


ceiling = _rounder(math.ceil)
ceiling.__doc__ = "CEILING(x): integers unchanged, floats rounded up (a float result)."
floor = _rounder(math.floor)
floor.__doc__ = "FLOOR(x): integers unchanged, floats rounded down (a float result)."


def round_(value: Value, places: Value = None) -> Value:
    """ROUND(x[, places]): half away from zero at ``places`` decimal digits (default 0;
    negative places round left of the decimal point). Floats are rounded by their
    shortest decimal form, so ``ROUND(2.675, 2)`` is 2.68 as written, not as stored."""
    number = _number(value)
    digits = 0 if places is None else _number(places)
    if isnan(digits) or isnan(number) or number in (INF, -INF):
        return NAN if isnan(digits) else number
    digits = int(digits)
    if number.__class__ is int:
        if digits >= 0:
            return number
        if -digits > abs(number).bit_length():
            return 0  # the step is over twice the number (and 10**-digits could be huge)
        step = 10**-digits
        magnitude = (abs(number) + step // 2) // step * step
        return magnitude if number >= 0 else -magnitude
    if digits > 400:  # finer than any float's digits
        return number
    if digits < -400:  # coarser than any float's magnitude
        return 0.0
    try:
        rounded = decimal.Decimal(repr(number)).quantize(
            decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP
        )
    except decimal.InvalidOperation:  # more digits than the value has: unchanged
        return number
    return float(rounded)


def sign(value: Value) -> Value:
    """SIGN(x): -1, 0 or 1 (NaN stays NaN)."""
    number = _number(value)
    if isnan(number):
        return NAN
    return (number > 0) - (number < 0)


def _unary(
    function: Callable[[float], float],
    overflow: Callable[[float], float],
) -> Callable[[Value], Value]:
    def apply(value: Value) -> Value:
        number = _number(value)
        if isnan(number):
            return NAN
        try:
            return function(number)
        except OverflowError:
            return overflow(number)
        except (ValueError, ZeroDivisionError):
            return NAN

    return apply


def _log(function: Callable[[float], float]) -> Callable[[float], float]:
    def log(x: float) -> float:
        if x == 0:
            return -INF
        return function(x)

    return log


def _cot(x: float) -> float:
    tangent = math.tan(x)
    if tangent == 0:
        return math.copysign(INF, tangent)
    return 1.0 / tangent


def _inf(_x: float) -> float:
    return INF


def _signed_inf(x: float) -> float:
    return math.copysign(INF, x)


def power(base: Value, exponent: Value) -> Value:
    """POWER(base, exp): C ``pow`` (0 to a negative power is infinity, a negative base
    to a fractional power NaN)."""
    a = _number(base)
    b = _number(exponent)
    try:
        return math.pow(a, b)
    except OverflowError:
        odd = b == int(b) and int(b) % 2 == 1 if not isnan(b) and abs(b) != INF else False
        return -INF if a < 0 and odd else INF
    except (ValueError, ZeroDivisionError):
        if a == 0 and b < 0:
            return INF
        return NAN


def atan2(y: Value, x: Value) -> Value:
    """ATAN2(y, x)."""
    try:
        return math.atan2(_number(y), _number(x))
    except ValueError:
        return NAN


def _extreme(pick: Callable[..., Any]) -> Callable[..., Value]:
    def extreme(*values: Value) -> Value:
        numbers = [n for n in (num(v) for v in values) if n is not None and not isnan(n)]
        return pick(numbers) if numbers else NAN

    return extreme


greatest = _extreme(max)
greatest.__doc__ = "GREATEST(x, ...): the largest numeric argument; NaN if none is numeric."
least = _extreme(min)
least.__doc__ = "LEAST(x, ...): the smallest numeric argument; NaN if none is numeric."


def width_bucket(value: Value, low: Value, high: Value, count: Value) -> Value:
    """WIDTH_BUCKET(x, min, max, count): equal-width bucket 1..count over [min, max);
    below is 0, at or above max is count + 1 (SQL; spec section 9 item 10). A descending
    range (min > max) numbers buckets the other way, as in SQL. NULL for count < 1 or an
    empty range."""
    x, lo, hi, n = _number(value), _number(low), _number(high), _number(count)
    if isnan(x) or isnan(lo) or isnan(hi) or isnan(n):
        return NAN
    buckets = int(n)
    if buckets < 1 or lo == hi or INF in (abs(lo), abs(hi)):
        return None
    if lo < hi:
        if x < lo:
            return 0
        if x >= hi:
            return buckets + 1
        return int((x - lo) * buckets / (hi - lo)) + 1
    if x > lo:
        return 0
    if x <= hi:
        return buckets + 1
    return int((lo - x) * buckets / (lo - hi)) + 1


def _bytes(value: Value) -> bytes:
    text = text_of(value)
    return b"" if text is None else text.encode("utf-8")


def md5(value: Value) -> Value:
    """MD5(s): lowercase hex digest of the UTF-8 bytes."""
    return hashlib.md5(_bytes(value), usedforsecurity=False).hexdigest()


def _reflected_table(polynomial: int) -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ polynomial if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


CRC32C_POLYNOMIAL = 0x82F63B78
CRC64_POLYNOMIAL = 0x95AC9329AC4BC9B5
_CRC32C_TABLE = _reflected_table(CRC32C_POLYNOMIAL)
_CRC64_TABLE = _reflected_table(CRC64_POLYNOMIAL)
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def crc_reflected(data: bytes, table: tuple[int, ...], init: int, xorout: int) -> int:
    """A table-driven reflected CRC (the register shifts right, one byte at a time)."""
    crc = init
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ xorout


def crc32(value: Value) -> Value:
    """CRC32(s): CRC-32C of the UTF-8 bytes, as an unsigned integer."""
    return crc_reflected(_bytes(value), _CRC32C_TABLE, _MASK32, _MASK32)


def crc64(value: Value) -> Value:
    """CRC64(s): the 64-bit CRC described in the module docstring, unsigned."""
    return crc_reflected(_bytes(value), _CRC64_TABLE, _MASK64, _MASK64)


def geo_distance(lat1: Value, lon1: Value, lat2: Value, lon2: Value) -> Value:
    """GEO_DISTANCE(lat1, lon1, lat2, lon2): great-circle distance in metres (haversine,
    Earth radius 6 371 000 m), signed decimal degrees."""
    p1, l1, p2, l2 = (math.radians(_number(v)) for v in (lat1, lon1, lat2, lon2))
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin((l2 - l1) / 2) ** 2
    if isnan(h):
        return NAN
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def _sqrt(x: float) -> float:
    return math.sqrt(x)


#: name -> (implementation, minimum arguments, maximum arguments or None for any number).
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "ABS": (abs_, 1, 1),
    "CEILING": (ceiling, 1, 1),
    "FLOOR": (floor, 1, 1),
    "ROUND": (round_, 1, 2),
    "SIGN": (sign, 1, 1),
    "SQRT": (_unary(_sqrt, _inf), 1, 1),
    "EXP": (_unary(math.exp, _inf), 1, 1),
    "LN": (_unary(_log(math.log), _inf), 1, 1),
    "LOG2": (_unary(_log(math.log2), _inf), 1, 1),
    "LOG10": (_unary(_log(math.log10), _inf), 1, 1),
    "POWER": (power, 2, 2),
    "SIN": (_unary(math.sin, _inf), 1, 1),
    "COS": (_unary(math.cos, _inf), 1, 1),
    "TAN": (_unary(math.tan, _inf), 1, 1),
    "COT": (_unary(_cot, _inf), 1, 1),
    "ASIN": (_unary(math.asin, _inf), 1, 1),
    "ACOS": (_unary(math.acos, _inf), 1, 1),
    "ATAN": (_unary(math.atan, _inf), 1, 1),
    "ATAN2": (atan2, 2, 2),
    "SINH": (_unary(math.sinh, _signed_inf), 1, 1),
    "COSH": (_unary(math.cosh, _inf), 1, 1),
    "TANH": (_unary(math.tanh, _inf), 1, 1),
    "RADIANS": (_unary(math.radians, _signed_inf), 1, 1),
    "DEGREES": (_unary(math.degrees, _signed_inf), 1, 1),
    "GREATEST": (greatest, 1, None),
    "LEAST": (least, 1, None),
    "WIDTH_BUCKET": (width_bucket, 4, 4),
    "MD5": (md5, 1, 1),
    "CRC32": (crc32, 1, 1),
    "CRC64": (crc64, 1, 1),
    "GEO_DISTANCE": (geo_distance, 4, 4),
}

#: Arguments from this index on may be NULL without making the result NULL.
NULLABLE_FROM: dict[str, int] = {"GREATEST": 0, "LEAST": 0, "CRC32": 0, "CRC64": 0}
