"""The subscription hub: registers subscriptions and dispatches the replica's changes.

One replica listener serves every subscription. It only hands each applied unit's
events to a queue; a dispatcher thread (:mod:`processor.subscriptions.dispatcher`) takes
them in order, finds each change's candidate filter groups (:mod:`.fanout`), evaluates
each group's filter once (a range family's once for all its groups), and offers each
subscription its share of the unit in one call; the bounded queues never block it.
So neither the replica's applier nor other subscribers wait for a slow subscriber: its
queue fills, and it is closed with a :class:`~processor.errors.SlowConsumerError`.

No gap, no duplicate: a subscription is registered with the dispatcher under the
replica's lock, in the same critical section as its query (or, for subscribe, as the
reading of the position vector), and starts at that vector: every change applied after
it reaches the subscription, and changes before it are skipped by position (see
:class:`~processor.subscriptions.subscription.Subscription`).

Plain topics (no SOW) come from a :class:`~processor.replica.plain_tail.PlainTail`, whose
events the hub handles like the replica's: a subscription covering plain topics is
registered under the tail's lock as well (taken inside the replica's), and its vector
holds their input positions too. A subscription to plain topics only holds no records
(no query result, no OOF, no deletes: a message that does not match is not delivered).

Subscription features: a sow_and_subscribe with ``top_n`` and ``skip_n`` gets a
:class:`~processor.subscriptions.window.PaginatedSubscription` (a live window); a
``conflation`` interval puts a :class:`~processor.subscriptions.conflation.
ConflatingQueue` between a subscription and its sender (one clock thread per hub);
:meth:`SubscriptionHub.replace` changes a live subscription in place through a marker in
the dispatcher's queue (:mod:`processor.subscriptions.replacing`).

Every public method may be called from any thread. A subscription's filter holds its
subscriber's entitlement filter (:mod:`processor.subscriptions.rights`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from processor import changelog
from processor.changelog.events import ListenerHandle
from processor.errors import (
    InvalidRequestError,
    UnsupportedError,
)
from processor.log import LogPosition
from processor.messages import Codec, codec_for
from processor.query.sow import (
    PreparedQuery,
    QueryEngine,
    QueryStats,
    SowQuery,
    batched,
    memo_fields,
)
from processor.query.sow import select as select_records
from processor.replica.plain_tail import PlainTail
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.security import OPEN, RequestContext
from processor.subscriptions.aggregated import (
    AggregationFeed,
    Aggregations,
)
from processor.subscriptions.conflation import ConflatingQueue, ConflationClock
from processor.subscriptions.dispatcher import Dispatcher
from processor.subscriptions.model import SubscribeRequest
from processor.subscriptions.plan import (
    SubscriptionPlan,
    admit,
    plan_subscription,
    refuse_with_replay,
)
from processor.subscriptions.replacing import ReplaceMarker, check_replace, row_position
from processor.subscriptions.replay import Replay, open_historical, open_replay
from processor.subscriptions.subscription import (
    Row,
    SharedSender,
    Subscription,
    start_vector,
)
from processor.subscriptions.window import PaginatedSubscription
from processor.topology.model import PlainTopic, SowTopic, Topic, Topology
from processor.topology.topics import resolve_subscribed_topics

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Subscriptions one hub serves at most.
MAX_SUBSCRIPTIONS = 10_000


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
        self.topology, self.replica, self.plain, self.engine = topology, replica, plain, engine
        self.max_subscriptions = max_subscriptions
        self._codecs: dict[str, Codec] = {t.name: codec_for(t) for t in topology.every_topic()}
        self._clock = ConflationClock()
        self._dispatcher = Dispatcher(self._codecs, inline=inline)
        self._listener: ListenerHandle = replica.listen(self._dispatcher.on_unit)
        self._plain_listener = None if plain is None else plain.listen(self._dispatcher.on_unit)
        self._aggregations = Aggregations(self._forget)

    @property
    def dispatched(self) -> int:
        """Changes dispatched so far (metrics, benchmarks)."""
        return self._dispatcher.dispatched

    @property
    def dispatch_cpu_s(self) -> float:
        """CPU seconds the dispatching took so far (metrics, benchmarks)."""
        return self._dispatcher.dispatch_cpu_s

    def subscriptions(self) -> list[Subscription]:
        """Every subscriber's subscription (an aggregation's shared feed is not one)."""
        filed = self._dispatcher.subscriptions()
        subscribers = [s for s in filed if not isinstance(s, AggregationFeed)]
        return subscribers + list(self._aggregations.members())

    def queued(self) -> int:
        """Units and replace markers waiting for the dispatcher."""
        return self._dispatcher.queued()

    def close(self) -> None:
        """Stop listening and dispatching; open subscriptions are closed."""
        self._listener.close()
        if self._plain_listener is not None:
            self._plain_listener.close()
        subscriptions = self._dispatcher.close() + self._aggregations.members()
        self._clock.close()
        for subscription in subscriptions:
            subscription.close()

    def __len__(self) -> int:
        return len(self.subscriptions())

    def backlog(self) -> int:
        """Messages waiting for subscribers, summed over the live subscriptions."""
        return sum(subscription.backlog() for subscription in self.subscriptions())

    # -- subscribing ---------------------------------------------------------------------

    def plan(
        self,
        request: SubscribeRequest,
        *,
        with_query: bool,
        replacing: bool = False,
        context: RequestContext = OPEN,
    ) -> SubscriptionPlan:
        """``request`` parsed and validated (:mod:`processor.subscriptions.plan`), for
        the caller of ``context`` (its entitlement filter)."""
        return plan_subscription(
            request,
            with_query=with_query,
            topology=self.topology,
            codecs=self._codecs,
            compile_filter=self._dispatcher.compiled,
            replacing=replacing,
            context=context,
        )

    def subscribe(
        self,
        request: SubscribeRequest,
        sender: SharedSender | None = None,
        context: RequestContext = OPEN,
    ) -> Subscription:
        """Register a live subscription: every matching change applied from now on.
        ``sender``: one sender serving this subscription among others (a session;
        default: a sender of its own); ``context``: the caller (its entitlements)."""
        plan = self._admit(self.plan(request, with_query=False, context=context))
        if plan.replaying:
            raise InvalidRequestError("a bookmark subscription is opened with subscribe_replaying")
        if plan.aggregation is not None:
            return self._join_aggregation(plan, sender)[0]
        subscription = self._subscription(plan, sender)
        _, vector = self._read(plan.topics, lambda _: self._register(subscription, plan))
        subscription.start(start_vector(vector))
        return subscription

    def subscribe_replaying(
        self,
        request: SubscribeRequest,
        sender: SharedSender | None = None,
        context: RequestContext = OPEN,
    ) -> tuple[Subscription, Replay]:
        """subscribe with a bookmark: the subscription, registered (buffering), and its
        replay, which starts it (:mod:`processor.subscriptions.replay`)."""
        refuse_with_replay(request, "a bookmark subscription")
        plan = self._admit(self.plan(request, with_query=False, context=context))
        subscription = self._subscription(plan, sender)
        _, vector = self._read(plan.topics, lambda _: self._register(subscription, plan))
        try:
            replay = open_replay(
                self.replica,
                subscription,
                plan.bookmark,
                list(plan.topics),
                plan.expression,
                self._codecs,
                vector,
                close=lambda: self.unsubscribe(subscription),
            )
        except BaseException:
            self.unsubscribe(subscription)
            raise
        return subscription, replay

    def sow_and_subscribe(
        self,
        request: SubscribeRequest,
        sender: SharedSender | None = None,
        context: RequestContext = OPEN,
    ) -> tuple[Subscription, QueryPhase]:
        """Query the SOW and subscribe at the same position: the result, then (through
        the subscription) every later matching change, with no gap and no duplicate.
        ``sender`` and ``context`` as for :meth:`subscribe`."""
        plan = self._admit(self.plan(request, with_query=True, context=context))
        if plan.plain_only:
            return self._subscribe_without_sow(plan, sender)
        if plan.aggregation is not None:
            return self._join_aggregation(plan, sender)
        request = plan.request
        # Spec 3.13: on topics without History the bookmark is ignored.
        if plan.replaying and any(
            isinstance(t, SowTopic) and t.history is not None for t in plan.topics
        ):
            refuse_with_replay(request, "a historical sow_and_subscribe")
            subscription = self._subscription(plan, sender)
            vector, batches, stats, replay = open_historical(
                self.engine,
                subscription,
                list(plan.topics),
                plan.expression,
                self._codecs,
                register=lambda: self._register(subscription, plan),
                close=lambda: self.unsubscribe(subscription),
            )
            return subscription, QueryPhase(vector, batches, stats, replay)
        prepared = self.engine.prepare(
            SowQuery(
                topic=request.topic,
                filter=request.filter,
                batch_size=request.batch_size,
                query_id=request.query_id,
                # Paginated: every matching record (the subscription orders them).
                top_n=0 if plan.paginated else request.top_n,
                order_by="" if plan.paginated else request.order_by,
            ),
            plan.context,
        )
        started = time.perf_counter()
        self._build_memo_indexes(prepared)
        subscription = self._subscription(plan, sender)

        def query_and_register(tables: list[SowTable]) -> Any:
            selection = select_records(prepared, tables)
            self._register(subscription, plan)
            return selection

        selection, vector = self._read(
            [*prepared.topics, *(t for t in plan.topics if t.name in plan.unheld)],
            query_and_register,
        )
        envelopes = [changelog.decode(envelope) for _, envelope in selection.rows]
        subscription.start(
            start_vector(vector),
            (
                (topic, e.sow_key.encode(), raw)
                for (topic, raw), e in zip(selection.rows, envelopes, strict=True)
            ),
        )
        if isinstance(subscription, PaginatedSubscription):
            envelopes = [changelog.decode(raw) for raw in subscription.initial]
        size = prepared.batch_size
        stats = selection.stats(len(envelopes), started)
        return subscription, QueryPhase(vector, batched(envelopes, size), stats)

    def _subscribe_without_sow(
        self, plan: SubscriptionPlan, sender: SharedSender | None
    ) -> tuple[Subscription, QueryPhase]:
        """sow_and_subscribe on plain topics only: an empty query result at the tail's
        position, then the live messages."""
        started = time.perf_counter()
        subscription = self._subscription(plan, sender)
        _, vector = self._read(plan.topics, lambda _: self._register(subscription, plan))
        subscription.start(start_vector(vector))
        elapsed_us = int((time.perf_counter() - started) * 1e6)
        stats = QueryStats(0, 0, 0, elapsed_us, "no SOW: live messages only")
        return subscription, QueryPhase(vector, [], stats)

    def _join_aggregation(
        self, plan: SubscriptionPlan, sender: SharedSender | None
    ) -> tuple[Subscription, QueryPhase]:
        """An aggregated subscription: a subscriber of the plan's shared aggregation, and
        the rows of its groups now (:mod:`processor.subscriptions.aggregated`)."""
        joined = self._aggregations.subscribe(plan, sender, self._open_feed)
        subscriber, rows, vector, stats = joined
        return subscriber, QueryPhase(vector, batched(rows, plan.request.batch_size or 10), stats)

    def _open_feed(self, plan: SubscriptionPlan) -> AggregationFeed:
        """A new shared aggregation for ``plan``: its records queried and the feed filed
        in one critical section of the replica's lock (no gap, no duplicate)."""
        feed, filed = AggregationFeed.of(plan, self._codecs)
        query = SowQuery(topic=feed.topic.name, filter=plan.request.filter)
        prepared = self.engine.prepare(query, plan.context)

        def query_and_register(tables: list[SowTable]) -> Any:
            selection = select_records(prepared, tables)
            self._register(feed, filed)
            return selection

        selection, vector = self._read(prepared.topics, query_and_register)
        feed.start(start_vector(vector), selection.rows)
        return feed

    def _forget(self, subscription: Subscription) -> None:
        with self._dispatcher.lock:
            self._dispatcher.forget(subscription)

    def _register(self, subscription: Subscription, plan: SubscriptionPlan) -> None:
        self._dispatcher.register(subscription, plan)

    def _build_memo_indexes(self, prepared: PreparedQuery) -> None:
        fields = memo_fields(prepared)
        if fields:
            for topic in prepared.topics:
                self.replica.build_memo_indexes(topic, fields)

    def _read(
        self, topics: Sequence[Topic], reader: Callable[[list[SowTable]], T]
    ) -> tuple[T, list[LogPosition]]:
        """Run ``reader`` over the SOW topics' tables under the replica's lock and, when
        plain topics are among ``topics``, the plain tail's lock too; return its result
        and the position vector of every topic (SOW topics first)."""
        sow = [t for t in topics if isinstance(t, SowTopic)]
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

    def _subscription(self, plan: SubscriptionPlan, sender: SharedSender | None) -> Subscription:
        """A subscription for ``plan``: paginated or not, conflated or not."""
        queue = None
        if plan.interval_s is not None and plan.key_of is not None:
            queue = ConflatingQueue(plan.interval_s, plan.key_of, self._clock)
        subscription: Subscription
        if plan.order is not None:
            subscription = PaginatedSubscription(
                plan.request,
                codec=self._codecs[plan.request.topic],
                order=plan.order,
                max_backlog=plan.max_backlog,
                sender=sender,
                queue=queue,
            )
        else:
            subscription = Subscription(
                plan.request,
                with_query=plan.with_query,
                max_backlog=plan.max_backlog,
                unheld_topics=plan.unheld,
                sender=sender,
                queue=queue,
            )
        subscription.shape = plan.shape
        subscription.context = plan.context
        if queue is not None:
            queue.bind(subscription.release_held)
        return subscription

    def replace(
        self,
        subscription: Subscription,
        request: SubscribeRequest,
        *,
        with_query: bool,
        context: RequestContext = OPEN,
    ) -> None:
        """Replace a live subscription's filter and options in place (spec 3.12; the
        rules: :mod:`processor.subscriptions.replacing`). For a sow_and_subscribe the
        query is re-run: records newly in scope are delivered, held ones that left get
        OOFs (``oof``), with no gap and no duplicate; a subscribe's new filter applies
        from the next change on. ``with_query``: the replacing command is a
        sow_and_subscribe. Raises a SowError, changing nothing, when refused."""
        check_replace(subscription, request, with_query)
        planned = self.plan(request, with_query=with_query, replacing=True, context=context)
        self.move(subscription, self._admit(planned, True))

    def move(self, subscription: Subscription, plan: SubscriptionPlan, held: bool = False) -> None:
        """Put a live subscription on ``plan`` (a replace, or new rights); ``held``:
        re-read even a subscribe's held records (those outside ``plan`` leave, no other
        is sent)."""
        if subscription.aggregated:
            self._aggregations.move(subscription, plan)
            return
        if self._dispatcher.inline:
            raise UnsupportedError("replace is not supported by a hub that matches inline")
        request = plan.request
        prepared = None
        if plan.with_query or (held and not plan.plain_only):
            prepared = self.engine.prepare(
                SowQuery(topic=request.topic, filter=request.filter, query_id=request.query_id),
                plan.context,
            )
            self._build_memo_indexes(prepared)
        only_held = held and not plan.with_query
        held_topics = {key[0] for key in subscription.focus_keys()}
        before = resolve_subscribed_topics(self.topology, subscription.request.topic)
        read_topics = list({t.name: t for t in [*plan.topics, *before]}.values())
        marker = ReplaceMarker(subscription, plan)

        def read_and_mark(tables: list[SowTable]) -> None:
            rows: list[Row] | None = None
            if prepared is not None:
                by_name = {t.topic.name: t for t in tables}
                chosen = select_records(prepared, [by_name[t.name] for t in prepared.topics])
                rows = [
                    (topic, key, raw, row_position(by_name[topic].topic, key))
                    for topic, raw in chosen.rows
                    for key in (changelog.decode(raw).sow_key.encode(),)
                ]
                if only_held:
                    focus = set(subscription.focus_keys())
                    rows = [row for row in rows if (row[0], row[1]) in focus]
            existing = {t.topic.name: t.envelopes for t in tables if t.topic.name in held_topics}
            marker.rows = rows
            marker.gone = {
                key
                for key in subscription.focus_keys()
                if key[0] in existing and key[1] not in existing[key[0]]
            }
            self._dispatcher.put_marker(marker)

        try:
            _, vector = self._read(read_topics, read_and_mark)
            marker.vector = start_vector(vector)
        finally:
            marker.placed.set()

    def unsubscribe(self, subscription: Subscription) -> None:
        """Close a subscription and forget it (idempotent)."""
        subscription.close()
        self._aggregations.leave(subscription)
        self._forget(subscription)

    def _admit(self, plan: SubscriptionPlan, replacing: bool = False) -> SubscriptionPlan:
        """``plan`` if this service can serve it now (:func:`admit`)."""
        limits = (len(self), self.max_subscriptions)
        return admit(plan, self.replica, self.plain, limits, replacing=replacing)
