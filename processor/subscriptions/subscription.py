"""One subscription: where it starts, what it holds, and its bounded send queue.

The dispatcher (:mod:`processor.subscriptions.hub`) calls :meth:`Subscription.offer` with
every change that may concern the subscription, in changelog order per partition, and
whether the change's new state matches the filter. The subscription decides what that
means for its subscriber, from the records it holds ("in focus"):

* new state matches: a publish (unless ``no_empties`` and the message is the one last
  delivered), carrying the state last delivered as ``previous``; the record is now held;
* a held record is deleted or expires: an OOF ``deleted``/``expired`` with the last state
  delivered (``oof``); else nothing, as in AMPS (``send_deletes``: a delete with that
  state);
* a held record is updated so it no longer matches: an OOF ``match`` carrying the new
  state (``oof`` only; see :meth:`Subscription._leave`);
* anything else: nothing.

A subscription starts at a position vector (the next changelog offset per partition):
changes before it are the query result's (or happened before the subscribe) and are
skipped. Until :meth:`start` is called, offered changes are buffered, so it may be
registered with the dispatcher before the position it starts at is known.

A replace (spec 3.12) moves a subscription to another request in place: :meth:`rebase`
compares a re-run query's rows with what it holds, :meth:`reset` takes the new options.
Subclasses decide differently (:mod:`processor.subscriptions.window`); a
:class:`HoldingQueue` may stand in for the send queue, holding deliveries back until the
clock releases them through :meth:`Subscription.release_held`
(:mod:`processor.subscriptions.conflation`).

Thread-safety: ``offer``, ``start`` and ``close`` may run on any thread (the dispatcher,
the request's thread); ``take`` is for the one thread sending to the subscriber.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from processor import changelog
from processor.changelog.events import ChangeEvent, ChangelogPosition, ChangeReason
from processor.errors import SlowConsumerError, SowError
from processor.log import LogPosition
from processor.security import OPEN, RequestContext
from processor.subscriptions.model import ChangeKind, Notice, OofReason, SubscribeRequest
from processor.subscriptions.shape import MessageShape

#: (changelog topic, partition) -> next offset: where a subscription starts.
StartVector = Mapping[tuple[str, int], int]


def start_vector(vector: list[LogPosition]) -> dict[tuple[str, int], int]:
    """A position vector as a subscription's start: (topic, partition) -> offset."""
    return {(topic, partition): offset for topic, partition, offset in vector}


_numbers = itertools.count(1)


#: One change offered to a subscription: the change, and its publish delivery when the
#: change's new state matches the filter (None: it does not, or the record is gone).
Offer = tuple[ChangeEvent, "Notice | None"]

#: A record of a query result: (topic, SowKey, envelope, the position to report with it).
Row = tuple[str, bytes, bytes, ChangelogPosition]


class HoldingQueue(Protocol):
    """A send queue that holds some deliveries back: ``len``, truth and ``popleft`` see
    only those ready to send. Used under its subscription's lock."""

    def __len__(self) -> int: ...

    def __bool__(self) -> bool: ...

    def append(self, delivery: Notice) -> None: ...

    def extend(self, deliveries: Iterable[Notice]) -> None: ...

    def popleft(self) -> Notice: ...

    def clear(self) -> None: ...

    def release(self, now: float) -> float | None:
        """Make the deliveries due by ``now`` ready; the next due time (None: none held)."""
        ...


def _condition() -> threading.Condition:
    return threading.Condition(threading.Lock())


@dataclass(slots=True, eq=False)
class SharedSender:
    """One sender serving many subscriptions (a session): the condition they all notify,
    and the subscriptions with news since the sender last looked (their queue went from
    empty to not empty, or they closed; a subscription may appear more than once). The
    sender takes ``woken`` under ``ready``; a subscription it leaves a backlog in, it
    must put back itself."""

    ready: threading.Condition = field(
        default_factory=lambda: threading.Condition(threading.Lock())
    )
    woken: collections.deque[Subscription] = field(default_factory=collections.deque)


class Subscription:
    """A registered subscription and its queue of deliveries (see the module doc)."""

    aggregated = False  #: its records are aggregated rows (subscriptions.aggregated)

    def __init__(
        self,
        request: SubscribeRequest,
        *,
        with_query: bool,
        max_backlog: int,
        unheld_topics: frozenset[str] = frozenset(),
        sender: SharedSender | None = None,
        queue: HoldingQueue | None = None,
    ) -> None:
        """``queue``: a send queue that holds deliveries back (None: a plain deque)."""
        self.number = next(_numbers)
        self.request = request
        self.with_query = with_query
        self.max_backlog = max_backlog
        #: Whether the subscription remembers what it delivered (needed for OOF,
        #: send_deletes, no_empties, delta, conflation and replace).
        self.tracks_focus = _tracks_focus(request, with_query)
        #: Topics whose messages are never held (plain topics): a matching message is
        #: delivered, nothing else (no OOF, no delete, no no_empties comparison).
        self.unheld_topics = unheld_topics
        #: (topic, SowKey) -> the envelope last delivered for a record in focus.
        self.focus: dict[tuple[str, bytes], bytes] = {}
        self._start: dict[tuple[str, int], int] | None = None
        #: Partitions of the start vector no offered change has reached yet: changes of
        #: a partition are offered in order, so once one is at or past the start, all
        #: later ones are (and need no check). A partition not in the vector (created
        #: after the subscription started) starts at offset 0: nothing to skip.
        self._unreached: set[tuple[str, int]] = set()
        #: True once started and the changes buffered before were handled: from then on
        #: only the dispatcher changes ``focus`` (see :meth:`may_hold`).
        self._settled = False
        self._early: list[Offer] = []
        self._queue: collections.deque[Notice] | HoldingQueue = (
            collections.deque() if queue is None else queue
        )
        self._holding = queue
        #: Guards the queue and is notified when something is queued or it closes;
        #: shared by the subscriptions one sender serves (a session), which also learn
        #: of each other's news through the sender's ``woken``.
        self._woken: collections.deque[Subscription] | None = None
        if sender is None:
            self._ready = _condition()
        else:
            self._ready, self._woken = sender.ready, sender.woken
        self.closed: SowError | None = None
        #: The select list and delta rules its records are sent with (None: as they are).
        self.shape: MessageShape | None = None
        #: The subscriber and its rights (the hub re-plans it when they change).
        self.context: RequestContext = OPEN
        #: Called once, outside the subscription's lock, when it closes with an error.
        self.on_close: list[Callable[[], None]] = []
        self.delivered = 0

    # -- the dispatcher's side -----------------------------------------------------------

    def start(self, vector: StartVector, focus: Iterable[tuple[str, bytes, bytes]] = ()) -> None:
        """Start after ``vector``, holding ``focus`` ((topic, SowKey, envelope) of the
        query result); then handle the changes offered meanwhile.

        The buffered changes are handled under the same lock hold that sets the start,
        so a change the dispatcher offers concurrently waits for them: deliveries stay
        in changelog order."""
        with self._ready:
            if self.tracks_focus:
                self.focus.update(((t, k), e) for t, k, e in focus)
            start = self._start = dict(vector)
            self._unreached = set(start)
            early, self._early = self._early, []
            overflow = self._accept(start, early)
            self._settled = True
        if overflow:
            self._run_close_callbacks()

    def start_vector(self) -> list[tuple[str, int, int]]:
        """The position vector the subscription starts after (empty before ``start``)."""
        with self._ready:
            start = self._start or {}
            return [(topic, partition, offset) for (topic, partition), offset in start.items()]

    def may_hold(self, key: tuple[str, bytes]) -> bool:
        """Whether a change of record ``key`` that does not match the filter may concern
        this subscription: it tracks its focus and holds the record, or has not settled
        yet. Read without the lock, on the dispatcher's thread only: once settled, only
        that thread changes ``focus``."""
        return (
            self.tracks_focus
            and key[0] not in self.unheld_topics
            and (not self._settled or key in self.focus)
        )

    def offer(self, event: ChangeEvent, matched: bool) -> None:
        """One change of a topic this subscription covers; ``matched``: its new state
        matches the filter (see :meth:`offer_all`)."""
        publish = None
        if matched and event.new is not None:
            publish = Notice(
                ChangeKind.PUBLISH, event.topic, event.sow_key, event.new, event.position
            )
        self.offer_all([(event, publish)])

    def offer_all(self, offers: list[Offer]) -> None:
        """Changes of topics this subscription covers, in changelog order per partition.
        Never blocks: a full queue closes the subscription."""
        with self._ready:
            start = self._start
            if start is None:
                if self.closed is None:
                    self._early += offers
                return
            overflow = self._accept(start, offers)
        if overflow:
            self._run_close_callbacks()

    def _accept(self, start: dict[tuple[str, int], int], offers: list[Offer]) -> bool:
        """Queue what the changes mean for the subscriber, who starts after ``start``
        (lock held); True when the queue overflowed and the subscription closed."""
        if self.closed is not None:
            return False
        queue = self._queue
        before = len(queue)
        if (
            not self.tracks_focus
            and not self._unreached
            and before + len(offers) <= self.max_backlog
        ):
            # Past the start on every partition, nothing to remember: every matching
            # change is delivered as it is.
            queue.extend(publish for _, publish in offers if publish is not None)
            if len(queue) != before:
                self._wake(before == 0)
            return False
        return self._queue_all(self._decided(start, offers))

    def _decided(self, start: dict[tuple[str, int], int], offers: list[Offer]) -> Iterator[Notice]:
        """What the offered changes past ``start`` mean for the subscriber (lock held)."""
        for event, publish in self._past_start(start, offers):
            delivery = self._decide(event, publish)
            if delivery is not None:
                yield delivery

    def _past_start(
        self, start: dict[tuple[str, int], int], offers: list[Offer]
    ) -> Iterator[Offer]:
        """The offers at or past the start of their partition (lock held)."""
        unreached = self._unreached
        for offer in offers:
            if unreached:
                changelog_topic, partition, offset = offer[0].position
                if offset < start.get((changelog_topic, partition), 0):
                    continue
                unreached.discard((changelog_topic, partition))
            yield offer

    def _overflow(self, behind: int) -> None:
        """Close as a slow consumer ``behind`` messages behind (lock held); the caller
        runs the close callbacks once the lock is released."""
        self.closed = SlowConsumerError(
            f"slow consumer: {behind} messages behind (the subscription's backlog "
            f"limit is {self.max_backlog}); subscription {self.request.sub_id!r} on "
            f"{self.request.topic!r} is closed: read faster, raise max_backlog, or "
            "sow_and_subscribe again to resynchronise"
        )
        self._queue.clear()
        self.focus.clear()
        self._wake()

    def _queue_all(self, deliveries: Iterable[Notice]) -> bool:
        """Queue deliveries (lock held), waking the sender; True when the queue
        overflowed and the subscription closed."""
        queue = self._queue
        before = len(queue)
        for delivery in deliveries:
            if len(queue) >= self.max_backlog:
                self._overflow(len(queue) + 1)
                return True
            queue.append(delivery)
        if len(queue) != before:
            self._wake(before == 0)
        return False

    def _wake(self, news: bool = True) -> None:
        """Tell the sender (lock held): ``news`` is True when the queue was empty or the
        subscription closed, which a shared sender learns through ``woken``."""
        if news and self._woken is not None:
            self._woken.append(self)
        self._ready.notify()

    def _decide(self, event: ChangeEvent, publish: Notice | None) -> Notice | None:
        if not self.tracks_focus or event.topic in self.unheld_topics:
            return publish
        key = (event.topic, event.sow_key)
        held = self.focus.get(key)
        if publish is not None:
            self.focus[key] = publish.envelope
            if (
                self.request.no_empties
                and held is not None
                and changelog.data_of(held) == changelog.data_of(publish.envelope)
            ):
                return None
            if held is not None:
                return dataclasses.replace(publish, previous=held)
            return publish
        if held is None:
            return None
        del self.focus[key]
        expired = event.reason is ChangeReason.EXPIRE
        return self._leave(key, held, event.new is None, event.position, event.new, expired)

    # -- replace (spec 3.12) ---------------------------------------------------------------

    def focus_keys(self) -> list[tuple[str, bytes]]:
        """The records in focus now (a copy)."""
        with self._ready:
            return list(self.focus)

    def reset(self, request: SubscribeRequest, unheld_topics: frozenset[str]) -> None:
        """Take a replacing request (out of its filter groups, on the dispatcher's thread
        at the replace's place, after :meth:`rebase`): it applies from the next change."""
        with self._ready:
            self.request = request
            self.max_backlog = request.max_backlog or self.max_backlog
            self.unheld_topics = unheld_topics
            self.tracks_focus = _tracks_focus(request, self.with_query)

    def rebase(self, vector: StartVector, rows: list[Row], gone: set[tuple[str, bytes]]) -> None:
        """Re-run a sow_and_subscribe's query for a replace, under the options it had
        (spec 3.12; :meth:`reset` follows): ``rows``
        are the records matching the new filter at ``vector``; ``gone`` the held records
        that no longer existed there. Queues an OOF (``oof``: reason ``deleted`` for a
        gone record, else ``match``) or, for a gone record without ``oof``, a delete, for
        each held record not among the rows; then a publish for each row not held, or
        held in an older state (what the subscriber would otherwise miss). Holds exactly
        the rows from then on and skips changes before ``vector``, which they reflect."""
        with self._ready:
            if self.closed is not None or self._start is None:
                return
            deliveries = self._rebased(rows, gone)
            self._start = dict(vector)
            self._unreached = set(self._start)
            overflow = self._queue_all(deliveries)
        if overflow:
            self._run_close_callbacks()

    def _rebased(self, rows: list[Row], gone: set[tuple[str, bytes]]) -> list[Notice]:
        """The deliveries of :meth:`rebase` (lock held); updates ``focus``."""
        new = {(topic, key): (envelope, position) for topic, key, envelope, position in rows}
        left = [
            self._leave(key, held, key in gone)
            for key, held in self.focus.items()
            if key not in new
        ]
        entered = [
            Notice(ChangeKind.PUBLISH, topic, key, envelope, position)
            for (topic, key), (envelope, position) in new.items()
            if self._changed_for_subscriber(self.focus.get((topic, key)), envelope)
        ]
        self.focus = {key: envelope for key, (envelope, _) in new.items()}
        return [d for d in left if d is not None] + entered

    def _changed_for_subscriber(self, held: bytes | None, envelope: bytes) -> bool:
        """Whether a record the subscriber holds as ``held`` must be sent as ``envelope``."""
        if held is None:
            return True
        if held == envelope:
            return False
        return not (
            self.request.no_empties and changelog.data_of(held) == changelog.data_of(envelope)
        )

    def _leave(
        self,
        key: tuple[str, bytes],
        held: bytes,
        gone: bool,
        position: ChangelogPosition | None = None,
        current: bytes | None = None,
        expired: bool = False,
    ) -> Notice | None:
        """What a held record leaving the focus means for the subscriber (spec 3.9): with
        ``oof``, an OOF: ``deleted``/``expired`` (``gone``) carrying ``held``, the last
        state delivered, or ``match`` carrying ``current``, its state now (``held`` when
        not known; ``oof_last_received``: ``held``, with ``current`` beside it). Without
        ``oof``, nothing (``send_deletes``: a delete of a gone record). Under entitlements
        a ``match`` OOF carries ``held`` alone: the new state may be outside them."""
        topic, sow_key = key
        where = position or (topic, -1, -1)
        request = self.request
        if request.oof:
            if gone:
                reason = OofReason.EXPIRED if expired else OofReason.DELETED
                return Notice(ChangeKind.OOF, topic, sow_key, held, where, reason, previous=held)
            if self.context.rights.restricted:  # it may have left the caller's rights:
                current = None  # the new state is never sent, only the last received
            if request.oof_last_received or current is None:
                return Notice(
                    ChangeKind.OOF, topic, sow_key, held, where, OofReason.MATCH, current, held
                )
            return Notice(
                ChangeKind.OOF, topic, sow_key, current, where, OofReason.MATCH, previous=held
            )
        if gone and request.send_deletes:
            return Notice(ChangeKind.DELETE, topic, sow_key, held, where, previous=held)
        return None

    def release_held(self, now: float) -> float | None:
        """Move the held deliveries due by ``now`` to the sender (the conflation clock's
        call, on its thread); the next due time, or None when nothing is held."""
        holding = self._holding
        if holding is None:
            return None
        overflow = False
        with self._ready:
            if self.closed is not None:
                holding.clear()
                return None
            before = len(holding)
            following = holding.release(now)
            if len(holding) > self.max_backlog:
                self._overflow(len(holding))
                overflow = True
            elif len(holding) != before:
                self._wake(before == 0)
        if overflow:
            self._run_close_callbacks()
        return following

    def close(self, error: SowError | None = None) -> None:
        """Stop delivering (idempotent); ``error`` (None: the subscriber left) is what
        :meth:`take` raises from now on."""
        with self._ready:
            if self.closed is not None:
                return
            self.closed = error or SowError("the subscription was cancelled")
            self._queue.clear()
            self.focus.clear()
            self._early.clear()
            if self._woken is not None:
                self._woken.append(self)
            self._ready.notify_all()
        if error is not None:
            self._run_close_callbacks()

    def _run_close_callbacks(self) -> None:
        for callback in self.on_close:
            callback()

    # -- the sender's side ---------------------------------------------------------------

    def take(self, most: int, timeout_s: float) -> list[Notice]:
        """Up to ``most`` queued deliveries, waiting up to ``timeout_s`` for the first
        (an empty list when none came); raises the closing error once closed."""
        with self._ready:
            if not self._queue and self.closed is None:
                self._ready.wait(timeout_s)
            if self.closed is not None:
                raise self.closed
            queue = self._queue
            count = min(most, len(queue))
            taken = [queue.popleft() for _ in range(count)]
            self.delivered += count
            return taken

    def has_backlog(self) -> bool:
        """Whether deliveries wait, read without the lock: a hint for a sender that polls
        many subscriptions (exact only on the dispatcher's thread)."""
        return bool(self._queue)

    def backlog(self) -> int:
        """How many deliveries wait for the subscriber."""
        with self._ready:
            return len(self._queue)


def _tracks_focus(request: SubscribeRequest, with_query: bool) -> bool:
    """Whether a subscription must remember what it delivered: for OOFs, deletes,
    no_empties, deltas and conflation, and a sow_and_subscribe for a replace's diff."""
    return (
        request.oof
        or with_query
        or request.no_empties
        or request.delta
        or request.send_deletes
        or bool(request.conflation.strip())
    )
