"""Conflated subscriptions (spec 3.11): at most one update per key per interval.

A subscription with ``conflation`` (``"<n>ms"``, ``"<n>s"`` or ``"<n>m"``) gets a
:class:`ConflatingQueue` in place of its send queue: it sits between the subscription's
decisions and its sender. Per key (``conflation_key`` ``[/a,/b]``: those fields' values;
default: the topic and SowKey), the first publish held starts the key's interval; later
publishes for the key replace the held one; when the interval has passed the latest is
released to the sender. So a key gets at most one publish per interval, and it is the
latest state.

OOFs and deletes are held the same way, as AMPS does (spec 3.9): what the subscriber
gets at the end of a key's interval is the difference between the state it held when the
interval began and the state at its end. An OOF carries the state the subscriber last
received (an update held in the interval and then leaving the filter gives one OOF with
the previously delivered state); a record that leaves and comes back within one
interval gives only its end state; a record new in the interval that leaves again gives
nothing. The query result of a sow_and_subscribe is never conflated.

Timers: one :class:`ConflationClock` thread per hub serves every conflated subscription;
each queue has at most one entry in the clock's heap (its earliest due key: keys are held
in due order, as they share one interval). The clock calls the subscription's public
``release_held``.

Thread-safety: a queue is used under its subscription's lock, like the deque it replaces;
``release_held`` takes that lock (lock order: subscription, then clock; the clock never
holds its own lock while calling a release).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from processor import changelog
from processor.errors import DecodeError, EnvelopeError, InvalidRequestError, ParseError
from processor.expr import field_getter
from processor.expr.clauses import parse_grouping
from processor.messages import Codec
from processor.subscriptions.model import ChangeKind, Notice, SubscribeRequest

_INTERVAL = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)\s*", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0}
#: The longest interval accepted.
MAX_INTERVAL_S = 3600.0

#: A delivery -> the key it is conflated under.
KeyOf = Callable[[Notice], Hashable]
#: Releases a subscription's due deliveries at a time; returns the next due time.
Release = Callable[[float], "float | None"]


def parse_interval(text: str) -> float | None:
    """The conflation interval in seconds; None for ``""`` or ``"none"`` (no conflation).
    Raises InvalidRequestError for anything else that is not ``<n>ms|<n>s|<n>m`` with
    0 < n and at most an hour."""
    if not text.strip() or text.strip().lower() == "none":
        return None
    found = _INTERVAL.fullmatch(text)
    seconds = None if found is None else float(found[1]) * _SECONDS[found[2].lower()]
    if seconds is None or not 0 < seconds <= MAX_INTERVAL_S:
        raise InvalidRequestError(
            f"conflation {text!r} is not an interval: use <n>ms, <n>s or <n>m (for example "
            f"250ms, 1s, 1m; more than 0 and at most {MAX_INTERVAL_S:g}s), or none"
        )
    return seconds


def _hashable(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list) else value


def key_function(request: SubscribeRequest, codecs: dict[str, Codec]) -> KeyOf:
    """How ``request`` keys its deliveries: the ``conflation_key`` fields' values, or the
    topic and SowKey. Raises InvalidRequestError for a key that does not parse, or a
    field key together with ``oof`` (spec 3.9: OOF is per record)."""
    text = request.conflation_key.strip()
    if not text:
        return lambda delivery: (delivery.topic, delivery.sow_key)
    if request.oof:
        raise InvalidRequestError(
            f"conflation_key {text!r} cannot be combined with oof: out-of-focus "
            "notifications are per record; leave conflation_key empty (the SowKey) or "
            "drop oof"
        )
    try:
        fields = parse_grouping(text)
    except ParseError as exc:
        raise InvalidRequestError(
            f"conflation_key {text!r} is not a list of fields like [/a,/b]: {exc}"
        ) from exc
    getters = [field_getter(i.steps) for i in fields]

    def key_of(delivery: Notice) -> Hashable:
        try:
            codec = codecs[delivery.topic]
            message = codec.decode(changelog.data_of(delivery.envelope))
        except (DecodeError, EnvelopeError):
            return (delivery.topic, delivery.sow_key)  # no field values: its own key
        return (delivery.topic, *(_hashable(get(message)) for get in getters))

    return key_of


def check_conflation(request: SubscribeRequest, codecs: dict[str, Codec]) -> float | None:
    """Validate a request's conflation options; its interval (None: not conflated)."""
    interval = parse_interval(request.conflation)
    if interval is None and request.conflation_key.strip():
        raise InvalidRequestError(
            f"conflation_key {request.conflation_key!r} needs a conflation interval "
            "(conflation=250ms, 1s, ...)"
        )
    if interval is not None:
        key_function(request, codecs)
    return interval


class ConflatingQueue:
    """A subscription's send queue that holds its deliveries per key for an interval
    (a :class:`~processor.subscriptions.subscription.HoldingQueue`; see the module doc).

    Per key it holds the latest delivery decided in the interval (None: nothing to send)
    and the state the subscriber had when the interval began (None: it did not hold the
    record). ``len`` counts only what is ready to send (held deliveries are bounded by
    the number of keys). Used under its subscription's lock."""

    def __init__(self, interval_s: float, key_of: KeyOf, clock: ConflationClock) -> None:
        self.interval_s = interval_s
        self.key_of = key_of
        self.clock = clock
        self.ready: collections.deque[Notice] = collections.deque()
        #: key -> [due time, latest delivery or None, state delivered before it], in due
        #: order.
        self.held: dict[Hashable, list[Any]] = {}
        self._release: Release | None = None
        self._scheduled = False

    def bind(self, release: Release) -> None:
        """Call ``release`` (the subscription's ``release_held``) when deliveries fall due."""
        self._release = release

    def __len__(self) -> int:
        return len(self.ready)

    def __bool__(self) -> bool:
        return bool(self.ready)

    def append(self, delivery: Notice) -> None:
        key = self.key_of(delivery)
        entry = self.held.get(key)
        if entry is None:
            # ``previous``: the state the subscription last decided on, which nothing
            # held for the key means the subscriber received.
            entry = self.held[key] = [time.monotonic() + self.interval_s, None, delivery.previous]
            if not self._scheduled and self._release is not None:
                self._scheduled = True
                self.clock.schedule(entry[0], self._release)
        entry[1] = _as_seen(delivery, entry[2])

    def extend(self, deliveries: Iterable[Notice]) -> None:
        for delivery in deliveries:
            self.append(delivery)

    def popleft(self) -> Notice:
        return self.ready.popleft()

    def clear(self) -> None:
        self.ready.clear()
        self.held.clear()

    def release(self, now: float) -> float | None:
        """Make the deliveries due by ``now`` ready; the next due time (None: none held)."""
        held, ready = self.held, self.ready
        while held:
            key = next(iter(held))
            due, delivery, _ = held[key]
            if due > now:
                break
            del held[key]
            if delivery is not None:
                ready.append(delivery)
        following: float | None = held[next(iter(held))][0] if held else None
        self._scheduled = following is not None
        return following


def _as_seen(delivery: Notice, delivered: bytes | None) -> Notice | None:
    """``delivery`` as the subscriber sees it when it holds ``delivered`` (None: not the
    record): a publish is a change from that state; an OOF or a delete of a record it
    does not hold is nothing, else it carries that state (spec 3.9, conflation)."""
    if delivery.kind is ChangeKind.PUBLISH:
        if delivery.previous is delivered:
            return delivery
        return dataclasses.replace(delivery, previous=delivered)
    if delivered is None:
        return None
    if delivery.envelope is delivered:
        return delivery
    return dataclasses.replace(delivery, envelope=delivered, previous=delivered)


class ConflationClock:
    """One thread calling every conflated subscription's release when its held
    deliveries fall due (started on first use; ``close`` stops it)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Release]] = []
        self._changed = threading.Condition(threading.Lock())
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, due: float, release: Release) -> None:
        """Call ``release(now)`` once ``due`` (a ``time.monotonic`` time) has passed; again
        at the time it returns, if any."""
        with self._changed:
            if self._stopped:
                return
            heapq.heappush(self._heap, (due, next(self._numbers), release))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sow-conflation", daemon=True
                )
                self._thread.start()
            if self._heap[0][2] is release:
                self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._stopped = True
            self._heap.clear()
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        heap = self._heap
        while True:
            with self._changed:
                while not self._stopped and (not heap or heap[0][0] > time.monotonic()):
                    wait = None if not heap else heap[0][0] - time.monotonic()
                    self._changed.wait(wait)
                if self._stopped:
                    return
                now = time.monotonic()
                due = []
                while heap and heap[0][0] <= now:
                    due.append(heapq.heappop(heap)[2])
            for release in due:
                following = release(now)
                if following is not None:
                    self.schedule(following, release)
