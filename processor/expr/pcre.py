"""PCRE patterns (LIKE, REGEXP_REPLACE) translated to RE2 syntax.

AMPS evaluates patterns with PCRE, a backtracking engine: a pattern such as
``.*.*.*.*.*.*.*.*yz`` takes time exponential in the length of the text. Here patterns
run on RE2 (:mod:`processor.expr.regex`), whose time is linear in the text, so no filter
can hang a thread. RE2 cannot run the PCRE features that need backtracking: the
translator notes the first one (:attr:`Translation.needs`), and the pattern is translated
again for the backtracking engine (:mod:`processor.expr.pcre_backtrack`), which runs it
within a time budget per match. A few PCRE features neither runs are refused with an
ExpressionError that names the construct, its offset in the pattern and what to write
instead (the lists are in docs/expressions.md).

:class:`Translator` reads the PCRE syntax itself rather than handing the pattern over,
because the two dialects differ in ways that would otherwise change results silently.
The translation applies every flag itself and emits flag-free RE2 syntax:

* ``(?i)`` folds ASCII letters only (AMPS strings are bytes; RE2 would fold Unicode);
* ``(?x)`` (extended) is not an RE2 flag: whitespace and ``#`` comments are dropped here;
* ``$`` and ``\\Z`` match at the end or before a final newline, as in PCRE (RE2's ``$``
  is the very end); ``\\s`` includes the vertical tab, as in PCRE;
* ``\\h`` ``\\v`` ``\\R`` ``\\N`` ``\\e`` ``\\cX`` ``\\o{}`` ``(?#...)`` and named groups
  in every PCRE spelling are rewritten into forms RE2 knows;
* for RE2 every group becomes non-capturing; the only capturing groups of the result are the
  final newline that ``$``/``\\Z`` may consume (REGEXP_REPLACE gives it back).
"""

from __future__ import annotations

import dataclasses
import re
from typing import NoReturn

from processor.errors import ExpressionError
from processor.expr import pcre_backtrack
from processor.expr.pcre_class import (
    HSPACE,
    SPACE,
    VSPACE,
    ClassReader,
    code_point,
    literal,
    ranges,
)

#: RE2 refuses a counted repetition above this; a larger one runs on the backtracking
#: engine, up to PCRE's own limit.
MAX_REPEAT = 1000
PCRE_MAX_REPEAT = 65535
#: The backtracking engine expands counted repetitions when it compiles a pattern (about
#: 300 bytes per repeated item: ``(a{1000}){1000}`` takes 280 MB and a second). A pattern
#: whose nested counts times its length exceed this is refused.
MAX_EXPANSION = 100_000
#: Stands for PCRE's ``$`` (outside multiline mode) and ``\Z``: the end of the text, or
#: before a newline that ends it. RE2 has no such assertion; :mod:`processor.expr.regex`
#: replaces this mark (a character the translation never emits otherwise) by the RE2 form
#: exact for the text at hand (see :data:`processor.expr.regex.ENDINGS`).
END = "\x00"

_QUANTIFIER = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}")
_FLAG_GROUP = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?([:)])")
_NAMED_GROUP = re.compile(r"\(\?(?:P?<([A-Za-z_][A-Za-z0-9_]*)>|'([A-Za-z_][A-Za-z0-9_]*)')")


@dataclasses.dataclass(frozen=True)
class Flags:
    """The PCRE option settings in force at one point of a pattern."""

    caseless: bool = False
    extended: bool = False
    multiline: bool = False
    dotall: bool = False
    ungreedy: bool = False


_FLAG_NAMES = {"i": "caseless", "x": "extended", "m": "multiline", "s": "dotall", "U": "ungreedy"}


@dataclasses.dataclass(frozen=True)
class Translation:
    """``source`` is RE2 syntax meaning what the PCRE pattern means; ``anchored`` is
    set by a leading ``(?A)`` (the match must start at the start of the text). ``needs``
    names the first construct RE2 cannot run and its offset (then ``source`` is not for
    RE2: translate again for the backtracking engine)."""

    source: str
    anchored: bool
    needs: tuple[str, int] | None = None


class Translator:
    """One pass over a PCRE pattern (see the module docstring); :meth:`run` returns the
    translation or raises ExpressionError naming ``what`` (for example "LIKE pattern").

    For RE2 (the default) a construct that needs backtracking is noted
    (:attr:`Translation.needs`); with ``backtracking`` the translation is for the
    backtracking engine instead (groups capture, and those
    constructs are written out: :mod:`processor.expr.pcre_backtrack`)."""

    def __init__(
        self, pattern: str, *, what: str, text: str, position: int, backtracking: bool = False
    ) -> None:
        self.pattern = pattern
        self.what = what
        self.text = text
        self.position = position
        self.backtracking = backtracking
        self.out: list[str] = []
        self.flags = Flags()
        self.stack: list[Flags] = []
        self.anchored = False
        #: Capturing groups opened so far (for relative references).
        self.groups = 0
        #: The largest product of nested counted repetitions, per open group (the last is
        #: the innermost), and that of the group closed last (see MAX_EXPANSION).
        self.expansion = [1]
        self.closed = 1
        self.needs: tuple[str, int] | None = None

    # -- errors -----------------------------------------------------------------------

    def fail(self, problem: str, offset: int, advice: str) -> NoReturn:
        """Raise the ExpressionError for an invalid pattern (a problem at ``offset``)."""
        raise ExpressionError(
            f"invalid regular expression in {self.what} {self.pattern!r}: {problem} "
            f"(at offset {offset} of the pattern); {advice}",
            text=self.text,
            position=self.position,
        )

    def refuse(self, construct: str, offset: int, advice: str) -> NoReturn:
        """Raise the ExpressionError for a PCRE construct neither engine can run."""
        raise ExpressionError(
            f"{self.what} {self.pattern!r}: {construct} (at offset {offset} of the pattern) "
            f"is not supported (see docs/expressions.md); {advice}",
            text=self.text,
            position=self.position,
        )

    def backtrack(self, construct: str, offset: int) -> None:
        """A construct that needs the backtracking engine: noted when translating for
        RE2 (the first one, for :attr:`Translation.needs`)."""
        if not self.backtracking and self.needs is None:
            self.needs = (construct, offset)

    # -- the pattern ------------------------------------------------------------------

    def run(self) -> Translation:
        """Translate the whole pattern."""
        pattern, index = self.pattern, 0
        while index < len(pattern):
            index = self.item(index)
        if self.stack:
            self.fail("a group is not closed", len(pattern), "add the missing ')'")
        if self.backtracking and self.expansion[0] * len(pattern) > MAX_EXPANSION:
            self.refuse(
                f"counted repetitions that repeat an item {self.expansion[0]:,} times in a "
                f"pattern of {len(pattern)} characters (their product is above "
                f"{MAX_EXPANSION:,}, too large to compile)",
                0,
                "use smaller counts, or '*' / '+'",
            )
        return Translation("".join(self.out), self.anchored, self.needs)

    def item(self, index: int) -> int:
        """Translate the item at ``index``; returns the index after it."""
        char = self.pattern[index]
        if self.flags.extended and ord(char) in SPACE:
            return index + 1
        if self.flags.extended and char == "#":
            end = self.pattern.find("\n", index)
            return len(self.pattern) if end < 0 else end + 1
        if char == "\\":
            return self.escape(index)
        if char == "[":
            return self.char_class(index)
        if char == "(":
            return self.group(index)
        if char == ")":
            if not self.stack:
                self.fail("')' closes no group", index, "remove it or escape it as '\\)'")
            self.flags = self.stack.pop()
            self.closed = self.expansion.pop()
            self.expansion[-1] = max(self.expansion[-1], self.closed)
            self.out.append(")")
            return index + 1
        if char in "*+?":
            return self.quantifier(index, char, index + 1)
        if char == "{":
            match = _QUANTIFIER.match(self.pattern, index)
            if match is not None:
                return self.counted(index, match)
        self.out.append(self.atom(char))
        return index + 1

    def atom(self, char: str) -> str:
        """A character of the pattern outside any class."""
        if char == "|":
            return "|"
        if char == ".":
            return "(?s:.)" if self.flags.dotall else "[^\\n]"
        if char == "^":
            return "(?m:^)" if self.flags.multiline else "\\A"
        if char == "$":
            return "(?m:$)" if self.flags.multiline else END
        return self.char(ord(char))

    def char(self, code: int) -> str:
        """A literal character, folded when caseless (ASCII letters only, as in AMPS)."""
        if self.flags.caseless and chr(code).isascii() and chr(code).isalpha():
            return f"[{chr(code).lower()}{chr(code).upper()}]"
        return literal(code)

    # -- quantifiers --------------------------------------------------------------------

    def counted(self, index: int, match: re.Match[str]) -> int:
        """``{n}``, ``{n,}``, ``{n,m}``."""
        counts = [int(number) for number in (match.group(1), match.group(3)) if number]
        if max(counts) > PCRE_MAX_REPEAT:
            self.fail(
                f"the repetition count {max(counts)} is above {PCRE_MAX_REPEAT}",
                index,
                f"use a count of at most {PCRE_MAX_REPEAT}, or '*' / '+'",
            )
        if max(counts) > MAX_REPEAT:
            self.backtrack(f"the repetition count {max(counts)} (above {MAX_REPEAT})", index)
        inner = self.closed if self.out and self.out[-1] == ")" else 1
        self.expansion[-1] = max(self.expansion[-1], inner * max(counts))
        return self.quantifier(index, match.group(0), match.end())

    def quantifier(self, index: int, operator: str, after: int) -> int:
        lazy = False
        following = self.pattern[after : after + 1]
        if following == "?":
            lazy, after = True, after + 1
        elif following == "+":
            self.backtrack(f"the possessive quantifier '{operator}+'", index)
            self.out.append(operator + "+")
            return after + 1
        if self.flags.ungreedy:
            lazy = not lazy
        self.out.append(operator + ("?" if lazy else ""))
        return after

    # -- groups -------------------------------------------------------------------------

    def open(self, inner: Flags, opener: str = "(?:") -> None:
        self.stack.append(self.flags)
        self.expansion.append(1)
        self.flags = inner
        self.out.append(opener)

    def reopen(self, opener: str) -> None:
        """Open a group written ``opener`` (a lookaround, an atomic group...)."""
        self.open(self.flags, opener)

    def capture(self, name: str = "") -> None:
        """Open a capturing group (for RE2 every group is non-capturing)."""
        self.groups += 1
        if not self.backtracking:
            self.open(self.flags)
        else:
            self.open(self.flags, f"(?P<{name}>" if name else "(")

    def group(self, index: int) -> int:
        """``(`` and every ``(?...)`` / ``(*...)`` form."""
        pattern = self.pattern
        if pattern.startswith("(*", index):
            return pcre_backtrack.verb(self, index)
        if not pattern.startswith("(?", index):
            self.capture()
            return index + 1
        head = pattern[index + 2 : index + 4]
        if head.startswith("#"):
            end = pattern.find(")", index)
            if end < 0:
                self.fail("the comment '(?#' is not closed", index, "add ')'")
            return end + 1
        if head.startswith(":"):
            self.open(self.flags)
            return index + 3
        if head.startswith("C"):
            self.refuse("the callout '(?C'", index, "remove it")
        after = pcre_backtrack.group(self, index, head)
        if after is not None:
            return after
        named = _NAMED_GROUP.match(pattern, index)
        if named is not None:
            self.capture(named.group(1) or named.group(2))
            return named.end()
        flagged = _FLAG_GROUP.match(pattern, index)
        if flagged is None:
            self.fail(f"unknown group syntax {pattern[index : index + 4]!r}", index, _GROUP_HELP)
        return self.flag_group(index, flagged)

    def flag_group(self, index: int, match: re.Match[str]) -> int:
        """``(?flags)`` (to the end of the enclosing group) or ``(?flags:...)``."""
        on, off = match.group(1), match.group(2) or ""
        at_start = not self.out and not self.stack and match.group(3) == ")"
        for letter in on + off:
            if letter == "A" and letter not in off and at_start:
                continue
            if letter not in _FLAG_NAMES or (on + off).count(letter) > 1:
                twice = " twice" if (on + off).count(letter) > 1 else ""
                here = " here" if letter == "A" else ""
                self.fail(
                    f"the flag {letter!r}{twice} is not supported{here}",
                    index,
                    "the flags are i, m, s, x, U, and (?A) at the very start of the pattern",
                )
        self.anchored = self.anchored or "A" in on
        changes = {_FLAG_NAMES[x]: True for x in on if x != "A"}
        changes.update({_FLAG_NAMES[x]: False for x in off})
        flags = dataclasses.replace(self.flags, **changes)
        if match.group(3) == ")":
            self.flags = flags
        else:
            self.open(flags)
        return match.end()

    # -- escapes ------------------------------------------------------------------------

    def escape(self, index: int) -> int:
        """A backslash sequence outside a character class."""
        pattern = self.pattern
        if index + 1 >= len(pattern):
            self.fail("the pattern ends with a backslash", index, "escape it as '\\\\'")
        letter = pattern[index + 1]
        simple = {"d": "\\d", "D": "\\D", "w": "\\w", "W": "\\W", "b": "\\b", "B": "\\B"}
        simple.update({"A": "\\A", "z": "\\z", "Z": END, "N": "[^\\n]", "E": ""})
        if letter in simple:
            self.out.append(simple[letter])
            return index + 2
        spaces = {"s": SPACE, "h": HSPACE, "v": VSPACE}
        if letter.lower() in spaces:
            points = spaces[letter.lower()]
            self.out.append(f"[{ranges(points, letter.isupper())}]")
            return index + 2
        if letter == "R":
            self.out.append(f"(?:\\r\\n|[{ranges(VSPACE, False)}])")
            return index + 2
        if letter == "Q":
            return self.quoted(index)
        if letter in "pP":
            return self.property(index)
        after = pcre_backtrack.escape(self, index, letter)
        if after is not None:
            return after
        if letter == "C":
            self.refuse("the single code unit '\\C'", index, "use '.' (one character)")
        if letter == "X":
            self.refuse("the grapheme cluster '\\X'", index, "use '.' (one character)")
        code, after = code_point(self, index, in_class=False)
        self.out.append(self.char(code))
        return after

    def quoted(self, index: int) -> int:
        """``\\Q...\\E``: literal text."""
        end = self.pattern.find("\\E", index + 2)
        stop = len(self.pattern) if end < 0 else end
        self.out.extend(self.char(ord(char)) for char in self.pattern[index + 2 : stop])
        return stop if end < 0 else end + 2

    def property(self, index: int) -> int:
        """``\\pL``, ``\\p{Greek}``, ``\\P{...}``: passed to RE2 as written."""
        item, after = self.property_item(index)
        self.out.append(f"(?u:{item})" if self.backtracking else item)
        return after

    def property_item(self, index: int) -> tuple[str, int]:
        """The Unicode property escape at ``index`` and the index after it."""
        pattern = self.pattern
        if pattern.startswith("{", index + 2):
            end = pattern.find("}", index)
            if end < 0:
                self.fail("the property '\\p{' is not closed", index, "add '}'")
            after = end + 1
        else:
            after = index + 3
        item = pattern[index:after]
        if not re.fullmatch(r"\\[pP](?:[A-Za-z]|\{\^?[A-Za-z_]+\})", item):
            self.fail(f"the property {item!r} is invalid", index, "write \\p{Name}, e.g. \\p{Lu}")
        return item, after

    # -- character classes -----------------------------------------------------------------

    def char_class(self, index: int) -> int:
        """``[...]`` with ranges, escapes, POSIX names and ``\\Q...\\E``."""
        source, after = ClassReader(self, index).read()
        self.out.append(source)
        return after


_GROUP_HELP = "groups are '(...)', '(?:...)', '(?<name>...)', '(?i)' and '(?i:...)'"
