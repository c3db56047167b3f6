"""PCRE character classes (``[...]``) and character escapes (``\\x41``, ``\\101``,
``\\cA``...) translated to RE2 syntax, for :mod:`processor.expr.pcre`.

Every character is written as ``\\x{hex}`` (or itself when alphanumeric), so no
character can change meaning between the dialects. Caseless classes gain the other case
of their ASCII letters (AMPS folds ASCII only); ``\\s`` ``\\h`` ``\\v`` and their negations
become explicit ranges, because RE2's ``\\s`` lacks the vertical tab and RE2 has no
``\\h``/``\\v``.
"""

from __future__ import annotations

import re
from typing import NoReturn, Protocol

from processor.expr.pcre_backtrack import properties


class _Caseless(Protocol):
    @property
    def caseless(self) -> bool: ...


class Translator(Protocol):
    """What a class reader needs of :class:`processor.expr.pcre.Translator`."""

    pattern: str
    backtracking: bool

    @property
    def flags(self) -> _Caseless: ...

    def fail(self, problem: str, offset: int, advice: str) -> NoReturn: ...

    def refuse(self, construct: str, offset: int, advice: str) -> NoReturn: ...

    def property_item(self, index: int) -> tuple[str, int]: ...


#: ``\s`` in PCRE (and Python's ASCII ``\s``): tab, newline, vertical tab, form feed,
#: carriage return, space.
SPACE = (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20)
#: ``\h``: horizontal white space (tab, space, no-break space).
HSPACE = (0x09, 0x20, 0xA0)
#: ``\v``: vertical white space (newline, vertical tab, form feed, return, NEL).
VSPACE = (0x0A, 0x0B, 0x0C, 0x0D, 0x85)
MAX_CODE_POINT = 0x10FFFF
_SIMPLE_ESCAPES = {"a": 0x07, "e": 0x1B, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09}

_POSIX_CLASS = re.compile(r"\[:(\^?)([a-z]+):\]")
_POSIX_NAMES = frozenset(
    [
        "alnum",
        "alpha",
        "ascii",
        "blank",
        "cntrl",
        "digit",
        "graph",
        "lower",
        "print",
        "punct",
        "space",
        "upper",
        "word",
        "xdigit",
    ]
)
_SETS = {"s": SPACE, "h": HSPACE, "v": VSPACE}


def literal(code: int) -> str:
    """One character as RE2 syntax, outside or inside a character class."""
    char = chr(code)
    if char.isascii() and char.isalnum():
        return char
    return f"\\x{{{code:x}}}"


def ranges(points: tuple[int, ...], negate: bool) -> str:
    """Class items for a set of characters, or for every character outside it."""
    if not negate:
        return "".join(literal(point) for point in points)
    items, start = [], 0
    for point in sorted(points):
        if point > start:
            items.append(f"{literal(start)}-{literal(point - 1)}")
        start = point + 1
    items.append(f"{literal(start)}-{literal(MAX_CODE_POINT)}")
    return "".join(items)


def swapped_letters(low: int, high: int) -> str:
    """Class items adding the other case of the ASCII letters in ``low..high``."""
    items = []
    for first, last, shift in ((0x41, 0x5A, 0x20), (0x61, 0x7A, -0x20)):
        start, stop = max(low, first), min(high, last)
        if start <= stop:
            items.append(f"{literal(start + shift)}-{literal(stop + shift)}")
    return "".join(items)


def code_point(translator: Translator, index: int, *, in_class: bool) -> tuple[int, int]:
    """The character the backslash sequence at ``index`` denotes, and the index after it."""
    pattern = translator.pattern
    letter = pattern[index + 1]
    if letter in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[letter], index + 2
    if in_class and letter == "b":
        return 0x08, index + 2
    digits = re.compile(r"[0-7]{1,3}" if in_class else r"0[0-7]{0,2}|[1-3][0-7][0-7]")
    octal = digits.match(pattern, index + 1)
    braced = re.compile(r"([ox])\{([0-9A-Fa-f]*)\}|x([0-9A-Fa-f]{0,2})").match(pattern, index + 1)
    if octal is not None:
        return int(octal.group(0), 8), octal.end()
    if braced is not None:
        digits_text, base = (braced.group(2), 16 if braced.group(1) == "x" else 8)
        if braced.group(1) is None:
            digits_text, base = braced.group(3), 16
        try:
            code = int(digits_text or "0", base)
        except ValueError:
            translator.fail(f"the escape {braced.group(0)!r} is invalid", index, "use \\x{hex}")
        if code > MAX_CODE_POINT:
            translator.fail(
                f"the character code {braced.group(0)!r} is too large",
                index,
                "use a code of at most \\x{10ffff}",
            )
        return code, braced.end()
    if letter == "c" and index + 2 < len(pattern) and 0x20 <= ord(pattern[index + 2]) < 0x7F:
        return ord(pattern[index + 2].upper()) ^ 0x40, index + 3
    if letter.isascii() and letter.isalnum():
        translator.fail(
            f"the escape '\\{letter}' is unknown",
            index,
            f"write '{letter}' for the letter itself, or see docs/expressions.md",
        )
    return ord(letter), index + 2


class ClassReader:
    """Reads one ``[...]`` starting at ``start`` for a :class:`Translator` (whose flags,
    errors and escape decoding it uses)."""

    def __init__(self, translator: Translator, start: int) -> None:
        self.translator = translator
        self.pattern = translator.pattern
        self.start = start
        self.items: list[str] = []
        #: Unicode properties, kept apart for the backtracking engine (see ``read``).
        self.properties: list[str] = []
        self.caseless = translator.flags.caseless

    def read(self) -> tuple[str, int]:
        """The class (RE2 syntax; for the backtracking engine, an alternation when it holds
        Unicode properties) and the index after the closing ``]``."""
        pattern, index = self.pattern, self.start + 1
        negate = pattern.startswith("^", index)
        index += negate
        first = True
        while True:
            if index >= len(pattern):
                self.translator.fail(
                    "the character class is not closed", self.start, "add ']' or escape '\\['"
                )
            if pattern[index] == "]" and not first:
                break
            first = False
            index = self.member(index)
        if self.properties:
            return properties(self.items, self.properties, negate), index + 1
        return f"[{'^' if negate else ''}{''.join(self.items)}]", index + 1

    def member(self, index: int) -> int:
        """One member (character, range, escape, POSIX name, quoted text)."""
        pattern = self.pattern
        if pattern.startswith("[:", index):
            posix = _POSIX_CLASS.match(pattern, index)
            if posix is None or posix.group(2) not in _POSIX_NAMES:
                self.translator.fail(
                    "unknown POSIX class", index, f"use one of {', '.join(sorted(_POSIX_NAMES))}"
                )
            name = posix.group(2)
            if self.caseless and name in ("upper", "lower"):
                name = "alpha"
            self.items.append(f"[:{posix.group(1)}{name}:]")
            return posix.end()
        if pattern.startswith(("[=", "[."), index):
            self.translator.refuse("a POSIX collating element", index, "list the characters")
        if pattern.startswith("\\Q", index):
            end = pattern.find("\\E", index + 2)
            stop = len(pattern) if end < 0 else end
            for char in pattern[index + 2 : stop]:
                self.add(ord(char), ord(char))
            return stop if end < 0 else end + 2
        if pattern.startswith("\\E", index):
            return index + 2
        low, after = self.single(index)
        if low is None:
            return after
        if pattern.startswith("-", after) and not pattern.startswith("]", after + 1):
            if after + 1 >= len(pattern):
                return after
            high, end = self.single(after + 1)
            if high is None:
                self.translator.fail(
                    "a range ends in a class escape", after, "escape the '-' as '\\-'"
                )
            if high < low:
                self.translator.fail(
                    f"the range {pattern[index:end]!r} is out of order", index, "swap its ends"
                )
            self.add(low, high)
            return end
        self.add(low, low)
        return after

    def add(self, low: int, high: int) -> None:
        """Add the characters ``low..high`` (and their other case when caseless)."""
        item = literal(low) if low == high else f"{literal(low)}-{literal(high)}"
        self.items.append(item)
        if self.caseless:
            self.items.append(swapped_letters(low, high))

    def single(self, index: int) -> tuple[int | None, int]:
        """A character (its code) or a class escape (None; its items are added)."""
        pattern = self.pattern
        if pattern[index] != "\\":
            return ord(pattern[index]), index + 1
        if index + 1 >= len(pattern):
            self.translator.fail("the pattern ends with a backslash", index, "escape it as '\\\\'")
        letter = pattern[index + 1]
        if letter in ("d", "D", "w", "W"):
            self.items.append("\\" + letter)
            return None, index + 2
        if letter.lower() in _SETS:
            self.items.append(ranges(_SETS[letter.lower()], negate=letter.isupper()))
            return None, index + 2
        if letter in ("p", "P"):
            item, after = self.translator.property_item(index)
            (self.properties if self.translator.backtracking else self.items).append(item)
            return None, after
        if letter.isascii() and letter.isalpha() and letter not in "abefnrtxoc":
            self.translator.fail(
                f"the escape '\\{letter}' is not allowed in a character class",
                index,
                "move it out of the brackets, or write the characters themselves",
            )
        return code_point(self.translator, index, in_class=True)
