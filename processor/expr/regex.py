"""Regular expressions for LIKE and REGEXP_REPLACE, matched by RE2 in linear time.

A pattern is PCRE syntax (as in AMPS), translated by :mod:`processor.expr.pcre` and
compiled by RE2 (the google-re2 package), whose matching time is linear in the length of
the text for every pattern: no filter, query or filter delete can hang a thread on a
pathological pattern. RE2's program size is capped (``max_mem``), so compiling is bounded
too. Patterns that need backtracking are refused at compile time (ExpressionError).

Texts are matched as UTF-8; a lone surrogate (possible in a decoded JSON string) is
carried through unchanged ("surrogatepass") and matches only ``.`` and negated classes.
"""

from __future__ import annotations

from typing import Any

import re2  # type: ignore[import-untyped]

from processor.errors import ExpressionError
from processor.expr.pcre import Translator

# The low-level RE2 object of google-re2 (the version is pinned in pyproject.toml): its
# Match answers spans directly, about ten times faster than the re-like wrapper, which
# builds a generator and a match object per search.
_RE2 = re2._re2.RE2
_UNANCHORED = _RE2.Anchor.UNANCHORED
_MISS = (-1, -1)
#: RE2's budget for one compiled pattern (its default); a larger program is refused.
MAX_MEMORY = 8 << 20


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _options(capture: bool) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = not capture
    options.max_mem = MAX_MEMORY
    return options


class Regex:
    """A compiled pattern. ``search`` answers whether it matches anywhere in a text;
    ``replace`` substitutes a literal for every match. Both are thread-safe and take
    time linear in the text."""

    __slots__ = ("_match", "_replacer", "pattern", "source")

    def __init__(self, pattern: str, source: str, match: Any) -> None:
        self.pattern = pattern
        self.source = source
        self._match = match
        self._replacer: Any = None

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in ``text``."""
        data = _encode(text)
        found: bool = self._match(_UNANCHORED, data, 0, len(data))[0] != _MISS
        return found

    def replace(self, text: str, replacement: str) -> str:
        """``text`` with every non-overlapping match replaced by ``replacement`` taken
        literally, left to right; an empty match is replaced too (also right after a
        non-empty one, as Python's ``re.sub`` does)."""
        if self._replacer is None:
            self._replacer = _RE2(_encode(self.source), _options(capture=True)).Match
        match, data, literal = self._replacer, _encode(text), _encode(replacement)
        size, position, kept = len(data), 0, 0
        pieces: list[bytes] = []
        while position <= size:
            spans = match(_UNANCHORED, data, position, size)
            start, end = spans[0]
            if start < 0:
                break
            # The only capturing groups are the final newline a PCRE ``$`` or ``\Z`` may
            # stand before; the match ends before it (the newline is not replaced).
            for group_start, _ in spans[1:]:
                if group_start >= 0:
                    end = min(end, group_start)
            pieces += (data[kept:start], literal)
            kept = end
            if end > start:
                position = end
                continue
            if start >= size:
                break
            position = start + 1
            while position < size and data[position] & 0xC0 == 0x80:
                position += 1
        pieces.append(data[kept:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")


def compile_regex(
    pattern: str, *, what: str = "LIKE pattern", text: str = "", position: int = -1
) -> Regex:
    """Compile a PCRE-style pattern (see :mod:`processor.expr.pcre` for the dialect).

    Inline flags ``(?i)`` ``(?m)`` ``(?s)`` ``(?x)`` ``(?U)`` work as in PCRE, anywhere
    and in scoped groups ``(?i:...)``; a leading ``(?A)`` anchors the match at the start
    of the text. Matching is not Unicode-aware (``\\w``, ``\\d``, ``(?i)`` are ASCII), as
    in AMPS. Raises ExpressionError, naming ``what`` and the offset in the pattern, for an
    invalid pattern or a construct that needs backtracking (backreferences, lookaround,
    atomic groups, possessive quantifiers, recursion, conditionals, ...)."""
    translation = Translator(pattern, what=what, text=text, position=position).run()
    source = translation.source
    if translation.anchored:
        source = f"\\A(?:{source})"
    compiled = _RE2(_encode(source), _options(capture=False))
    if not compiled.ok():
        problem = compiled.error()
        if isinstance(problem, bytes):
            problem = problem.decode("utf-8", "replace")
        advice = "simplify the pattern" if "too large" in problem else "fix the pattern"
        raise ExpressionError(
            f"invalid regular expression in {what} {pattern!r}: {problem}; {advice}",
            text=text,
            position=position,
        )
    return Regex(pattern, source, compiled.Match)
