"""The audit of refused calls: counted per reason, logged without flooding.

Every refusal (a logon refused, UNAUTHENTICATED; a call not entitled, PERMISSION_DENIED)
goes through :meth:`Audit.refused`. It is counted per reason (Prometheus
``sow_refused_calls_total{reason=...}``, :class:`processor.observability.metrics.RefusalCollector`)
and logged at WARNING the first time a principal is refused for a reason; further
refusals of that principal for that reason within :data:`INTERVAL_S` are only counted,
and the count is logged in one summary line once the interval is over. 10,000 bad
logons make a handful of lines, not 10,000.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("processor.audit")

#: A principal refused for one reason is logged once per this many seconds.
INTERVAL_S = 60.0
#: (principal, reason) pairs tracked at most; beyond, refusals are logged under "(others)".
TRACKED = 10_000
#: Principal names (attacker-chosen text) are cut to this many characters in the log.
NAME_CHARS = 64


@dataclass(slots=True)
class _Seen:
    since: float
    suppressed: int = 0


class Audit:
    """Counts and logs refused calls. Thread-safe."""

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self._interval = interval_s
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._swept = clock()

    def refused(self, principal: str, reason: str, detail: str = "") -> None:
        """Record one refused call: who (the principal's name, or the name it claimed,
        or ``unauthenticated``), why (a short reason: ``bad-password``,
        ``not-entitled``...) and the detail told to the caller."""
        name = _printable(principal)
        now = self._clock()
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + 1
            key = (name, reason)
            seen = self._seen.get(key)
            if seen is None and len(self._seen) >= TRACKED:
                key = ("(others)", reason)
                seen = self._seen.get(key)
            if seen is not None and now - seen.since < self._interval:
                seen.suppressed += 1
                summaries = self._sweep(now)
                first = False
            else:
                if seen is not None and seen.suppressed:
                    self._summary(key, seen)
                self._seen[key] = _Seen(now)
                summaries = self._sweep(now)
                first = True
        for line in summaries:
            self._log.warning("%s", line)
        if first:
            self._log.warning("refused %s (%s): %s", key[0], reason, _printable(detail, 300))

    def _summary(self, key: tuple[str, str], seen: _Seen) -> None:
        self._log.warning(
            "refused %s (%s) %d more times in the last %.0fs",
            key[0],
            key[1],
            seen.suppressed,
            self._interval,
        )

    def _sweep(self, now: float) -> list[str]:
        """Forget the pairs whose interval is over (at most once a second), returning
        the summary lines of those with refusals not logged yet. Called with the lock."""
        if now - self._swept < 1.0:
            return []
        self._swept = now
        lines: list[str] = []
        for key, seen in list(self._seen.items()):
            if now - seen.since >= self._interval:
                del self._seen[key]
                if seen.suppressed:
                    lines.append(
                        f"refused {key[0]} ({key[1]}) {seen.suppressed} more times in the "
                        f"last {self._interval:.0f}s"
                    )
        return lines

    def flush(self) -> None:
        """Log the summaries not logged yet (at stop)."""
        with self._lock:
            seen, self._seen = self._seen, {}
        for key, entry in seen.items():
            if entry.suppressed:
                self._summary(key, entry)

    def counts(self) -> dict[str, int]:
        """Refused calls so far, per reason."""
        with self._lock:
            return dict(self._counts)


def _printable(text: str, limit: int = NAME_CHARS) -> str:
    """``text`` safe for one log line: control characters escaped, cut to ``limit``."""
    cleaned = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."
