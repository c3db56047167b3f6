"""The time budget of one match on the backtracking engine, and the overruns counted.

Patterns that RE2 can run take time linear in the text and have no budget. The others
(backreferences, lookaround, atomic groups, possessive quantifiers...) run on a
backtracking engine (:mod:`processor.expr.backtrack`), whose time can grow exponentially
with the text: each search or replacement on one value is stopped once it has taken
:func:`budget_ms` milliseconds, with a :class:`~processor.errors.RegexBudgetError`.

The budget is one per process (``SOW_REGEX_MATCH_BUDGET_MS``, set at start by
:func:`processor.app.start`). Where an overrun does not fail a request (a subscription's,
view's or queue's filter, a filter delete, a function's value) it is counted here by
where it happened; /metrics exports the counts as ``sow_regex_budget_exceeded_total``.
"""

from __future__ import annotations

import threading
from collections import Counter

#: The budget of one match, in milliseconds, until a process sets its own.
DEFAULT_BUDGET_MS = 100

#: The process's budget (a list, so that setting it needs no ``global``).
_budget_ms = [DEFAULT_BUDGET_MS]
_lock = threading.Lock()
_overruns: Counter[str] = Counter()

#: Where an overrun is counted rather than raised (the metric's ``where`` label).
PLACES = ("subscription", "view", "queue", "delete", "function")


def budget_ms() -> int:
    """The budget of one match, in milliseconds."""
    return _budget_ms[0]


def set_budget_ms(milliseconds: int) -> None:
    """Set the process's budget (``SOW_REGEX_MATCH_BUDGET_MS``)."""
    if milliseconds < 1:
        raise ValueError(f"a regex match budget must be at least 1 ms, got {milliseconds}")
    _budget_ms[0] = milliseconds


def count_overrun(where: str) -> None:
    """Count one overrun that made a filter not match (or a function NULL) ``where``."""
    with _lock:
        _overruns[where] += 1


def overruns() -> dict[str, int]:
    """The overruns counted so far, by where they happened (every place, zeros too)."""
    with _lock:
        return {place: _overruns[place] for place in PLACES}
