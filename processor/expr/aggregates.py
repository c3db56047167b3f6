"""AMPS aggregate functions (spec 2.7): one accumulator object per group and aggregate.

Common rules: NULL values are excluded; a group with no non-NULL value gives NULL (COUNT
and COUNT_DISTINCT give 0: spec section 9 item 14); a value that is not numeric in a
numeric aggregate (SUM, AVG, STDDEV_*) makes the result NaN; an array contributes its
first element. Every accumulator keeps enough state (counts, sums, value counts) to
retract a value again with ``remove`` (what a view does when a record leaves a group);
``remove`` must only be given a value that was added before.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from processor.expr.ast import Value
from processor.expr.values import NAN, amps_less, first, isnan, num, text_of, to_number


class Aggregate(ABC):
    """Base of the accumulators: ``add``/``remove`` one value, ``result`` at any time."""

    __slots__ = ()

    @abstractmethod
    def add(self, value: Value) -> None:
        """Fold one record's value into the aggregate."""

    @abstractmethod
    def remove(self, value: Value) -> None:
        """Retract a value added before."""

    @abstractmethod
    def result(self) -> Value:
        """The aggregate over the values added and not removed."""


class _Numeric(Aggregate, ABC):
    """Running integer and float sums, value count and count of non-numeric values.

    ``exact`` (views): the float sum is kept as exact partial sums (Shewchuk's, as
    ``math.fsum`` keeps them), so a value added and removed again leaves no trace and the
    result is the correctly rounded sum of the values present, whatever came and went.
    Without it (queries, which never remove) it is a plain running sum.
    """

    __slots__ = ("floats", "infinities", "ints", "n", "n_float", "n_nan", "partials")

    def __init__(self, exact: bool = False) -> None:
        self.n = 0
        self.ints = 0
        self.floats = 0.0
        self.n_float = 0
        self.n_nan = 0
        self.partials: list[float] | None = [] if exact else None
        #: exact: how many +inf and -inf values are present (kept out of the partials).
        self.infinities = [0, 0]

    def _update(self, value: Value, sign: int) -> None:
        value = first(value)
        if value is None:
            return
        number = num(value)
        self.n += sign
        if number is None or isnan(number):
            self.n_nan += sign
        elif number.__class__ is int:
            self.ints += sign * number
        else:
            if self.partials is None:
                self.floats += sign * number
            elif math.isinf(number):
                self.infinities[number < 0] += sign
            else:
                _grow(self.partials, sign * float(number))
            self.n_float += sign

    def add(self, value: Value) -> None:
        self._update(value, 1)

    def remove(self, value: Value) -> None:
        self._update(value, -1)

    def float_sum(self) -> float:
        if self.partials is None:
            return self.floats
        positive, negative = self.infinities
        if positive or negative:
            return math.nan if positive and negative else (math.inf if positive else -math.inf)
        return math.fsum(self.partials)

    def total(self) -> Value:
        if self.n_nan:
            return NAN
        if self.n_float:
            return self.ints + self.float_sum()
        return self.ints


def _grow(partials: list[float], x: float) -> None:
    """Add a finite ``x`` to exact partial sums (non-overlapping floats whose sum is
    exact)."""
    i = 0
    for partial in partials:
        y = partial
        if abs(x) < abs(y):
            x, y = y, x
        high = x + y
        low = y - (high - x)
        if low:
            partials[i] = low
            i += 1
        x = high
    partials[i:] = [x]


class Sum(_Numeric):
    """SUM(x): integers stay integers (spec section 9 item 12)."""

    __slots__ = ()

    def result(self) -> Value:
        return self.total() if self.n else None


class Avg(_Numeric):
    """AVG(x): the mean, a float."""

    __slots__ = ()

    def result(self) -> Value:
        if not self.n:
            return None
        return self.total() / self.n


class Count(Aggregate):
    """COUNT(x): the number of non-NULL values."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, value: Value) -> None:
        if first(value) is not None:
            self.n += 1

    def remove(self, value: Value) -> None:
        if first(value) is not None:
            self.n -= 1

    def result(self) -> Value:
        return self.n


class _Extreme(Aggregate):
    """MIN/MAX in the AMPS mixed ordering: numbers numerically, strings by code point, a
    string against a number numerically when it converts, else the string is greater.
    NaN values are skipped (they have no place in the order)."""

    __slots__ = ("best", "counts", "greater")

    def __init__(self, greater: bool) -> None:
        self.greater = greater
        self.counts: dict[Any, int] = {}
        self.best: Value = None

    def _better(self, candidate: Value, current: Value) -> bool:
        if current is None:
            return True
        return amps_less(current, candidate) if self.greater else amps_less(candidate, current)

    def add(self, value: Value) -> None:
        value = first(value)
        if value is None or (value.__class__ is float and isnan(value)):
            return
        self.counts[value] = self.counts.get(value, 0) + 1
        if self._better(value, self.best):
            self.best = value

    def remove(self, value: Value) -> None:
        value = first(value)
        left = self.counts.get(value)
        if left is None:
            return
        if left > 1:
            self.counts[value] = left - 1
            return
        del self.counts[value]
        self.best = None
        for candidate in self.counts:
            if self._better(candidate, self.best):
                self.best = candidate

    def result(self) -> Value:
        return self.best


class Min(_Extreme):
    """MIN(x)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(greater=False)


class Max(_Extreme):
    """MAX(x)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(greater=True)


def distinct_key(value: Value) -> Any:
    """The identity COUNT_DISTINCT counts: values that ``=`` finds equal collapse
    (``1``, ``1.0``, ``'1'`` and ``'1.0'`` are one value; spec section 9 item 15)."""
    cls = value.__class__
    if cls is str:
        number = to_number(value)
        return value if number is None else number
    if cls is float and isnan(value):
        return ("NaN",)
    if cls is bool:
        return int(value)
    return value


class CountDistinct(Aggregate):
    """COUNT_DISTINCT(x): the number of distinct non-NULL values."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}

    def add(self, value: Value) -> None:
        value = first(value)
        if value is not None:
            key = distinct_key(value)
            self.counts[key] = self.counts.get(key, 0) + 1

    def remove(self, value: Value) -> None:
        value = first(value)
        if value is None:
            return
        key = distinct_key(value)
        left = self.counts.get(key, 0) - 1
        if left > 0:
            self.counts[key] = left
        else:
            self.counts.pop(key, None)

    def result(self) -> Value:
        return len(self.counts)


class _Deviation(Aggregate):
    """Shifted sums (the first value as the shift), which keep the variance accurate for
    values far from zero and allow removal. ``exact`` (views): unshifted sums of the
    values and their squares kept as exact partial sums, so the result depends only on
    the values present (a shift would depend on the first value ever added)."""

    __slots__ = ("n", "n_nan", "parts1", "parts2", "shift", "sum1", "sum2")

    def __init__(self, exact: bool = False) -> None:
        self.n = 0
        self.n_nan = 0
        self.shift: float | None = 0.0 if exact else None
        self.sum1 = 0.0
        self.sum2 = 0.0
        self.parts1: list[float] | None = [] if exact else None
        self.parts2: list[float] | None = [] if exact else None

    def _update(self, value: Value, sign: int) -> None:
        value = first(value)
        if value is None:
            return
        number = num(value)
        self.n += sign
        if number is None or isnan(number) or number in (math.inf, -math.inf):
            self.n_nan += sign
            return
        if self.shift is None:
            self.shift = float(number)
        delta = number - self.shift
        if self.parts1 is not None and self.parts2 is not None:
            _grow(self.parts1, sign * float(delta))
            _grow(self.parts2, sign * float(delta) * float(delta))
            return
        self.sum1 += sign * delta
        self.sum2 += sign * delta * delta

    def add(self, value: Value) -> None:
        self._update(value, 1)

    def remove(self, value: Value) -> None:
        self._update(value, -1)

    def _deviation(self, ddof: int) -> Value:
        if self.n <= ddof or self.n == 0:
            return None
        if self.n_nan:
            return NAN
        sum1, sum2 = self.sum1, self.sum2
        if self.parts1 is not None and self.parts2 is not None:
            sum1, sum2 = math.fsum(self.parts1), math.fsum(self.parts2)
        variance = (sum2 - sum1 * sum1 / self.n) / (self.n - ddof)
        return math.sqrt(max(variance, 0.0))


class StddevPop(_Deviation):
    """STDDEV_POP(x): population standard deviation."""

    __slots__ = ()

    def result(self) -> Value:
        return self._deviation(0)


class StddevSamp(_Deviation):
    """STDDEV_SAMP(x): sample standard deviation (NULL for fewer than two values)."""

    __slots__ = ()

    def result(self) -> Value:
        return self._deviation(1)


class AnyValue(Aggregate):
    """ANY(x): one of the group's values; here the last non-NULL value added (spec section
    9 item 13). Removing the current value leaves the most recent remaining one."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[Any, int] = {}

    def add(self, value: Value) -> None:
        value = first(value)
        if value is not None:
            count = self.values.pop(value, 0)
            self.values[value] = count + 1  # re-inserted: now the most recent

    def remove(self, value: Value) -> None:
        value = first(value)
        left = self.values.get(value, 0) - 1
        if left > 0:
            self.values[value] = left
        else:
            self.values.pop(value, None)

    def result(self) -> Value:
        if not self.values:
            return None
        return next(reversed(self.values))


class GroupConcat(Aggregate):
    """GROUP_CONCAT(x[, delimiter]): the distinct string forms, first-seen order, joined
    with the delimiter (',' by default)."""

    __slots__ = ("counts", "delimiter")

    def __init__(self, delimiter: str = ",") -> None:
        self.delimiter = delimiter
        self.counts: dict[str, int] = {}

    def add(self, value: Value) -> None:
        text = text_of(value)
        if text is not None:
            self.counts[text] = self.counts.get(text, 0) + 1

    def remove(self, value: Value) -> None:
        text = text_of(value)
        if text is None:
            return
        left = self.counts.get(text, 0) - 1
        if left > 0:
            self.counts[text] = left
        else:
            self.counts.pop(text, None)

    def result(self) -> Value:
        return self.delimiter.join(self.counts) or None


#: name -> (factory taking the constant extra arguments, minimum, maximum argument count).
#: The aggregates that take ``exact=True`` (the others are exact already).
EXACT_CAPABLE = frozenset({"SUM", "AVG", "STDDEV_POP", "STDDEV_SAMP"})

AGGREGATES: dict[str, tuple[Callable[..., Aggregate], int, int]] = {
    "SUM": (Sum, 1, 1),
    "COUNT": (Count, 1, 1),
    "AVG": (Avg, 1, 1),
    "MIN": (Min, 1, 1),
    "MAX": (Max, 1, 1),
    "COUNT_DISTINCT": (CountDistinct, 1, 1),
    "STDDEV_POP": (StddevPop, 1, 1),
    "STDDEV_SAMP": (StddevSamp, 1, 1),
    "ANY": (AnyValue, 1, 1),
    "GROUP_CONCAT": (GroupConcat, 1, 2),
}
