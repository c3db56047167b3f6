"""Configuration value syntax shared by the topology loaders (AMPS units and enums).

Every parser here takes the text of one configuration value and returns its typed value,
or raises :class:`ValueError` whose message says what was wrong and what is allowed. The
loaders wrap that into :class:`~processor.errors.TopologyError` with the file and field.

* Intervals (:func:`parse_interval`): a non-negative decimal number followed by a unit, case
  insensitive: ``ns us ms s m h d w`` (``m`` is minutes). ``30s``, ``5m``, ``1.5s``,
  ``250us``. A bare number is rejected: a unit is required. The result is float seconds,
  computed in decimal and rounded once, so ``parse_interval(format_interval(x)) == x``.
* Sizes (:func:`parse_size`): a non-negative number with an optional unit ``b kb mb gb tb``
  or ``k m g t``, case insensitive, 1024-based; a bare number is bytes. The result must be
  a whole number of bytes.
* Timestamps (:func:`parse_timestamp`): ISO-8601 basic ``YYYYmmddTHHMMSS[.ffffff][Z]`` (the
  AMPS form) or extended ``YYYY-mm-ddTHH:MM[:SS[.ffffff]][Z|+HH:MM]``. A time without an
  offset is UTC. The result is an aware datetime in UTC.
* Enumerations (:func:`parse_choice`) are case insensitive; names (elements, keys) are not,
  but :func:`closest` suggests the nearest allowed name ignoring case.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal, localcontext

from processor.errors import ExpressionError, ValueFormatError
from processor.topology.model import RecoveryKind, RecoveryPoint

#: Seconds per interval unit (exact decimals).
INTERVAL_UNITS: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
    "w": Decimal(604800),
}

#: Bytes per size unit (1024-based).
SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}

_INTERVAL_HELP = "ns, us, ms, s, m (minutes), h, d, w; for example 250ms, 30s, 5m, 1h, 7d"
_SIZE_HELP = "b, kb, mb, gb, tb (or k, m, g, t), 1024-based; for example 512kb, 5MB, 1g"
_TIMESTAMP_HELP = (
    "ISO-8601 basic 20240131T100000Z or extended 2024-01-31T10:00:00Z "
    "(an offset such as +01:00 is allowed; no offset means UTC)"
)
_NUMBER_UNIT = re.compile(r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>[A-Za-z]*)$")
_BASIC_TS = re.compile(
    r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{1,6}))?(Z)?$", re.IGNORECASE
)
_EXTENDED_TS = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:[Zz]|[+-]\d{2}:?\d{2})?$"
)
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?$")


def _split(text: str, what: str, help_text: str) -> tuple[Decimal, str]:
    """Split ``<number><unit>``; raise ValueFormatError naming ``what`` if it is not that."""
    stripped = text.strip()
    if not stripped:
        raise ValueFormatError(f"empty {what}; expected a number with a unit: {help_text}")
    match = _NUMBER_UNIT.match(stripped)
    if match is None:
        raise ValueFormatError(
            f"{text!r} is not a valid {what}; expected a number and a unit: {help_text}"
        )
    number = Decimal(match["number"])
    if number < 0:
        raise ValueFormatError(f"{what} {text!r} is negative; it must be zero or more")
    return number, match["unit"].lower()


def parse_interval(text: str) -> float:
    """Seconds in an AMPS interval such as ``30s``, ``1.5m`` or ``250us``."""
    number, unit = _split(text, "interval", _INTERVAL_HELP)
    if not unit:
        raise ValueFormatError(
            f"interval {text.strip()!r} has no unit; a unit is required "
            f"(for example {text.strip()}s): {_INTERVAL_HELP}"
        )
    factor = INTERVAL_UNITS.get(unit)
    if factor is None:
        raise ValueFormatError(
            f"unknown interval unit {unit!r} in {text.strip()!r}; allowed: {_INTERVAL_HELP}"
        )
    with localcontext() as ctx:
        ctx.prec = 60
        seconds = float(number * factor)
    if not math.isfinite(seconds):
        raise ValueFormatError(f"interval {text.strip()!r} is too large")
    return seconds


def format_interval(seconds: float) -> str:
    """The shortest exact interval text for ``seconds``: ``90`` -> ``90s``, ``3600`` -> ``1h``.

    ``parse_interval(format_interval(x)) == x`` for every finite ``x >= 0``.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueFormatError(f"an interval is a finite number of seconds >= 0, got {seconds!r}")
    if seconds == 0:
        return "0s"
    exact = Decimal(seconds)
    with localcontext() as ctx:
        ctx.prec = 400
        for unit in ("w", "d", "h", "m", "s", "ms", "us", "ns"):
            quotient = exact / INTERVAL_UNITS[unit]
            if quotient == quotient.to_integral_value():
                candidate = f"{int(quotient)}{unit}"
                if parse_interval(candidate) == seconds:
                    return candidate
    return f"{Decimal(repr(seconds)):f}s"


def parse_size(text: str) -> int:
    """Bytes in an AMPS size such as ``5MB``, ``512kb``, ``2G`` or ``4096`` (bytes)."""
    number, unit = _split(text, "size", _SIZE_HELP)
    factor = SIZE_UNITS.get(unit)
    if factor is None:
        raise ValueFormatError(
            f"unknown size unit {unit!r} in {text.strip()!r}; allowed: {_SIZE_HELP}"
        )
    value = number * factor
    if value != value.to_integral_value():
        raise ValueFormatError(f"size {text.strip()!r} is not a whole number of bytes ({value})")
    return int(value)


def parse_timestamp(text: str) -> datetime:
    """An aware UTC datetime from an AMPS (basic) or extended ISO-8601 timestamp."""
    stripped = text.strip()
    try:
        basic = _BASIC_TS.match(stripped)
        if basic is not None:
            year, month, day, hour, minute, second = (int(g) for g in basic.groups()[:6])
            micro = int((basic[7] or "").ljust(6, "0"))
            return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        if _EXTENDED_TS.match(stripped):
            parsed = datetime.fromisoformat(stripped.upper())
            return to_utc(parsed)
    except ValueError as exc:
        raise ValueFormatError(
            f"timestamp {stripped!r} is not a valid date and time: {exc}"
        ) from exc
    raise ValueFormatError(f"{stripped!r} is not a timestamp; expected {_TIMESTAMP_HELP}")


def to_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_recovery_point(value: str | datetime) -> RecoveryPoint:
    """``epoch``, ``now`` (any case) or a timestamp (see :func:`parse_timestamp`)."""
    if isinstance(value, datetime):
        return RecoveryPoint(RecoveryKind.TIMESTAMP, to_utc(value))
    word = value.strip().lower()
    if word in ("epoch", "now"):
        return RecoveryPoint(RecoveryKind(word))
    try:
        return RecoveryPoint(RecoveryKind.TIMESTAMP, parse_timestamp(value))
    except ValueError as exc:
        raise ValueFormatError(
            f"recovery point {value.strip()!r} is not epoch, now or a timestamp ({exc}); "
            f"allowed: epoch, now, or a timestamp: {_TIMESTAMP_HELP}"
        ) from None


def parse_expiration(text: str) -> float | None:
    """``disabled`` -> None, ``enabled`` -> 0.0 (per-message only), else interval seconds."""
    word = text.strip().lower()
    if word == "disabled":
        return None
    if word == "enabled":
        return 0.0
    try:
        return parse_interval(text)
    except ValueError as exc:
        raise ValueFormatError(
            f"{exc}; an expiration may also be 'enabled' or 'disabled'"
        ) from None


def parse_choice(text: str, allowed: Sequence[str], what: str) -> str:
    """The member of ``allowed`` equal to ``text`` ignoring case and surrounding blanks."""
    word = text.strip().lower()
    for choice in allowed:
        if choice.lower() == word:
            return choice
    raise ValueFormatError(f"{what} {text.strip()!r} is not allowed; allowed: {', '.join(allowed)}")


def parse_positive_int(
    text: str, what: str, maximum: int | None = None, *, minimum: int = 1
) -> int:
    """A decimal integer >= ``minimum`` (1 unless given; and <= ``maximum`` when given)."""
    stripped = text.strip()
    if not re.fullmatch(r"[+]?\d+", stripped):
        raise ValueFormatError(
            f"{what} {stripped!r} is not a whole number; expected an integer >= {minimum}"
        )
    value = int(stripped)
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ValueFormatError(
            f"{what} {value} is out of range; expected an integer >= {minimum}{upper}"
        )
    return value


def check_key_path(path: str) -> str:
    """``path`` if it is a field path ``/a/b`` (leading '/', no empty segment), stripped."""
    stripped = path.strip()
    if not stripped.startswith("/"):
        raise ValueFormatError(
            f"field path {stripped!r} must start with '/', for example /{stripped}"
        )
    if stripped == "/" or any(not segment for segment in stripped[1:].split("/")):
        raise ValueFormatError(
            f"field path {stripped!r} has an empty segment; write /name or /outer/inner"
        )
    return stripped


def check_factory_path(dotted: str) -> str:
    """``dotted`` if it names a Python factory: ``package.module:factory`` or ``a.b.factory``."""
    stripped = dotted.strip()
    if re.search(r"\.(so|dylib|dll)(\.\d+)*$", stripped):
        raise ValueFormatError(
            f"key generator {stripped!r} looks like a native library; kafka-sow key generators "
            "are Python factories: write 'package.module:factory'"
        )
    if not _DOTTED.match(stripped) or ("." not in stripped and ":" not in stripped):
        raise ValueFormatError(
            f"key generator factory {stripped!r} is not a Python dotted path; "
            "write 'package.module:factory' or 'package.module.factory'"
        )
    return stripped


def closest(name: str, allowed: Iterable[str]) -> str | None:
    """The allowed name nearest to ``name`` (ignoring case), or None when none is close."""
    by_lower = {choice.lower(): choice for choice in allowed}
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


def unknown_name(kind: str, name: str, allowed: Iterable[str], parent: str = "") -> str:
    """Message for an unknown key/element, listing the allowed names and the nearest one."""
    choices = sorted(allowed)
    suggestion = closest(name, choices)
    hint = f" (did you mean {suggestion!r}?)" if suggestion is not None else ""
    inside = f" in {parent}" if parent else ""
    return f"unknown {kind} {name!r}{inside}{hint}; allowed: {', '.join(choices)}"


def parse_separator(text: str) -> bytes:
    """A fix/nvfix FieldSeparator: one character (``|``), or its ASCII code in decimal
    (``1``: SOH, AMPS's default) or hex (``0x1``). It cannot be ``=`` or a character of
    field names and values people type (letters, digits)."""
    stripped = text.strip()
    if len(text) == 1 and not text.isalnum():
        code = ord(text)
    else:
        try:
            code = int(stripped, 16) if stripped.lower().startswith("0x") else int(stripped)
        except ValueError:
            raise ValueFormatError(
                f"FieldSeparator {text!r} is not one character or an ASCII code (1 for SOH, "
                "0x1, or a character such as |)"
            ) from None
    if not 0 < code < 128 or chr(code) == "=" or chr(code).isalnum():
        raise ValueFormatError(
            f"FieldSeparator {text!r} must be an ASCII character other than '=', letters "
            "and digits (code 1 to 127)"
        )
    return bytes([code])


def check_topic_pattern(text: str) -> str:
    """A Pattern topic's regular expression (RE2 syntax, searched in topic names)."""
    from processor.expr.regex import compile_regex

    if not text.strip():
        raise ValueFormatError("a Pattern needs a regular expression, such as ^orders\\.")
    try:
        compile_regex(text, what="Pattern", backtracking=False)
    except ExpressionError as exc:
        raise ValueFormatError(
            f"Pattern {text!r} is not a valid regular expression: {exc}"
        ) from None
    return text
