"""Live paginated subscriptions: a sow_and_subscribe that keeps a window (spec 3.7).

A sow_and_subscribe with ``top_n`` and ``skip_n`` on one literal SOW topic sees the topic
as if only the records of its window existed: the ``top_n`` records after the first
``skip_n`` of the matching records in ``order_by`` order (SowKey order without one; ties
in SowKey order too: the order of the sow query, :func:`sort_key`).

:class:`PaginatedSubscription` keeps the sort keys of every matching record in a sorted
list (a delete or an update above the window shifts records in, so the whole matching set
is needed) and, for each change, compares the window before and after:

* a held record updated inside the window: a publish;
* a record entering the window (inserted, updated into it, shifted in): a publish;
* a held record leaving it: deleted or expired, an OOF ``deleted``/``expired`` (without
  ``oof``: nothing; ``send_deletes``: a delete); pushed out, shifted out or updated out of
  it, an OOF ``match`` carrying its current state (without ``oof``: nothing);

OOFs first, then publishes (spec section 9 item 23). A change below the window's end
costs a bisection and a slice of the window; one past it only the bisection. Ordinary
subscriptions never pay for any of this (this class is only built for a paginated
request).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from processor import changelog
from processor.changelog.events import ChangeEvent, ChangelogPosition, ChangeReason
from processor.errors import DecodeError, EnvelopeError, InvalidRequestError
from processor.expr import Expression, field_getter, order_key
from processor.expr.ast import OrderKey
from processor.expr.clauses import parse_order_by
from processor.messages import Codec
from processor.subscriptions.model import ChangeKind, Notice, SubscribeRequest
from processor.subscriptions.subscription import (
    HoldingQueue,
    Offer,
    Row,
    SharedSender,
    StartVector,
    Subscription,
)

#: A record's place in the order: (one key per OrderBy item, ..., SowKey).
SortKey = tuple[Any, ...]


class Descending:
    """An OrderBy key sorted in descending order (reverses the comparison)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.key == other.key

    def __lt__(self, other: Descending) -> bool:
        return other.key < self.key

    def __hash__(self) -> int:
        return hash(self.key)


def is_paginated(request: SubscribeRequest) -> bool:
    """A sow_and_subscribe with both ``top_n`` and ``skip_n`` (0 included: the first
    page) keeps a live window; with ``top_n`` alone it only limits the query (spec 3.8)."""
    return request.top_n > 0 and request.skip_n is not None


def check_pagination(request: SubscribeRequest, *, with_query: bool) -> tuple[OrderKey, ...]:
    """Validate the pagination options of a request and parse its OrderBy (empty: none).

    Raises InvalidRequestError naming the option: negative values, ``skip_n`` without
    ``top_n``, pagination on a plain subscribe."""
    skip_n = request.skip_n or 0
    if request.top_n < 0 or skip_n < 0:
        raise InvalidRequestError(
            f"top_n and skip_n must not be negative (got top_n={request.top_n}, "
            f"skip_n={request.skip_n})"
        )
    if not with_query and (request.top_n or skip_n or request.order_by.strip()):
        raise InvalidRequestError(
            "top_n, skip_n and order_by need a query: send sow_and_subscribe for a "
            "paginated subscription (subscribe has no result to order or page)"
        )
    if request.skip_n is not None and not request.top_n:
        raise InvalidRequestError(
            f"skip_n ({request.skip_n}) requires top_n: page k of size n is top_n=n, skip_n=n*(k-1)"
        )
    return parse_order_by(request.order_by) if request.order_by.strip() else ()


def check_window_filter(
    request: SubscribeRequest, expression: Expression | None, what: str
) -> None:
    """A paginated or aggregated (``what``) subscription's filter must be deterministic
    (spec 1.17)."""
    if expression is not None and not expression.deterministic:
        raise InvalidRequestError(
            f"the filter {request.filter!r} of {what} {request.sub_id!r} calls a "
            "non-deterministic function (UNIX_TIMESTAMP, LAST_READ, VALUE_LOOKUP): its "
            "records must be recomputable from the SOW; filter on stored fields instead"
        )


def sort_key_function(
    order: tuple[OrderKey, ...], codec: Codec
) -> Callable[[bytes, bytes], SortKey]:
    """(SowKey, envelope) -> the record's place in the sow query's order: each OrderBy
    field through :func:`processor.expr.order_key` (mixed-type order, the TEXT hint,
    NULLs last ascending and first descending), then the SowKey."""
    getters = [(field_getter(key.field.steps), key.text, key.descending) for key in order]

    def sort_key(sow_key: bytes, envelope: bytes) -> SortKey:
        if not getters:
            return (sow_key,)
        try:
            message = codec.decode(changelog.data_of(envelope))
        except (DecodeError, EnvelopeError):
            # The processor only writes messages it decoded; such a record sorts as NULLs.
            message = None
        parts: list[Any] = []
        for get, text, descending in getters:
            value = None if message is None else get(message)
            key = order_key(value, text)
            parts.append(Descending(key) if descending else key)
        parts.append(sow_key)
        return tuple(parts)

    return sort_key


class PaginatedSubscription(Subscription):
    """A sow_and_subscribe keeping a live window (see the module doc). ``focus`` holds
    exactly the window's records."""

    def __init__(
        self,
        request: SubscribeRequest,
        *,
        codec: Codec,
        order: tuple[OrderKey, ...],
        max_backlog: int,
        sender: SharedSender | None = None,
        queue: HoldingQueue | None = None,
    ) -> None:
        super().__init__(
            request, with_query=True, max_backlog=max_backlog, sender=sender, queue=queue
        )
        self._codec = codec
        self._configure(request, order)
        #: SowKey -> (sort key, envelope) of every matching record.
        self._members: dict[bytes, tuple[SortKey, bytes]] = {}
        #: The sort keys of every matching record, in order.
        self._sorted: list[SortKey] = []
        #: The window's envelopes when the subscription started (the query result).
        self.initial: list[bytes] = []

    def _configure(self, request: SubscribeRequest, order: tuple[OrderKey, ...]) -> None:
        self._sort_key = sort_key_function(order, self._codec)
        self._first = request.skip_n or 0
        self._end = self._first + request.top_n

    def _load(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        """Hold ``rows`` ((SowKey, envelope) of every matching record) (lock held)."""
        sort_key = self._sort_key
        self._members = {key: (sort_key(key, envelope), envelope) for key, envelope in rows}
        self._sorted = sorted(place for place, _ in self._members.values())

    def _window(self) -> list[bytes]:
        """The SowKeys in the window, in order (lock held)."""
        return [place[-1] for place in self._sorted[self._first : self._end]]

    def start(self, vector: StartVector, focus: Iterable[tuple[str, bytes, bytes]] = ()) -> None:
        """Start after ``vector``; ``focus`` is every record matching the filter there
        (not only the window's): :attr:`initial` is then the window's query result."""
        topic = self.request.topic
        with self._ready:
            self._load((key, envelope) for _, key, envelope in focus)
            window = self._window()
            self.initial = [self._members[key][1] for key in window]
            self.focus = {(topic, key): self._members[key][1] for key in window}
        super().start(vector)

    def may_hold(self, key: tuple[str, bytes]) -> bool:
        """A change of any matching record may move the window."""
        return not self._settled or key[1] in self._members

    def _accept(self, start: dict[tuple[str, int], int], offers: list[Offer]) -> bool:
        if self.closed is not None:
            return False
        deliveries: list[Notice] = []
        for event, publish in self._past_start(start, offers):
            if event.topic == self.request.topic:
                deliveries += self._move(event, publish)
        return self._queue_all(deliveries)

    def _move(self, event: ChangeEvent, publish: Notice | None) -> list[Notice]:
        """Apply one change to the ordered set; what it means for the window."""
        sow_key = event.sow_key
        members, ordered = self._members, self._sorted
        old_at = new_at = -1
        before = members.pop(sow_key, None)
        if before is not None:
            old_at = bisect.bisect_left(ordered, before[0])
            del ordered[old_at]
        if publish is not None:
            place = self._sort_key(sow_key, publish.envelope)
            new_at = bisect.bisect_left(ordered, place)
            ordered.insert(new_at, place)
            members[sow_key] = (place, publish.envelope)
        end = self._end
        if not (0 <= old_at < end or 0 <= new_at < end):
            return []  # the order changed only past the window
        return self._diff(self._window(), event, publish)

    def _diff(
        self, window: list[bytes], event: ChangeEvent, publish: Notice | None
    ) -> list[Notice]:
        """Deliveries turning the held window into ``window`` (lock held); updates
        ``focus``."""
        topic, position, focus = event.topic, event.position, self.focus
        inside = set(window)
        left: list[Notice] = []
        for key in [k for k in focus if k[1] not in inside]:
            last = focus.pop(key)
            if key[1] == event.sow_key:
                delivery = self._leave_by(event, last)
            else:  # pushed or shifted out: its current state is the one delivered
                delivery = self._leave(key, last, False, position, last)
            if delivery is not None:
                left.append(delivery)
        entered: list[Notice] = []
        for sow_key in window:
            held = focus.get((topic, sow_key))
            if publish is not None and sow_key == event.sow_key:
                envelope = publish.envelope
            elif held is not None:
                continue
            else:
                envelope = self._members[sow_key][1]
            focus[(topic, sow_key)] = envelope
            if self._changed_for_subscriber(held, envelope):
                entered.append(Notice(ChangeKind.PUBLISH, topic, sow_key, envelope, position))
        return left + entered

    def _leave_by(self, event: ChangeEvent, held: bytes) -> Notice | None:
        """The changed record itself left the window: deleted, expired or updated."""
        key = (event.topic, event.sow_key)
        expired = event.reason is ChangeReason.EXPIRE
        return self._leave(key, held, event.new is None, event.position, event.new, expired)

    def reconfigure(self, request: SubscribeRequest, order: tuple[OrderKey, ...]) -> None:
        """A replacing request's window (its pagination options, restated)."""
        with self._ready:
            self._configure(request, order)

    def _rebased(self, rows: list[Row], gone: set[tuple[str, bytes]]) -> list[Notice]:
        """Replace: the new filter's records and window against the held window."""
        self._load((key, envelope) for _, key, envelope, _ in rows)
        positions: dict[bytes, ChangelogPosition] = {key: p for _, key, _, p in rows}
        topic, focus = self.request.topic, self.focus
        window = self._window()
        inside = set(window)
        left = [
            self._leave(key, held, key in gone)
            for key, held in list(focus.items())
            if key[1] not in inside
        ]
        for key in [k for k in focus if k[1] not in inside]:
            del focus[key]
        entered = []
        for sow_key in window:
            envelope = self._members[sow_key][1]
            held = focus.get((topic, sow_key))
            focus[(topic, sow_key)] = envelope
            if self._changed_for_subscriber(held, envelope):
                entered.append(
                    Notice(ChangeKind.PUBLISH, topic, sow_key, envelope, positions[sow_key])
                )
        return [d for d in left if d is not None] + entered
