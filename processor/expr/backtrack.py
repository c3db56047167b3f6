"""Patterns RE2 cannot run, matched by a backtracking engine within a time budget.

Backreferences, lookaround, atomic groups, possessive quantifiers, recursion and the
other constructs of :mod:`processor.expr.pcre_backtrack` need backtracking. They run on
the ``regex`` package, whose matcher checks a timeout as it goes: each search, and each
whole replacement, on one value is stopped after the process's budget
(:func:`processor.expr.budget.budget_ms`) and raises
:class:`~processor.errors.RegexBudgetError`, so a catastrophic pattern such as
``(a+)+\\1b`` on a long text costs at most the budget, never a hang. The matcher releases
the GIL while it runs (``concurrent``): other threads go on meanwhile.

The pattern is translated by :class:`processor.expr.pcre.Translator` with the meanings it
gives RE2 (ASCII-only ``(?i)``, ``\\w``, ``\\d``, ``\\b``; ``$`` before a final newline;
``\\s`` with the vertical tab): the engine's ``$`` already means PCRE's, and its ASCII flag
makes the classes and case folding ASCII.
"""

from __future__ import annotations

from typing import Any

import regex

from processor.errors import ExpressionError, RegexBudgetError
from processor.expr.budget import budget_ms
from processor.expr.pcre import END, Translator
from processor.expr.pcre_backtrack import finish

#: Version 0 (``re``'s behaviour, as PCRE's for what both have) with ASCII classes.
FLAGS = regex.V0 | regex.ASCII


class Backtracking:
    """A pattern compiled for the backtracking engine: ``search`` and ``replace`` as
    :class:`processor.expr.regex.Regex`'s, each bounded by the match budget."""

    __slots__ = ("_compiled", "pattern", "source", "what")

    def __init__(self, pattern: str, source: str, compiled: Any, what: str):
        self.pattern = pattern
        self.source = source
        self.what = what
        self._compiled = compiled

    def __repr__(self) -> str:
        return f"Backtracking({self.pattern!r})"

    def _overrun(self, budget: int) -> RegexBudgetError:
        return RegexBudgetError(self.pattern, budget, self.what)

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in ``text`` (RegexBudgetError when
        finding out takes longer than the budget)."""
        budget = budget_ms()
        try:
            found = self._compiled.search(text, timeout=budget / 1000, concurrent=True)
        except TimeoutError:
            raise self._overrun(budget) from None
        return found is not None

    def replace(self, text: str, replacement: str) -> str:
        """``text`` with every non-overlapping match replaced by ``replacement`` taken
        literally (RegexBudgetError when the whole replacement takes longer than the
        budget)."""
        budget = budget_ms()
        try:
            replaced: str = self._compiled.sub(
                lambda _: replacement, text, timeout=budget / 1000, concurrent=True
            )
        except TimeoutError:
            raise self._overrun(budget) from None
        return replaced


def compile_backtracking(pattern: str, *, what: str, text: str, position: int) -> Backtracking:
    """Compile a PCRE pattern for the backtracking engine (ExpressionError when it is
    invalid, or too large to compile: see :data:`processor.expr.pcre.MAX_EXPANSION`)."""
    translator = Translator(pattern, what=what, text=text, position=position, backtracking=True)
    translation = translator.run()
    source = finish(translation.source, END)
    if translation.anchored:
        source = f"\\A(?:{source})"
    try:
        compiled = regex.compile(source, FLAGS)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ExpressionError(
            f"invalid regular expression in {what} {pattern!r}: "
            f"{getattr(exc, 'msg', None) or exc}; fix the pattern",
            text=text,
            position=position,
        ) from None
    return Backtracking(pattern, source, compiled, what)
