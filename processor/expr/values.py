"""The AMPS value model: field extraction, numeric and text conversion, ordering, sort keys.

Values (see :mod:`processor.expr.ast`): NULL is ``None``; ``bool``; ``int``; ``float``
(NaN included); ``str`` (never empty: a zero-length string is NULL); ``list`` (an array,
never empty, flat, elements are scalars or ``None``).

Every function here is total: it returns a value for any input and never raises, so an
expression evaluated over any message cannot fail (AMPS turns evaluation problems into
NULL or NaN, it does not reject the message).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from processor.expr.ast import Step, Value

NAN = math.nan

# AMPS numeric literal formats (spec 1.4, 1.5): integers, decimals, scientific notation,
# optional sign, ASCII digits. Nothing else (no whitespace, hex, 'nan', 'inf' or other
# scripts' digits) converts.
_NUMBER = re.compile(r"[+-]?(?:\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z", re.ASCII)
_NUMBER_CACHE: dict[str, int | float | None] = {}
_NUMBER_CACHE_LIMIT = 1 << 16
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def isnan(value: Any) -> bool:
    """True for a float NaN; any other value (an integer of any size included) is not."""
    return value.__class__ is float and value != value  # noqa: PLR0124 - the NaN test


def to_number(text: str) -> int | float | None:
    """The number a string spells in an AMPS numeric literal format, or None if it spells
    none (``'020'`` -> 20, ``'2.5e3'`` -> 2500.0, ``'cat'`` -> None)."""
    cached = _NUMBER_CACHE.get(text, _NUMBER_CACHE)
    if cached is not _NUMBER_CACHE:
        return cached  # type: ignore[return-value]
    result: int | float | None = None
    match = _NUMBER.match(text)
    if match is not None:
        integer = match.group(1) is None and match.group(2) is None
        try:
            result = int(text) if integer else float(text)
        except ValueError:  # more digits than int() converts: keep the magnitude
            try:
                result = float(text)
            except (ValueError, OverflowError):
                result = None
    if len(_NUMBER_CACHE) >= _NUMBER_CACHE_LIMIT:
        _NUMBER_CACHE.clear()
    _NUMBER_CACHE[text] = result
    return result


def first(value: Value) -> Value:
    """The scalar an array stands for outside array-aware operators: its first element."""
    if value.__class__ is list:
        return value[0] if value else None
    return value


def num(value: Value) -> int | float | None:
    """A value as a number for arithmetic and numeric functions.

    NULL stays NULL, booleans are 1/0, strings convert (NaN when not numeric), arrays
    use their first element."""
    cls = value.__class__
    if cls is int or cls is float:
        return value  # type: ignore[no-any-return]
    if value is None:
        return None
    if cls is bool:
        return int(value)
    if cls is str:
        number = to_number(value)
        return NAN if number is None else number
    if cls is list:
        return num(value[0]) if value else None
    return NAN


def text_of(value: Value) -> str | None:
    """The AMPS string form of a value (for CONCAT, LIKE, BEGINS WITH, grouping, TEXT sort).

    Integers in decimal, floats as Python's shortest round-trip ``repr`` (``1.5``,
    ``100.0``, ``1e+16``, ``nan``, ``inf``), booleans ``'true'``/``'false'``, arrays by
    their first element; NULL stays None."""
    cls = value.__class__
    if cls is str:
        return value  # type: ignore[no-any-return]
    if value is None:
        return None
    if cls is int:
        try:
            return str(value)
        except ValueError:  # an integer with more digits than str() renders
            return repr(float(value)) if abs(value).bit_length() < 1024 else None
    if cls is float:
        return repr(value)
    if cls is bool:
        return "true" if value else "false"
    if cls is list:
        return text_of(value[0]) if value else None
    return str(value) or None


def truth(value: Value) -> bool | None:
    """A value in boolean position (spec 9 item 33): booleans as they are, NULL and NaN
    are NULL, numbers are TRUE when non-zero, strings convert to numbers (NULL when they
    do not), arrays use their first element."""
    cls = value.__class__
    if cls is bool:
        return value  # type: ignore[no-any-return]
    if value is None:
        return None
    if cls is int:
        return value != 0  # type: ignore[no-any-return]
    if cls is float:
        return None if isnan(value) else value != 0
    if cls is str:
        number = to_number(value)
        if number is None:
            return None
        return truth(number)
    if cls is list:
        return truth(value[0]) if value else None
    return None


# --- comparison (spec 1.10, 1.14) ---------------------------------------------------


def compare_scalars(left: Value, right: Value, op: Callable[[Any, Any], bool]) -> bool:
    """``op`` over two scalars with AMPS conversions; NULL on either side is FALSE.

    Numbers compare numerically (booleans as 1/0), two strings by code point (UTF-8 byte
    order), a string and a number numerically when the string converts, otherwise the
    string is greater than any number."""
    if left is None or right is None:
        return False
    lcls = left.__class__
    rcls = right.__class__
    if lcls is bool:
        left, lcls = int(left), int
    if rcls is bool:
        right, rcls = int(right), int
    if lcls is str:
        if rcls is str:
            return op(left, right)
        if rcls is int or rcls is float:
            number = to_number(left)
            if number is None:
                return op(1, 0)
            return op(number, right)
        return False
    if lcls is int or lcls is float:
        if rcls is int or rcls is float:
            return op(left, right)
        if rcls is str:
            number = to_number(right)
            if number is None:
                return op(0, 1)
            return op(left, number)
    return False


def compare(left: Value, right: Value, op: Callable[[Any, Any], bool]) -> bool:
    """``op`` with the existential array rule: TRUE if any element (or any pair of
    elements, when both sides are arrays) satisfies it."""
    if left.__class__ is list:
        return any(compare(item, right, op) for item in left)
    if right.__class__ is list:
        return any(compare_scalars(left, item, op) for item in right)
    return compare_scalars(left, right, op)


def amps_less(left: Value, right: Value) -> bool:
    """The AMPS ``<`` between two scalars (used by MIN, MAX, ARRAY_MIN, ARRAY_MAX)."""
    return compare_scalars(left, right, operator.lt)


# --- sort keys (spec 3.7, section 9 item 28) ------------------------------------------


def order_key(value: Value, text: bool = False) -> tuple[Any, ...]:
    """A key that sorts values in AMPS OrderBy order with plain tuple comparison.

    Default: numbers and numeric strings first in numeric order (booleans as 1/0), then
    other strings by code point, then NULL and NaN (last ascending, first descending).
    ``text=True`` (the ``TEXT`` hint) sorts every value by its string form, NULL last.
    Arrays sort by their first element."""
    if value.__class__ is list:
        value = value[0] if value else None
    if value is None:
        return (2,)
    if text:
        rendered = text_of(value)
        return (2,) if rendered is None else (0, rendered)
    cls = value.__class__
    if cls is int:
        return (0, value)
    if cls is float:
        return (2,) if isnan(value) else (0, value)
    if cls is str:
        number = to_number(value)
        if number is None or isnan(number):
            return (1, value)
        return (0, number)
    if cls is bool:
        return (0, int(value))
    return (2,)


# --- extraction (spec 1.3, section 9 item 30) -----------------------------------------


def normalize(raw: Any) -> Value:
    """A decoded message value as an AMPS value.

    JSON null, ``''``, ``[]`` and objects (which have no scalar value) become NULL;
    bytes (Avro) decode as UTF-8 with replacement; arrays flatten (nested arrays are
    spliced in document order); Decimal becomes float, datetime epoch seconds."""
    cls = raw.__class__
    if cls is str:
        return raw or None
    if cls is int or cls is float or cls is bool or raw is None:
        return raw
    if cls is list or cls is tuple:
        return _normalize_array(raw)
    if isinstance(raw, Mapping):
        return None
    if isinstance(raw, bytes | bytearray | memoryview):
        return bytes(raw).decode("utf-8", "replace") or None
    if isinstance(raw, bool):
        return bool(raw)
    if isinstance(raw, int):
        return int(raw)
    if isinstance(raw, float | decimal.Decimal):
        return float(raw)
    if isinstance(raw, _dt.datetime):
        stamp = raw if raw.tzinfo is not None else raw.replace(tzinfo=_dt.UTC)
        return (stamp - _EPOCH).total_seconds()
    if isinstance(raw, list | tuple):
        return _normalize_array(raw)
    try:
        return str(raw) or None
    except Exception:  # an object whose __str__ raises has no text value: NULL
        return None


def _normalize_array(items: Any) -> list[Value] | None:
    out: list[Value] = []
    for item in items:
        if item.__class__ is list or item.__class__ is tuple:
            inner = _normalize_array(item)
            if inner is not None:
                out.extend(inner)
        else:
            out.append(normalize(item))
    return out or None


def _flatten(items: Any, out: list[Any]) -> list[Any]:
    for item in items:
        if isinstance(item, list | tuple):
            _flatten(item, out)
        else:
            out.append(item)
    return out


def extract(message: Any, steps: tuple[Step, ...]) -> Value:
    """The value of a field path in a decoded message (nested dicts and lists).

    A name step selects a field of an object; through an array of objects it selects
    that field of every element, collecting the values into one array in document order
    (elements that lack it are skipped; "repeated paths become arrays", recursively). An
    integer step is a zero-based subscript into the array reached so far (out of range
    or negative -> NULL; a scalar is a one-element array). Missing fields, JSON null,
    ``''`` and ``[]`` are NULL."""
    current: Any = message
    nodes: list[Any] | None = None  # set while the path runs through an array
    for step in steps:
        if step.__class__ is int:
            if nodes is None:
                if isinstance(current, list | tuple):
                    nodes = _flatten(current, [])
                else:
                    current = current if step == 0 else None
                    if current is None:
                        return None
                    continue
            index: int = step
            if index < 0 or index >= len(nodes):
                return None
            current = nodes[index]
            nodes = None
            continue
        if nodes is None:
            if isinstance(current, Mapping):
                current = current.get(step)
                if current is None:
                    return None
                continue
            if not isinstance(current, list | tuple):
                return None
            nodes = _flatten(current, [])
        collected: list[Any] = []
        for node in nodes:
            if isinstance(node, Mapping):
                child = node.get(step)
                if isinstance(child, list | tuple):
                    _flatten(child, collected)
                elif child is not None and child != "":
                    collected.append(child)
        if not collected:
            return None
        nodes = collected
    if nodes is not None:
        return _normalize_array(nodes)
    return normalize(current)


@functools.lru_cache(maxsize=4096)
def field_getter(steps: tuple[Step, ...]) -> Callable[[Any], Value]:
    """A function returning ``extract(message, steps)``, specialised for speed (made once
    per path and shared: getters are pure).

    Paths of names walk nested dicts with ``dict.get`` and fall back to :func:`extract`
    only when they meet something else on the way (an array, a non-dict message)."""
    if not steps or not all(step.__class__ is str for step in steps):

        def slow(message: Any) -> Value:
            return extract(message, steps)

        return slow
    params = ", ".join(f"s{i}=s{i}" for i in range(len(steps)))
    walk = "".join(
        f"    v = {'m' if i == 0 else 'v'}.get(s{i})\n"
        "    if v.__class__ is not dict:\n"
        "        return None if v is None else extract(m, steps)\n"
        for i in range(len(steps) - 1)
    )
    source = (
        f"def make({', '.join(f's{i}' for i in range(len(steps)))}):\n"
        f"  def get(m, {params}):\n"
        "    if m.__class__ is not dict:\n"
        "        return extract(m, steps)\n"
        f"{walk}"
        f"    v = {'m' if len(steps) == 1 else 'v'}.get(s{len(steps) - 1})\n"
        "    c = v.__class__\n"
        "    if c is float or c is int:\n"
        "        return v\n"
        "    if c is str:\n"
        "        return v or None\n"
        "    return None if v is None else normalize(v)\n"
        "  return get\n"
    )
    namespace: dict[str, Any] = {"extract": extract, "normalize": normalize, "steps": steps}
    exec(source, namespace)
    getter: Callable[[Any], Value] = namespace["make"](*steps)
    return getter
