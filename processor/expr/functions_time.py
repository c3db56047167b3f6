"""AMPS date/time functions (spec 2.2, 1.15), all in UTC (spec section 9 item 11).

Timestamps are doubles: seconds since 1970-01-01 UTC. ``STRFTIME``/``STRPTIME`` take the
C ``strftime(3)``/``strptime(3)`` specifiers plus ``%f`` (six-digit microseconds) and
``%03f`` (three-digit milliseconds; generally ``%0Nf``, the first N digits of the
microseconds). Also the legacy-module functions YEAR, MONTH, DAY, DATE_UTC and
TODAY_UTC (UTC calendar fields), which AMPS ships but does not load by default.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Callable
from typing import Any

from processor.expr.ast import Value
from processor.expr.values import isnan, num, text_of

UTC = _dt.UTC
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
#: AMPS limits STRFTIME output to 128 bytes.
STRFTIME_LIMIT = 128
_FRACTION = re.compile(r"%(%|0?([1-6])?f)")


def _moment(stamp: Value) -> _dt.datetime | None:
    number = num(stamp)
    if number is None or isnan(number) or number in (math.inf, -math.inf):
        return None
    return _EPOCH + _dt.timedelta(seconds=number)


def unix_timestamp() -> Value:
    """UNIX_TIMESTAMP(): now, seconds since the epoch (non-deterministic)."""
    return time.time()


def strftime(fmt: Value, stamp: Value) -> Value:
    """STRFTIME(format, timestamp): the UTC time formatted (at most 128 bytes)."""
    moment = _moment(stamp)
    pattern = text_of(fmt)
    if moment is None or pattern is None:
        return None
    micros = f"{moment.microsecond:06d}"

    def fraction(match: re.Match[str]) -> str:
        if match.group(1) == "%":
            return "%%"
        digits = match.group(2)
        return micros[: int(digits)] if digits else micros

    rendered = moment.strftime(_FRACTION.sub(fraction, pattern))
    encoded = rendered.encode("utf-8")
    if len(encoded) > STRFTIME_LIMIT:
        rendered = encoded[:STRFTIME_LIMIT].decode("utf-8", "ignore")
    return rendered


def strptime(value: Value, fmt: Value) -> Value:
    """STRPTIME(string, format): the UTC timestamp the string spells (NULL when it does
    not match the format). ``%f`` and ``%03f`` read a fraction of a second."""
    text = text_of(value)
    pattern = text_of(fmt)
    if text is None or pattern is None:
        return None
    pattern = re.sub(r"%0[1-6]f", "%f", pattern)
    parsed = _dt.datetime.strptime(text, pattern)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH).total_seconds()


def _field(read: Callable[[_dt.datetime], int]) -> Callable[[Value], Value]:
    def calendar_field(stamp: Value) -> Value:
        moment = _moment(stamp)
        return None if moment is None else read(moment)

    return calendar_field


def date_utc(stamp: Value) -> Value:
    """DATE_UTC(ts): the start of that UTC day, as a timestamp."""
    number = num(stamp)
    if number is None or isnan(number) or number in (math.inf, -math.inf):
        return None
    return float(math.floor(number / 86400.0) * 86400)


def today_utc() -> Value:
    """TODAY_UTC(): the start of the current UTC day (non-deterministic)."""
    return date_utc(time.time())


#: name -> (implementation, minimum arguments, maximum arguments or None for any number).
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "UNIX_TIMESTAMP": (unix_timestamp, 0, 0),
    "STRFTIME": (strftime, 2, 2),
    "STRPTIME": (strptime, 2, 2),
    "YEAR": (_field(lambda moment: moment.year), 1, 1),
    "MONTH": (_field(lambda moment: moment.month), 1, 1),
    "DAY": (_field(lambda moment: moment.day), 1, 1),
    "DATE_UTC": (date_utc, 1, 1),
    "TODAY_UTC": (today_utc, 0, 0),
}

#: Functions whose value changes between calls with the same arguments (spec 1.17).
NON_DETERMINISTIC = frozenset({"UNIX_TIMESTAMP", "TODAY_UTC"})
