"""Regular expressions for LIKE and REGEXP_REPLACE, matched by RE2 in linear time.

A pattern is PCRE syntax (as in AMPS), translated by :mod:`processor.expr.pcre` and
compiled by RE2 (the google-re2 package), whose matching time is linear in the length of
the text for every pattern it accepts. RE2's program size is capped (``max_mem``), so
compiling is bounded too. A pattern RE2 cannot run (a backreference, lookaround, an atomic
group, a possessive quantifier..., or a program above :data:`MAX_PROGRAM_SIZE`) runs on
the backtracking engine of :mod:`processor.expr.backtrack` instead, where every match is
bounded by a time budget: no filter, query or filter delete can hang a thread.

Texts are matched as UTF-8; a lone surrogate (possible in a decoded JSON string) is
carried through unchanged ("surrogatepass") and matches only ``.`` and negated classes.
"""

from __future__ import annotations

from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

from processor.errors import ExpressionError
from processor.expr.backtrack import compile_backtracking
from processor.expr.pcre import END, MAX_REPEAT, Translator

# The low-level RE2 object of google-re2 (the version is pinned in pyproject.toml): its
# Match answers spans directly, about ten times faster than the re-like wrapper, which
# builds a generator and a match object per search.
_RE2 = re2._re2.RE2
_UNANCHORED = _RE2.Anchor.UNANCHORED
_ANCHOR_START = _RE2.Anchor.ANCHOR_START
_MISS = (-1, -1)


class Matcher(Protocol):
    """A compiled pattern, on RE2 (:class:`Regex`) or the backtracking engine
    (:class:`processor.expr.backtrack.Backtracking`, whose methods may raise
    RegexBudgetError)."""

    pattern: str

    def search(self, text: str) -> bool: ...

    def replace(self, text: str, replacement: str) -> str: ...


#: RE2's budget for one compiled pattern (its default); a larger program is refused.
MAX_MEMORY = 8 << 20
#: The largest RE2 program accepted, in instructions. Matching takes time linear in the
#: text, times up to the program size when RE2's DFA runs out of states and falls back to
#: its NFA: at 2,000 the slowest patterns measured take 25 ms per 100 KB of text, at 3,000
#: 0.5 s. Typical filters compile to under 100 (``^ORD-[0-9]{6}$``: 10); ``.{250}`` is
#: 2,000 (``.`` is 8 UTF-8 instructions) and ``\p{L}`` alone 1,196.
MAX_PROGRAM_SIZE = 2000


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _options(capture: bool, longest: bool = False) -> Any:
    options = re2.Options()
    options.longest_match = longest
    options.log_errors = False
    options.never_capture = not capture
    options.max_mem = MAX_MEMORY
    return options


#: What the END mark of a translation becomes, by the kind of text: one that does not end
#: in a newline (the end is the only place), one whose only newline ends it (RE2's
#: multiline ``$`` is then exact), and one with more newlines (a group that consumes the
#: final newline, given back by ``replace``; a pattern that must match something after
#: that newline, such as ``a$\\n``, then misses).
ENDINGS = {"end": r"\z", "one-newline": "(?m:$)", "newlines": r"(?:(\n)?\z)"}


class Regex:
    """A compiled pattern. ``search`` answers whether it matches anywhere in a text;
    ``replace`` substitutes a literal for every match. Both are thread-safe and take
    time linear in the text.

    ``source`` is the RE2 translation with END marks; the RE2 programs for each kind of
    text (:data:`ENDINGS`) are compiled when first needed."""

    __slots__ = ("_ends", "_plain", "_programs", "pattern", "source")

    def __init__(self, pattern: str, source: str, plain: Any) -> None:
        self.pattern = pattern
        self.source = source
        self._plain = plain.Match
        self._ends = END in source
        self._programs: dict[tuple[str, bool], Any] = {("end", False): plain.Match}

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"

    def _program(self, data: bytes, longest: bool = False) -> Any:
        ending = "end"
        if self._ends and data.endswith(b"\n"):
            ending = "one-newline" if data.count(b"\n") == 1 else "newlines"
        program = self._programs.get((ending, longest))
        if program is None:
            source = self.source.replace(END, ENDINGS[ending])
            compiled = _RE2(_encode(source), _options(capture=True, longest=longest))
            # The variants differ from the checked one only in an anchor or a group.
            program = compiled.Match if compiled.ok() else self._plain
            self._programs[ending, longest] = program
        return program

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in ``text``."""
        data = _encode(text)
        match = self._program(data) if self._ends else self._plain
        found: bool = match(_UNANCHORED, data, 0, len(data))[0] != _MISS
        return found

    def replace(self, text: str, replacement: str) -> str:
        """``text`` with every non-overlapping match replaced by ``replacement`` taken
        literally, left to right, as PCRE's global substitution does: after an empty
        match, a non-empty match at the same place is tried (the longest one; PCRE takes
        its preferred one, which differs only for alternatives that are prefixes of each
        other), else the next character is kept and the search goes on after it."""
        data, literal = _encode(text), _encode(replacement)
        search, longest = self._program(data), self._program(data, longest=True)
        size, position, kept, after_empty = len(data), 0, 0, False
        pieces: list[bytes] = []
        while position <= size:
            if after_empty:
                start, end = _span(longest(_ANCHOR_START, data, position, size))
                after_empty = False
                if end <= position:
                    position += 1
                    while position < size and data[position] & 0xC0 == 0x80:
                        position += 1
                    continue
            else:
                start, end = _span(search(_UNANCHORED, data, position, size))
                if start < 0:
                    break
            pieces += (data[kept:start], literal)
            kept = position = end
            after_empty = end == start
        pieces.append(data[kept:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")


def _span(spans: list[tuple[int, int]]) -> tuple[int, int]:
    """The span of a match. The only capturing groups are the final newline a PCRE ``$``
    or ``\\Z`` may stand before (the "newlines" ending); the match ends before it (the
    newline is not replaced)."""
    start, end = spans[0]
    for group_start, _ in spans[1:]:
        if group_start >= 0:
            end = min(end, group_start)
    return start, end


def compile_regex(
    pattern: str,
    *,
    what: str = "LIKE pattern",
    text: str = "",
    position: int = -1,
    backtracking: bool = True,
) -> Matcher:
    """Compile a PCRE-style pattern (see :mod:`processor.expr.pcre` for the dialect).

    Inline flags ``(?i)`` ``(?m)`` ``(?s)`` ``(?x)`` ``(?U)`` work as in PCRE, anywhere
    and in scoped groups ``(?i:...)``; a leading ``(?A)`` anchors the match at the start
    of the text. Matching is not Unicode-aware (``\\w``, ``\\d``, ``(?i)`` are ASCII), as
    in AMPS. A pattern RE2 cannot run goes to the backtracking engine, unless
    ``backtracking`` is False (topic patterns, matched where no budget can be spent): it
    is then refused. Raises ExpressionError, naming ``what`` and the offset in the
    pattern, for an invalid pattern or a construct no engine here runs (callouts, ...)."""
    translation = Translator(pattern, what=what, text=text, position=position).run()
    if translation.needs is not None:
        construct, offset = translation.needs
        if not backtracking:
            raise ExpressionError(
                f"{what} {pattern!r}: {construct} (at offset {offset} of the "
                "pattern) is not supported here, because this pattern must run in linear "
                "time (RE2, see docs/expressions.md); write it without backreferences, "
                "lookaround, atomic groups, possessive quantifiers or counts above "
                f"{MAX_REPEAT}",
                text=text,
                position=position,
            ) from None
        return compile_backtracking(pattern, what=what, text=text, position=position)
    source = translation.source
    if translation.anchored:
        source = f"\\A(?:{source})"
    compiled = _RE2(_encode(source.replace(END, ENDINGS["end"])), _options(capture=False))
    # RE2 refuses a program above its memory budget, or nested counts above 1000 in all.
    large = not compiled.ok() and any(
        why in _problem(compiled) for why in ("too large", "invalid repetition size")
    )
    if compiled.ok() and compiled.ProgramSize() > MAX_PROGRAM_SIZE:
        large = True
    if large and backtracking:
        return compile_backtracking(pattern, what=what, text=text, position=position)
    if not compiled.ok():
        problem = _problem(compiled)
        advice = "simplify the pattern" if "too large" in problem else "fix the pattern"
        raise ExpressionError(
            f"invalid regular expression in {what} {pattern!r}: {problem}; {advice}",
            text=text,
            position=position,
        )
    size = compiled.ProgramSize()
    if size > MAX_PROGRAM_SIZE:
        raise ExpressionError(
            f"{what} {pattern!r}: a pattern compiling to {size} RE2 instructions (above "
            f"{MAX_PROGRAM_SIZE}) is not supported here, because matching time grows with its "
            "size; shorten large counted repetitions (such as '.{300}') and repeated Unicode "
            "properties (such as '\\p{L}{3}')",
            text=text,
            position=position,
        )
    return Regex(pattern, source, compiled)


def _problem(compiled: Any) -> str:
    """Why RE2 did not compile a pattern."""
    problem = compiled.error()
    if isinstance(problem, bytes):
        problem = problem.decode("utf-8", "replace")
    return str(problem)
