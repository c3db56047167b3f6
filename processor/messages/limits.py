"""The limits every message type holds a payload to, defined once (docs/topology.md,
"Limits of a message").

Any Kafka producer can write to an input topic, so a codec must decode any bytes in time
linear in their length and memory bounded by it, and what it accepts must be servable: a
record the processor stores is later turned into its text form (JSON), its key text, a
filter's values, a delta's merge. Each limit below is one of those promises; a payload
past one is refused with a :class:`~processor.errors.DecodeError` (dead-letter reason
``undecodable``; INVALID_ARGUMENT on a publish) naming the limit, where in the message it
was passed, and the number allowed.

* :data:`MAX_DEPTH`: objects, arrays and XML elements nested in one another (JSON text
  has a depth limit of 254 nestings, Python's recursion one of about 1,000);
* :data:`MAX_REPEATS`: the times one tag repeats (fix, nvfix, bflat tags; xml siblings),
  and the elements of a bflat array of NULLs (which take no bytes);
* :data:`MAX_VALUES`: the values of a message (fields, array elements, attributes);
* :data:`MAX_ATTRIBUTES`: the attributes of one XML element (lxml reads them in time
  quadratic in their number);
* :data:`MIN_INTEGER` to :data:`MAX_INTEGER`: an integer's range (64 bits, signed or
  unsigned: what the JSON text form, the expression language and key texts carry).
"""

from __future__ import annotations

from typing import Any

from processor.errors import DecodeError

MAX_DEPTH = 100
MAX_REPEATS = 10_000
MAX_VALUES = 1_000_000
MAX_ATTRIBUTES = 256
MIN_INTEGER = -(1 << 63)
MAX_INTEGER = (1 << 64) - 1
#: Digits of the longest integer text in range (2**64 - 1 has 20); a number text with more
#: is out of range whatever its value, and is never converted (Python refuses to convert
#: texts over 4,300 digits with a ValueError).
MAX_INTEGER_DIGITS = 20


def too_deep(where: str) -> DecodeError:
    if len(where) > 80:
        where = f"...{where[-77:]}"
    return DecodeError(
        f"the message nests deeper than {MAX_DEPTH} levels at {where} (the limit of "
        "nested objects, arrays and elements)"
    )


def too_many_repeats(tag: str, kind: str = "tag") -> DecodeError:
    return DecodeError(
        f"the {kind} {tag[:80]!r} appears more than {MAX_REPEATS} times in the message "
        "(the limit of repeats of one tag)"
    )


def too_many_values(count: int, where: str = "the message") -> DecodeError:
    return DecodeError(
        f"{where} has {count} values, more than {MAX_VALUES} (the limit of fields, array "
        "elements and attributes in one message)"
    )


def integer_out_of_range(text: str, where: str) -> DecodeError:
    shown = text if len(text) <= 30 else f"{text[:20]}... ({len(text)} characters)"
    return DecodeError(
        f"the integer {shown} at {where} is outside the 64-bit range {MIN_INTEGER} to "
        f"{MAX_INTEGER} (the limit of integers)"
    )


def integer(text: str, where: str) -> int:
    """The integer an ASCII integer text (an optional sign, digits) stands for; a
    DecodeError naming ``where`` (a field) when it is outside the range (module doc)."""
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > MAX_INTEGER_DIGITS:
        raise integer_out_of_range(text, f"field {where!r}")
    value = -int(digits or "0") if text[0] == "-" else int(digits or "0")
    if not MIN_INTEGER <= value <= MAX_INTEGER:
        raise integer_out_of_range(text, f"field {where!r}")
    return value


def check_integer(value: int, where: str) -> int:
    """``value`` itself; a DecodeError naming ``where`` when it is out of range."""
    if not MIN_INTEGER <= value <= MAX_INTEGER:
        shown = str(value) if value.bit_length() < 4000 else f"of {value.bit_length()} bits"
        raise integer_out_of_range(shown, where)
    return value


def _step(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}/{key}"


def check_tree(value: Any, container_bound: int, value_bound: int) -> None:
    """Hold a decoded message (dicts, lists and leaves) to the depth, value count and
    integer limits. ``container_bound`` is an upper bound of its containers (nested
    dicts and lists) and ``value_bound`` one of its values, both known from the payload
    (bracket or type bytes, its length): the walk, which costs a step per value, is
    skipped when they prove the limits cannot be passed and no integer can be out of
    range (the caller's type has none, or they were checked when read)."""
    if container_bound <= MAX_DEPTH and value_bound <= MAX_VALUES:
        return
    count = 0
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        count += len(node)
        if count > MAX_VALUES:
            raise too_many_values(count)
        pairs = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in pairs:
            if isinstance(item, dict | list):
                if depth >= MAX_DEPTH:
                    raise too_deep(_step(path, key) or "/")
                stack.append((item, _step(path, key), depth + 1))
            elif item.__class__ is int:
                check_integer(item, _step(path, key))
