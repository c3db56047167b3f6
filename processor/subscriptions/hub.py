"""The subscription hub: registers subscriptions and dispatches the replica's changes.

One replica listener serves every subscription. It only hands each applied unit's
events to a queue; a dispatcher thread takes them from there in order, finds each
change's candidate filter groups (:mod:`processor.subscriptions.fanout`), evaluates each
group's filter once (a range family's expression once for all its groups), and offers
each subscription its share of the unit in one call; the bounded queues never block it.
So neither the replica's applier nor other subscribers wait for a slow subscriber: its
queue fills, and it is closed with a :class:`~processor.errors.SlowConsumerError`.

No gap, no duplicate: a subscription is registered with the dispatcher under the
replica's lock, in the same critical section as its query (or, for subscribe, as the
reading of the position vector), and starts at that vector: every change applied after
it reaches the subscription, and changes before it are skipped by position (see
:class:`~processor.subscriptions.subscription.Subscription`).

Plain topics (no SOW) come from a :class:`~processor.query.plain_tail.PlainTail`, whose
events the hub handles like the replica's: a subscription covering plain topics is
registered under the tail's lock as well (taken inside the replica's), and its vector
holds their input positions too. A sow_and_subscribe has no records to return for them,
and a subscription to plain topics only holds no records (no OOF, no deletes: a message
that does not match is simply not delivered).

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from processor import changelog
from processor.errors import (
    CatchingUpError,
    InvalidRequestError,
    TooManySubscriptionsError,
    UnsupportedError,
)
from processor.expr import Expression, MessageContext
from processor.messages import Codec, codec_for
from processor.query.bookmarks import parse_bookmark
from processor.query.events import ChangeEvent, ListenerHandle
from processor.query.plain_tail import PlainTail
from processor.query.replica import LogPosition, Replica
from processor.query.sow import DEFAULT_TIMEOUT_S, QueryEngine, QueryStats, SowQuery, memo_fields
from processor.query.sow import select as select_records
from processor.query.table import SowTable
from processor.query.topics import resolve_subscribed_topics
from processor.subscriptions.fanout import FilterGroup, TopicIndex
from processor.subscriptions.historical import open_historical
from processor.subscriptions.model import (
    DEFAULT_MAX_BACKLOG,
    MAX_MAX_BACKLOG,
    ChangeKind,
    Delivery,
    SubscribeRequest,
)
from processor.subscriptions.replay import Replay, open_replay
from processor.subscriptions.subscription import Offer, SharedSender, Subscription
from processor.topology.model import PlainTopic, SowTopic, Topology

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Subscriptions one hub serves at most.
MAX_SUBSCRIPTIONS = 10_000
#: How long the dispatcher sleeps when idle before checking for a stop.
IDLE_WAIT_S = 0.1


@dataclass(slots=True)
class QueryPhase:
    """The query result of a sow_and_subscribe: batches of envelopes, the position
    vector they reflect (the subscription starts right after it), and the counts."""

    snapshot: list[LogPosition]
    batches: list[list[changelog.Envelope]]
    stats: QueryStats
    #: A historical sow_and_subscribe's replay, to send after the query result.
    replay: Replay | None = None


class SubscriptionHub:
    """Subscriptions of one query service (see the module doc).

    ``inline`` runs the matching on the replica's applier thread instead of the
    dispatcher thread (for measurements: it delays the applier by the matching time).
    ``plain`` feeds the plain topics' messages (None: subscribing to a plain topic is
    refused).
    """

    def __init__(
        self,
        topology: Topology,
        replica: Replica,
        engine: QueryEngine,
        *,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        inline: bool = False,
        plain: PlainTail | None = None,
    ) -> None:
        self.topology = topology
        self.replica = replica
        self.plain = plain
        self.engine = engine
        self.max_subscriptions = max_subscriptions
        self._lock = threading.Lock()
        self._indexes: dict[str, TopicIndex] = {}
        self._codecs: dict[str, Codec] = {t.name: codec_for(t) for t in topology.every_topic()}
        self._subscriptions: dict[int, list[tuple[TopicIndex, FilterGroup]]] = {}
        self._units: collections.deque[Sequence[ChangeEvent]] = collections.deque()
        self._arrived = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._inline = inline
        self._thread: threading.Thread | None = None
        if not inline:
            self._thread = threading.Thread(target=self._run, name="sow-subscriptions", daemon=True)
            self._thread.start()
        self._listener: ListenerHandle = replica.listen(self._on_unit)
        self._plain_listener = None if plain is None else plain.listen(self._on_unit)
        #: Changes dispatched so far, and the CPU time the dispatching took (seconds of
        #: the dispatching thread; for metrics and benchmarks).
        self.dispatched = 0
        self.dispatch_cpu_s = 0.0

    def close(self) -> None:
        """Stop listening and dispatching; open subscriptions are closed."""
        self._listener.close()
        if self._plain_listener is not None:
            self._plain_listener.close()
        self._stop.set()
        with self._arrived:
            self._arrived.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            subscriptions = {
                number: subscription
                for index in self._indexes.values()
                for group in index.groups.values()
                for number, subscription in group.subscriptions.items()
            }
            self._subscriptions.clear()
            self._indexes.clear()
        for subscription in subscriptions.values():
            subscription.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    # -- subscribing ---------------------------------------------------------------------

    def subscribe(
        self, request: SubscribeRequest, sender: SharedSender | None = None
    ) -> Subscription:
        """Register a live subscription: every matching change applied from now on.
        ``sender``: one sender serving this subscription among others (a session;
        default: a sender of its own)."""
        if not parse_bookmark(request.bookmark).now:
            raise InvalidRequestError("a bookmark subscription is opened with subscribe_replaying")
        topics, expression = self._validate(request)
        subscription = _subscription(request, topics, with_query=False, sender=sender)

        def register(_: list[SowTable]) -> None:
            self._register(subscription, topics, request.filter, expression)

        _, vector = self._read(topics, register)
        subscription.start(_start_vector(vector))
        return subscription

    def subscribe_replaying(
        self, request: SubscribeRequest, sender: SharedSender | None = None
    ) -> tuple[Subscription, Replay]:
        """subscribe with a bookmark: the subscription, registered (buffering), and its
        replay, which starts it (:mod:`processor.subscriptions.replay`)."""
        bookmark = parse_bookmark(request.bookmark)
        topics, expression = self._validate(request)
        subscription = _subscription(request, topics, with_query=False, sender=sender)

        def register(_: list[SowTable]) -> None:
            self._register(subscription, topics, request.filter, expression)

        _, vector = self._read(topics, register)
        try:
            replay = open_replay(
                self.replica,
                subscription,
                bookmark,
                topics,
                expression,
                self._codecs,
                vector,
                close=lambda: self.unsubscribe(subscription),
            )
        except BaseException:
            self.unsubscribe(subscription)
            raise
        return subscription, replay

    def sow_and_subscribe(
        self, request: SubscribeRequest, sender: SharedSender | None = None
    ) -> tuple[Subscription, QueryPhase]:
        """Query the SOW and subscribe at the same position: the result, then (through
        the subscription) every later matching change, with no gap and no duplicate.
        ``sender`` as for :meth:`subscribe`."""
        topics, expression = self._validate(request)
        if all(isinstance(t, PlainTopic) for t in topics):
            return self._subscribe_without_sow(request, topics, expression, sender)
        bookmark = parse_bookmark(request.bookmark)
        # Spec 3.13: on topics without History the bookmark is ignored.
        if not bookmark.now and any(t.history is not None for t in topics):
            subscription = _subscription(request, topics, with_query=True, sender=sender)
            vector, batches, stats, replay = open_historical(
                self.engine,
                subscription,
                topics,
                expression,
                self._codecs,
                register=lambda: self._register(subscription, topics, request.filter, expression),
                close=lambda: self.unsubscribe(subscription),
            )
            return subscription, QueryPhase(vector, batches, stats, replay)
        prepared = self.engine.prepare(
            SowQuery(
                topic=request.topic,
                filter=request.filter,
                batch_size=request.batch_size,
                query_id=request.query_id,
            )
        )
        started = time.perf_counter()
        fields = memo_fields(prepared)
        if fields:
            for topic in prepared.topics:
                self.replica.build_memo_indexes(topic, fields)
        subscription = _subscription(request, topics, with_query=True, sender=sender)

        def query_and_register(tables: list[SowTable]) -> Any:
            selection = select_records(prepared, tables)
            self._register(subscription, topics, request.filter, expression)
            return selection

        selection, vector = self._read(
            [*prepared.topics, *(t for t in topics if isinstance(t, PlainTopic))],
            query_and_register,
        )
        envelopes = [changelog.decode(envelope) for _, envelope in selection.rows]
        subscription.start(
            _start_vector(vector),
            (
                (topic, e.sow_key.encode(), raw)
                for (topic, raw), e in zip(selection.rows, envelopes, strict=True)
            ),
        )
        size = prepared.batch_size
        stats = QueryStats(
            topic_matches=selection.examined,
            matches=selection.matches,
            records_returned=len(envelopes),
            elapsed_us=int((time.perf_counter() - started) * 1e6),
            plan="; ".join(selection.plans),
        )
        batches = [envelopes[i : i + size] for i in range(0, len(envelopes), size)]
        return subscription, QueryPhase(vector, batches, stats)

    def _subscribe_without_sow(
        self,
        request: SubscribeRequest,
        topics: list[SowTopic],
        expression: Expression | None,
        sender: SharedSender | None,
    ) -> tuple[Subscription, QueryPhase]:
        """sow_and_subscribe on plain topics only: an empty query result at the tail's
        position, then the live messages."""
        started = time.perf_counter()
        subscription = _subscription(request, topics, with_query=True, sender=sender)

        def register(_: list[SowTable]) -> None:
            self._register(subscription, topics, request.filter, expression)

        _, vector = self._read(topics, register)
        subscription.start(_start_vector(vector))
        elapsed_us = int((time.perf_counter() - started) * 1e6)
        stats = QueryStats(0, 0, 0, elapsed_us, "no SOW: live messages only")
        return subscription, QueryPhase(vector, [], stats)

    def _read(
        self, topics: Sequence[SowTopic], reader: Callable[[list[SowTable]], T]
    ) -> tuple[T, list[LogPosition]]:
        """Run ``reader`` over the SOW topics' tables under the replica's lock and, when
        plain topics are among ``topics``, the plain tail's lock too; return its result
        and the position vector of every topic (SOW topics first)."""
        sow = [t for t in topics if not isinstance(t, PlainTopic)]
        plain = [t for t in topics if isinstance(t, PlainTopic)]
        if not plain:
            return self.replica.read(sow, reader)
        tail = self.plain
        assert tail is not None  # _validate refuses plain topics without a tail
        plain_vector: list[LogPosition] = []

        def read_both(tables: list[SowTable]) -> T:
            result, vector = tail.read(plain, lambda: reader(tables))
            plain_vector.extend(vector)
            return result

        result, vector = self.replica.read(sow, read_both)
        return result, vector + plain_vector

    def unsubscribe(self, subscription: Subscription) -> None:
        """Close a subscription and forget it (idempotent)."""
        subscription.close()
        with self._lock:
            self._forget(subscription)

    def _validate(self, request: SubscribeRequest) -> tuple[list[SowTopic], Expression | None]:
        _refuse_unbuilt(request)
        topics = resolve_subscribed_topics(self.topology, request.topic)
        if request.max_backlog < 0 or request.max_backlog > MAX_MAX_BACKLOG:
            raise InvalidRequestError(
                f"max_backlog {request.max_backlog} is out of range: use 1 to "
                f"{MAX_MAX_BACKLOG} (0 means the default, {DEFAULT_MAX_BACKLOG})"
            )
        expression = self._compiled(topics, request.filter)
        plain = [t.name for t in topics if isinstance(t, PlainTopic)]
        if plain and self.plain is None:
            raise InvalidRequestError(
                f"topics {', '.join(plain)} have no SOW and this query service does not "
                "follow plain topics; subscribe through a service that does"
            )
        if plain and self.plain is not None and not self.plain.wait_ready(DEFAULT_TIMEOUT_S):
            raise CatchingUpError(
                f"the ends of plain topics {', '.join(plain)} were not fetched within "
                f"{DEFAULT_TIMEOUT_S:g}s; subscribe again shortly"
            )
        waits = len(plain) < len(topics)  # SOW topics: the replica must be caught up
        if (
            waits
            and not self.replica.caught_up()
            and not self.replica.wait_caught_up(DEFAULT_TIMEOUT_S)
        ):
            raise CatchingUpError(
                f"not caught up within {DEFAULT_TIMEOUT_S:g}s: "
                f"{self.replica.catch_up_status()}; subscribe again shortly"
            )
        with self._lock:
            if len(self._subscriptions) >= self.max_subscriptions:
                raise TooManySubscriptionsError(
                    f"this query service already serves {self.max_subscriptions} "
                    "subscriptions; subscribe to another query-service replica or retry later"
                )
        return topics, expression

    def _compiled(self, topics: list[SowTopic], text: str) -> Expression | None:
        """The filter's expression, shared with a group that has the same text."""
        key = text.strip()
        if not key:
            return None
        with self._lock:
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

    def _register(
        self,
        subscription: Subscription,
        topics: list[SowTopic],
        text: str,
        expression: Expression | None,
    ) -> None:
        """File a subscription under its topics' filter groups (under the replica's lock)."""
        key = text.strip()
        entries = []
        with self._lock:
            for topic in topics:
                index = self._indexes.setdefault(topic.name, TopicIndex())
                group = index.group(key, lambda: expression)
                index.subscribe(group, subscription)
                entries.append((index, group))
            self._subscriptions[subscription.number] = entries

    def _forget(self, subscription: Subscription) -> None:
        """Remove a subscription from its groups (hub lock held)."""
        for index, group in self._subscriptions.pop(subscription.number, ()):
            index.unsubscribe(group, subscription)

    # -- dispatching ---------------------------------------------------------------------

    def _on_unit(self, events: Sequence[ChangeEvent]) -> None:
        """The replica listener: hand the unit over (or match it here when inline)."""
        if not self._subscriptions:
            # Nothing registered before this unit was applied: no subscription needs it.
            return
        if self._inline:
            self._dispatch(events)
            return
        with self._arrived:
            self._units.append(events)
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
                    self._dispatch(events)
                except Exception:
                    log.exception("dispatching a change to subscriptions failed")

    def _dispatch(self, events: Sequence[ChangeEvent]) -> None:
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
        with self._lock:
            for event in events:
                index = self._indexes.get(event.topic)
                if not index:
                    continue
                codec = self._codecs[event.topic]
                new, old = event.new, event.old
                new_message = None if new is None else _message(codec, new)
                old_message = None if old is None or not index.tracking else _message(codec, old)
                context = functools.partial(_context, new)
                matched, unmatched = index.route(new_message, old_message, context, new is not None)
                if matched:
                    assert new is not None
                    offer: Offer = (
                        event,
                        Delivery(
                            ChangeKind.PUBLISH, event.topic, event.sow_key, new, event.position
                        ),
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
            for subscription in closed:
                self._forget(subscription)
            self.dispatch_cpu_s += time.thread_time() - began


#: Subscription options whose feature is still being built: refused, never ignored.
_UNBUILT = (
    "delta",
    "select",
    "top_n",
    "skip_n",
    "order_by",
    "replace",
    "conflation",
    "conflation_key",
)


def _refuse_unbuilt(request: SubscribeRequest) -> None:
    given = [name for name in _UNBUILT if getattr(request, name)]
    if given:
        raise UnsupportedError(
            f"subscription option {', '.join(given)} is not supported by this query "
            "service yet; subscribe without it"
        )


def _message(codec: Codec, envelope: bytes) -> Any:
    try:
        return codec.decode(changelog.data_of(envelope))
    except Exception:
        # The processor only writes messages it decoded; such a record has no field values.
        return None


def _context(envelope: bytes | None) -> MessageContext | None:
    return None if envelope is None else changelog.decode(envelope).context()


def _subscription(
    request: SubscribeRequest,
    topics: Sequence[SowTopic],
    *,
    with_query: bool,
    sender: SharedSender | None = None,
) -> Subscription:
    """A subscription for ``request``; one to plain topics only holds no records, so it
    gets neither OOF notifications nor deletes (a plain topic's messages are not records
    that change); one to both kinds holds only the SOW topics' records."""
    if all(isinstance(t, PlainTopic) for t in topics):
        request, with_query = replace(request, oof=False, no_empties=False), False
    return Subscription(
        request,
        with_query=with_query,
        max_backlog=request.max_backlog or DEFAULT_MAX_BACKLOG,
        unheld_topics=frozenset(t.name for t in topics if isinstance(t, PlainTopic)),
        sender=sender,
    )


def _start_vector(vector: list[LogPosition]) -> dict[tuple[str, int], int]:
    return {(topic, partition): offset for topic, partition, offset in vector}
