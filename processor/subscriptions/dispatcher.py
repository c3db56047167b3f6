"""The dispatcher: the live subscriptions' filter groups, and the thread that offers them
each applied unit's changes, in order (:mod:`processor.subscriptions.hub` explains the
whole).

Units arrive from the replica's (and the plain tail's) listener and go to a queue; the
dispatcher thread takes them in order, finds each change's candidate filter groups
(:mod:`processor.subscriptions.fanout`), evaluates each group's filter once, and offers
each subscription its share of the unit in one call. Replace markers travel in the same
queue, so a replace takes effect at its place in the stream.

Thread-safety: ``lock`` guards the groups; :meth:`file` and :meth:`forget` expect it
held, every other method may be called from any thread.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from processor import changelog
from processor.changelog.events import ChangeEvent
from processor.errors import DecodeError, EnvelopeError
from processor.expr import Expression, MessageContext
from processor.messages import Codec
from processor.messages.registry import decode_waiting
from processor.subscriptions.aggregated import AggregationFeed
from processor.subscriptions.fanout import FilterGroup, TopicIndex
from processor.subscriptions.model import ChangeKind, Notice
from processor.subscriptions.plan import SubscriptionPlan
from processor.subscriptions.replacing import ReplaceMarker
from processor.subscriptions.subscription import Offer, Subscription
from processor.subscriptions.window import PaginatedSubscription
from processor.topology.model import Topic

log = logging.getLogger(__name__)

#: How long the dispatcher sleeps when idle before checking for a stop.
IDLE_WAIT_S = 0.1


class Dispatcher:
    """Filter groups of the live subscriptions and the thread that feeds them.

    ``inline`` matches on the caller's thread (the replica's applier) instead of a
    dispatcher thread, for measurements. A replace marker is applied on the dispatcher
    thread at its place in the stream (:meth:`_replace`).
    """

    def __init__(
        self,
        codecs: dict[str, Codec],
        *,
        inline: bool = False,
    ) -> None:
        self.lock = threading.Lock()
        self.inline = inline
        self._codecs = codecs
        self._indexes: dict[str, TopicIndex] = {}
        #: Subscription number -> the (index, group) pairs it is filed under.
        self._filed: dict[int, list[tuple[TopicIndex, FilterGroup]]] = {}
        self._units: collections.deque[Sequence[ChangeEvent] | ReplaceMarker] = collections.deque()
        self._arrived = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        #: Changes dispatched so far, and the CPU time the dispatching took (seconds of
        #: the dispatching thread; for metrics and benchmarks).
        self.dispatched = 0
        #: Aggregations offered changes since the last :meth:`_flush`.
        self._feeds: dict[int, AggregationFeed] = {}
        self.dispatch_cpu_s = 0.0
        self._thread: threading.Thread | None = None
        if not inline:
            self._thread = threading.Thread(target=self._run, name="sow-subscriptions", daemon=True)
            self._thread.start()

    def __len__(self) -> int:
        with self.lock:
            return len(self._filed)

    def queued(self) -> int:
        """Units and markers waiting for the dispatcher thread."""
        return len(self._units)

    def subscriptions(self) -> list[Subscription]:
        """Every filed subscription, once each."""
        with self.lock:
            return self._every()

    def _every(self) -> list[Subscription]:
        found = {
            subscription.number: subscription
            for entries in self._filed.values()
            for _, group in entries
            for subscription in group.subscriptions.values()
        }
        return list(found.values())

    def close(self) -> list[Subscription]:
        """Stop the thread and forget every subscription; return them (to close)."""
        self._stop.set()
        with self._arrived:
            self._arrived.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            subscriptions = self._every()
            self._filed.clear()
            self._indexes.clear()
        return subscriptions

    # -- filing ------------------------------------------------------------------------

    def is_filed(self, subscription: Subscription) -> bool:
        """Whether ``subscription`` is filed (lock held)."""
        return subscription.number in self._filed

    def compiled(self, topics: list[Topic], text: str) -> Expression | None:
        """The filter's expression, shared with a group that has the same text."""
        key = text.strip()
        if not key:
            return None
        with self.lock:
            for topic in topics:
                index = self._indexes.get(topic.name)
                group = None if index is None else index.groups.get(key)
                if group is not None:
                    return group.expression
        from processor.expr import compile as compile_expression

        expression = compile_expression(key)
        # Generate its code now, on the subscriber's thread, not in the dispatcher.
        _ = expression.source
        return expression

    def register(self, subscription: Subscription, plan: SubscriptionPlan) -> None:
        """File a subscription under the filter groups of its plan's topics."""
        with self.lock:
            self.file(subscription, plan)

    def file(self, subscription: Subscription, plan: SubscriptionPlan) -> None:
        """:meth:`register` with the lock held."""
        # Keyed by the filter it runs (the subscriber's, restricted and entitled): two
        # callers with the same filter and different rights are in different groups.
        key, expression = plan.filter_text.strip(), plan.expression
        entries = []
        for topic in plan.topics:
            index = self._indexes.setdefault(topic.name, TopicIndex())
            group = index.group(key, lambda: expression)
            index.subscribe(group, subscription)
            entries.append((index, group))
        self._filed[subscription.number] = entries

    def forget(self, subscription: Subscription) -> None:
        """Remove a subscription from its groups (lock held)."""
        for index, group in self._filed.pop(subscription.number, ()):
            index.unsubscribe(group, subscription)

    def unfile(self, subscription: Subscription) -> None:
        """Take a subscription out of its groups while it stays registered, until
        :meth:`file` puts it in its new ones (a replace; lock held).

        ``on_unit`` drops the units that arrive while nothing is registered: a
        subscription forgotten and filed again would miss the changes applied between.
        """
        for index, group in self._filed.get(subscription.number, ()):
            index.unsubscribe(group, subscription)
        self._filed[subscription.number] = []

    def _replace(self, marker: ReplaceMarker) -> None:
        """Move a subscription to its new filter at the replace's place in the stream."""
        subscription, plan = marker.subscription, marker.plan
        marker.placed.wait()
        if marker.vector is None:
            return  # the read failed: nothing was replaced
        dispatcher = self
        with dispatcher.lock:
            if not dispatcher.is_filed(subscription):
                return  # unsubscribed meanwhile
            dispatcher.unfile(subscription)
            if isinstance(subscription, PaginatedSubscription) and plan.order is not None:
                subscription.reconfigure(plan.request, plan.order)
            if marker.rows is not None:
                # Under the options it had: oof or no_empties given by the replace apply
                # to the changes after it (spec 3.9).
                subscription.rebase(marker.vector, marker.rows, marker.gone)
            subscription.reset(plan.request, plan.unheld)
            subscription.shape = plan.shape
            dispatcher.file(subscription, plan)

    # -- dispatching -------------------------------------------------------------------

    def on_unit(self, events: Sequence[ChangeEvent]) -> None:
        """The replica listener: hand the unit over (or match it here when inline)."""
        if not self._filed:
            # Nothing registered before this unit was applied: no subscription needs it.
            return
        if self.inline:
            self.dispatch(events)
            self._flush()
            return
        with self._arrived:
            self._units.append(events)
            self._arrived.notify()

    def put_marker(self, marker: ReplaceMarker) -> None:
        """Queue a replace marker behind the units queued so far."""
        with self._arrived:
            self._units.append(marker)
            self._arrived.notify()

    def _run(self) -> None:
        units = self._units
        while not self._stop.is_set():
            with self._arrived:
                if not units:
                    self._arrived.wait(IDLE_WAIT_S)
                if not units:
                    continue
                taken = list(units)
                units.clear()
            for events in taken:
                try:
                    if isinstance(events, ReplaceMarker):
                        self._replace(events)
                    else:
                        self.dispatch(events)
                except Exception:  # a bug must not kill the dispatcher thread; logged in full
                    log.exception("dispatching a change to subscriptions failed")
            self._flush()

    def _flush(self) -> None:
        """Let the aggregations offered changes since the last call send their rows."""
        feeds, self._feeds = self._feeds, {}
        if not feeds:
            return
        began = time.thread_time()
        for feed in feeds.values():
            try:
                feed.flush()
            except Exception:  # as above
                log.exception("sending an aggregation's rows failed")
        self.dispatch_cpu_s += time.thread_time() - began

    def dispatch(self, events: Sequence[ChangeEvent]) -> None:
        """Offer a unit's changes to the subscriptions they concern, in one call per
        subscription (one lock hold per subscription per unit, not per change).

        A subscription that does not track its focus gets its group's list of matching
        changes, shared by every such subscription of the group; one that tracks its
        focus gets its own list, which also holds the non-matching changes of records it
        may hold, in order."""
        began = time.thread_time()
        hits: dict[FilterGroup, list[Offer]] = {}
        shares: dict[Subscription, list[Offer]] = {}
        #: (subscription number, topic, SowKey) published to a tracking subscription in
        #: this unit.
        held: set[tuple[int, str, bytes]] = set()
        #: Per topic, whether its filters read the messages (else none is decoded).
        reads: dict[str, bool] = {}
        with self.lock:
            for event in events:
                index = self._indexes.get(event.topic)
                if not index:
                    continue
                reading = reads.get(event.topic)
                if reading is None:
                    reading = reads[event.topic] = index.reads_messages
                codec = self._codecs[event.topic]
                new, old = event.new, event.old
                new_message = None if new is None or not reading else _message(codec, new)
                old_message = (
                    None
                    if old is None or not index.tracking or not reading
                    else _message(codec, old)
                )
                context = functools.partial(_context, new)
                matched, unmatched = index.route(new_message, old_message, context, new is not None)
                if matched:
                    assert new is not None
                    offer: Offer = (
                        event,
                        Notice(ChangeKind.PUBLISH, event.topic, event.sow_key, new, event.position),
                    )
                    for group in matched:
                        listed = hits.get(group)
                        if listed is None:
                            hits[group] = [offer]
                        else:
                            listed.append(offer)
                        if group.tracking:
                            for subscription in group.subscriptions.values():
                                if subscription.tracks_focus:
                                    shares.setdefault(subscription, []).append(offer)
                                    held.add((subscription.number, event.topic, event.sow_key))
                if unmatched:
                    key = (event.topic, event.sow_key)
                    miss: Offer = (event, None)
                    for group in unmatched:
                        for subscription in group.subscriptions.values():
                            # A change that does not match concerns only a subscription
                            # that may hold the record: held before this unit, or given
                            # it earlier in this unit (its focus is updated when the
                            # unit's share is offered).
                            if subscription.may_hold(key) or ((subscription.number, *key) in held):
                                shares.setdefault(subscription, []).append(miss)
                self.dispatched += 1
            closed = []
            for group, listed in hits.items():
                if len(group.subscriptions) == group.tracking:
                    continue
                for subscription in group.subscriptions.values():
                    if not subscription.tracks_focus:
                        subscription.offer_all(listed)
                        if subscription.closed is not None:
                            closed.append(subscription)
            for subscription, share in shares.items():
                subscription.offer_all(share)
                if subscription.closed is not None:
                    closed.append(subscription)
                elif isinstance(subscription, AggregationFeed):
                    self._feeds[subscription.number] = subscription
            for subscription in closed:
                self.forget(subscription)
            self.dispatch_cpu_s += time.thread_time() - began


def _message(codec: Codec, envelope: bytes) -> Any:
    try:
        return decode_waiting(codec.decode, changelog.data_of(envelope))
    except (DecodeError, EnvelopeError):
        # The processor only writes messages it decoded; such a record has no field values.
        return None


def _context(envelope: bytes | None) -> MessageContext | None:
    return None if envelope is None else changelog.decode(envelope).context()
