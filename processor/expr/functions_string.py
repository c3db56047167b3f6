"""AMPS string functions (spec 2.1, 1.13) and CHAR_VALUE.

AMPS strings are byte strings and no string function is Unicode-aware. Here strings are
Python ``str``; the functions that count or cut (LENGTH, INSTR, INSTR_I, SUBSTR, LEFT,
RIGHT) work on the UTF-8 bytes, so positions agree with each other and with AMPS
(identical to character positions for ASCII text). UPPER/LOWER/INSTR_I/STREQUAL_I fold
ASCII letters only. REVERSE reverses code points (reversing UTF-8 bytes would make
non-ASCII text invalid; identical to AMPS for ASCII).

Arguments arrive as scalars (the registry passes an array's first element) and NULL
required arguments never reach these implementations (the registry answers NULL).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from processor.errors import RegexBudgetError
from processor.expr.ast import Value
from processor.expr.budget import count_overrun
from processor.expr.regex import Matcher, compile_regex
from processor.expr.values import isnan, num, text_of

_UPPER = {code: code - 32 for code in range(ord("a"), ord("z") + 1)}
_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _text(value: Value) -> str:
    rendered = text_of(value)
    return "" if rendered is None else rendered


def _integer(value: Value) -> int | None:
    """A numeric argument truncated toward zero (None when not a finite number)."""
    number = num(value)
    if number is None or isnan(number) or number in (math.inf, -math.inf):
        return None
    return int(number)


def _cut(text: str, start: int, stop: int) -> str | None:
    """``text[start:stop]`` in UTF-8 bytes; NULL when empty."""
    if text.isascii():
        return text[start:stop] or None
    data = text.encode("utf-8")[start:stop]
    return data.decode("utf-8", "replace") or None


def _byte_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def length(value: Value) -> Value:
    """LENGTH(s): length in bytes of the string form."""
    return _byte_length(_text(value))


def concat(*values: Value) -> Value:
    """CONCAT(v1, ...): string forms joined; a NULL argument contributes nothing
    (spec section 9 item 27)."""
    return "".join(_text(value) for value in values) or None


def upper(value: Value) -> Value:
    """UPPER(s): ASCII letters upper-cased."""
    text = _text(value)
    return text.upper() if text.isascii() else text.translate(_UPPER)


def lower(value: Value) -> Value:
    """LOWER(s): ASCII letters lower-cased."""
    text = _text(value)
    return text.lower() if text.isascii() else text.translate(_LOWER)


def replace(value: Value, find: Value, replacement: Value = None) -> Value:
    """REPLACE(s, find, repl): every literal occurrence replaced (a NULL replacement,
    which is also how ``''`` arrives, deletes)."""
    return _text(value).replace(_text(find), _text(replacement))


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Matcher:
    return compile_regex(pattern, what="REGEXP_REPLACE pattern")


def regexp_replace(value: Value, pattern: Value, replacement: Value = None) -> Value:
    """REGEXP_REPLACE(s, pattern, repl): every PCRE match replaced by ``repl`` taken
    literally (back-references in the replacement are unconfirmed in AMPS, so none are
    interpreted); an invalid pattern gives NULL (a constant one is refused when the
    expression is compiled). Linear time in the text on RE2; a pattern on the backtracking
    engine that overruns its match budget gives NULL and is counted ("function")."""
    try:
        return _regex(_text(pattern)).replace(_text(value), _text(replacement))
    except RegexBudgetError:
        count_overrun("function")
        return None


def substr(value: Value, start: Value, count: Value = None) -> Value:
    """SUBSTR(s, start[, length]): 1-based, negative start counts from the end and clamps
    to the beginning (the length then counts from there); start 0 is 1; past the end or
    a length <= 0 gives NULL (spec 2.1, section 9 item 9)."""
    text = _text(value)
    begin = _integer(start)
    if begin is None:
        return None
    size = _byte_length(text)
    if begin > 0:
        index = begin - 1
    elif begin < 0:
        index = max(size + begin, 0)
    else:
        index = 0
    if index >= size:
        return None
    if count is None:
        return _cut(text, index, size)
    wanted = _integer(count)
    if wanted is None or wanted <= 0:
        return None
    return _cut(text, index, min(size, index + wanted))


def left(value: Value, count: Value) -> Value:
    """LEFT(s, n): the first n bytes; n <= 0 is NULL, n beyond the length is all of s."""
    wanted = _integer(count)
    if wanted is None or wanted <= 0:
        return None
    return _cut(_text(value), 0, wanted)


def right(value: Value, count: Value) -> Value:
    """RIGHT(s, n): the last n bytes."""
    wanted = _integer(count)
    if wanted is None or wanted <= 0:
        return None
    text = _text(value)
    return _cut(text, max(_byte_length(text) - wanted, 0), _byte_length(text))


def _trimmer(method: Callable[[str, str], str]) -> Callable[..., Value]:
    def trim(value: Value, chars: Value = None) -> Value:
        return method(_text(value), " " if chars is None else _text(chars))

    return trim


trim = _trimmer(str.strip)
trim.__doc__ = "TRIM(s[, chars]): leading and trailing characters in ``chars`` (' ') removed."
ltrim = _trimmer(str.lstrip)
ltrim.__doc__ = "LTRIM(s[, chars]): leading characters in ``chars`` removed."
rtrim = _trimmer(str.rstrip)
rtrim.__doc__ = "RTRIM(s[, chars]): trailing characters in ``chars`` removed."


def reverse(value: Value) -> Value:
    """REVERSE(s)."""
    return _text(value)[::-1]


def _find(haystack: str, needle: str) -> int:
    if haystack.isascii() and needle.isascii():
        return haystack.find(needle) + 1
    return haystack.encode("utf-8").find(needle.encode("utf-8")) + 1


def instr(haystack: Value, needle: Value) -> Value:
    """INSTR(a, b): 1-based byte position of the first occurrence of b in a, 0 if none."""
    return _find(_text(haystack), _text(needle))


def instr_i(haystack: Value, needle: Value) -> Value:
    """INSTR_I(a, b): INSTR ignoring ASCII case."""
    return _find(_text(haystack).translate(_LOWER), _text(needle).translate(_LOWER))


def strequal_i(left_value: Value, right_value: Value) -> Value:
    """STREQUAL_I(a, b): TRUE when equal ignoring ASCII case, else FALSE."""
    return _text(left_value).translate(_LOWER) == _text(right_value).translate(_LOWER)


def char_value(code: Value) -> Value:
    """CHAR_VALUE(n): the one-character string with code n (0-255; bytes above 127 are
    the Latin-1 code points, since strings here are text); NULL out of range."""
    number = _integer(code)
    if number is None or not 0 <= number <= 255:
        return None
    return chr(number)


#: name -> (implementation, minimum arguments, maximum arguments or None for any number).
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "LENGTH": (length, 1, 1),
    "CONCAT": (concat, 1, None),
    "UPPER": (upper, 1, 1),
    "LOWER": (lower, 1, 1),
    "REPLACE": (replace, 3, 3),
    "REGEXP_REPLACE": (regexp_replace, 3, 3),
    "SUBSTR": (substr, 2, 3),
    "LEFT": (left, 2, 2),
    "RIGHT": (right, 2, 2),
    "TRIM": (trim, 1, 2),
    "LTRIM": (ltrim, 1, 2),
    "RTRIM": (rtrim, 1, 2),
    "REVERSE": (reverse, 1, 1),
    "INSTR": (instr, 2, 2),
    "INSTR_I": (instr_i, 2, 2),
    "STREQUAL_I": (strequal_i, 2, 2),
    "CHAR_VALUE": (char_value, 1, 1),
}

#: Arguments from this index on may be NULL without making the result NULL.
NULLABLE_FROM: dict[str, int] = {"CONCAT": 0, "REPLACE": 2, "REGEXP_REPLACE": 2}
