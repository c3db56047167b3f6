"""When a scheduled action runs: AMPS's ``Every`` option of ``amps-action-on-schedule``.

:func:`processor.topology.action_rules.parse_schedule` reads AMPS's three forms:

* a **timer**, a duration (``30s``, ``5m``, ``4h``, ``1d``; at least one second): the
  action runs that long after the partition first saw the action, then that long after
  each run (AMPS starts the timer when the instance starts and resets it after each run;
  here the last run is kept with the partition, so a restart does not reset it);
* a **daily time**, ``HH:MM`` in 24-hour notation (``00:32``, ``17:47``);
* a **weekly day and time**, ``<day> at HH:MM`` (``Saturday at 11:00``,
  ``Wednesday at 03:32``; a day's first three letters do too).

A time is **local time** (the processor host's time zone, ``TZ``) unless it ends in ``Z``:
``11:32`` is 11:32 local time, ``11:32Z`` is 11:32 UTC, as in AMPS. A kafka-sow
extension: a **cron expression** of five fields, ``minute hour day-of-month month
day-of-week`` (``*/15 * * * *``, ``0 2 * * 1-5``; lists, ranges, steps and ``*``; day of
week 0-7, 0 and 7 are Sunday; names ``mon``..``sun`` and ``jan``..``dec``; when both day
fields are restricted, a day matching either runs, as in cron), in local time as cron's.

A :class:`Schedule` answers :meth:`Schedule.next_after`: the first tick strictly after an
instant; the processor runs an action when the first tick after the last run it recorded
has come (:mod:`processor.actions.scheduled`), so ticks missed while no processor ran
collapse into one run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from processor.errors import ValueFormatError

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_TIME = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})(?P<utc>Z)?"
_DAILY = re.compile(rf"^{_TIME}$", re.IGNORECASE)
_WEEKLY = re.compile(rf"^(?P<day>[A-Za-z]+)\s+at\s+{_TIME}$", re.IGNORECASE)
_TWELVE_HOUR = re.compile(r"\d\s*[AP]\.?M\.?$", re.IGNORECASE)
#: The shortest interval: a tick is a transaction per partition.
MIN_INTERVAL_MS = 1000
#: How far ahead a cron expression is searched for its next tick (Feb 29 on a Monday
#: recurs within 28 years).
_HORIZON_DAYS = 366 * 29
#: (name, low, high) of the five cron fields.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed ``Every``: ``interval_ms`` > 0 for a timer, else the cron sets, read in
    UTC when ``utc`` is set and in local time otherwise."""

    text: str
    interval_ms: int = 0
    utc: bool = False
    minutes: frozenset[int] = frozenset()
    hours: frozenset[int] = frozenset()
    days: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    weekdays: frozenset[int] = frozenset()  # 0 = Monday (datetime.weekday())
    any_day: bool = True
    any_weekday: bool = True

    def next_after(self, ms: int) -> int:
        """The first tick strictly after ``ms`` (milliseconds since the epoch): a timer's
        interval after it; else the first matching minute, in UTC or local time."""
        if self.interval_ms:
            return ms + self.interval_ms
        # local time: naive datetimes, which fromtimestamp()/timestamp() read as local
        moment = datetime.fromtimestamp(ms // 60_000 * 60, UTC if self.utc else None)
        moment += timedelta(minutes=1)
        end = moment + timedelta(days=_HORIZON_DAYS)
        while moment < end:
            if moment.month not in self.months:
                first = (moment.replace(day=1) + timedelta(days=32)).replace(day=1)
                moment = first.replace(hour=0, minute=0)
                continue
            if not self._day_matches(moment):
                moment = (moment + timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if moment.hour not in self.hours:
                moment = (moment + timedelta(hours=1)).replace(minute=0)
                continue
            if moment.minute not in self.minutes:
                moment += timedelta(minutes=1)
                continue
            return int(moment.timestamp()) * 1000
        raise ValueFormatError(f"schedule {self.text!r} has no tick in the next 29 years")

    def _day_matches(self, moment: datetime) -> bool:
        day, weekday = moment.day in self.days, moment.weekday() in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday  # cron: both restricted means either


def calendar_schedule(text: str) -> Schedule | None:
    """The schedule of a daily time, a day and time or a cron expression (see the module
    doc); None when ``text`` is none of them (an interval, perhaps). Raises
    ValueFormatError when it is one of them, malformed."""
    if _TWELVE_HOUR.search(text):
        raise ValueFormatError(
            f"schedule {text!r}: AMPS times are in 24-hour notation (23:30, not 11:30PM)"
        )
    daily = _DAILY.match(text)
    if daily:
        hour, minute = _clock(daily, text)
        return _cron(text, f"{minute} {hour} * * *", utc=bool(daily["utc"]))
    weekly = _WEEKLY.match(text)
    if weekly:
        hour, minute = _clock(weekly, text)
        day = _day_number(weekly["day"], text)
        return _cron(text, f"{minute} {hour} * * {day}", utc=bool(weekly["utc"]))
    if len(text.split(" ")) == 5:
        return _cron(text, text)
    return None


def _clock(match: re.Match[str], text: str) -> tuple[int, int]:
    hour, minute = int(match["hour"]), int(match["minute"])
    if hour > 23 or minute > 59:
        raise ValueFormatError(f"{text!r} is not a time of day (00:00 to 23:59)")
    return hour, minute


def _day_number(word: str, text: str) -> int:
    """The cron day of week (0 = Sunday) of a day name."""
    prefix = word[:3].lower()
    full = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    if prefix not in _DAYS or word.lower() not in (prefix, full[_DAYS.index(prefix)]):
        raise ValueFormatError(f"{text!r}: {word!r} is not a day of the week (Monday..Sunday)")
    return (_DAYS.index(prefix) + 1) % 7


def _cron(text: str, expression: str, utc: bool = False) -> Schedule:
    parts = expression.split(" ")
    sets = [
        _cron_field(part, name, low, high, _MONTHS if name == "month" else (), text)
        for part, (name, low, high) in zip(parts[:4], _FIELDS, strict=True)
    ]
    cron_days = _cron_field(parts[4], "day of week", 0, 7, _CRON_DAYS, text)
    weekdays = frozenset((day - 1) % 7 for day in cron_days)  # cron 0/7 = Sunday = 6
    return Schedule(
        text,
        utc=utc,
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=weekdays,
        any_day=parts[2] == "*",
        any_weekday=parts[4] == "*",
    )


_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _cron_field(
    part: str, name: str, low: int, high: int, names: tuple[str, ...], text: str
) -> frozenset[int]:
    """The values of one cron field: ``*``, ``a``, ``a-b``, each with ``/step``, listed."""
    values: set[int] = set()
    for item in part.split(","):
        body, _, step_text = item.partition("/")
        step = _number(step_text, name, text, ()) if step_text else 1
        if step < 1:
            raise ValueFormatError(f"cron {text!r}: the {name} step must be 1 or more")
        if body == "*":
            first, last = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            first, last = _number(a, name, text, names), _number(b, name, text, names)
        else:
            first = _number(body, name, text, names)
            last = high if step_text else first
        if not low <= first <= last <= high:
            raise ValueFormatError(
                f"cron {text!r}: the {name} field {item!r} is outside {low}-{high} "
                "(or its range runs backwards)"
            )
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _number(word: str, name: str, text: str, names: tuple[str, ...]) -> int:
    lowered = word.lower()
    if lowered in names:
        return names.index(lowered) + (1 if names is _MONTHS else 0)
    if not word.isdigit():
        raise ValueFormatError(
            f"cron {text!r}: {word!r} is not a number in the {name} field; give "
            "minute hour day-of-month month day-of-week"
        )
    return int(word)
