"""gRPC Subscriptions service: Subscribe and SowAndSubscribe as server streams.

Each stream is served by one worker thread that sends what the subscription's queue
holds (:class:`~processor.subscriptions.subscription.Subscription`). A subscriber that
falls behind past its backlog limit is ended with RESOURCE_EXHAUSTED and the reason
("slow consumer: N messages behind ..."); a client that cancels or disconnects ends
its subscription. Errors map to statuses through :func:`processor.server.calls.status_for`.

Select lists and delta updates (:mod:`processor.subscriptions.shape`) are applied here, at
send time: a delta update is computed from the state the subscriber last received
(``Notice.previous``), and one ``no_empties`` suppresses is not sent.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from processor import errors
from processor.changelog import Envelope
from processor.changelog.bookmarks import parse_bookmark
from processor.messages import Codec
from processor.requests import changes
from processor.requests.events import ClientEvents, Events
from processor.security import OPEN, RequestContext
from processor.server import convert
from processor.server.calls import Calls, client_name
from processor.server.sessions import Session
from processor.subscriptions.hub import QueryPhase, SubscriptionHub
from processor.subscriptions.model import Notice, SubscribeRequest
from processor.subscriptions.replay import Replay
from processor.subscriptions.subscription import SharedSender, Subscription
from processor.wire import sow_pb2, sow_pb2_grpc

log = logging.getLogger(__name__)

#: Subscription streams one service serves at once (one worker thread each). Measured
#: with bench/subscribe_grpc.py: gRPC Python's threaded server stops taking new calls
#: at about 3,000 open streams on this product's test machine (the client waits with
#: no error), so the service refuses past 2,500 with a clear status instead. More
#: subscriptions: more query-service replicas (docs/subscriptions.md).
SUBSCRIPTION_STREAMS = 2_500
#: Most changes sent per wake-up of a stream's thread, and how long an idle stream's
#: thread sleeps between checks that its client is still there (a client that leaves
#: ends the stream at once through the RPC's termination callback; this is the
#: backstop, kept long so 10,000 idle streams cost nothing).
SEND_BATCH, IDLE_CHECK_S = changes.SEND_BATCH, changes.IDLE_CHECK_S
#: How long a slow consumer's stream may stay blocked on a full connection after its
#: subscription closed before the service cancels it.
SLOW_CONSUMER_GRACE_S = 5.0
#: (envelope, the SowRecord to fill or None for a new one) -> the SowRecord.
ToRecord = Callable[[Envelope, Any], Any]


def _request(request: Any) -> SubscribeRequest:
    return SubscribeRequest(
        topic=request.topic,
        filter=request.filter,
        sub_id=request.sub_id,
        oof=request.oof,
        no_empties=request.no_empties,
        batch_size=request.batch_size,
        send_keys=request.send_keys,
        query_id=request.query_id,
        max_backlog=request.max_backlog,
        delta=request.delta,
        select=request.select,
        top_n=request.top_n,
        skip_n=request.skip_n if request.HasField("skip_n") else None,
        order_by=request.order_by,
        replace=request.replace,
        conflation=request.conflation,
        conflation_key=request.conflation_key,
        bookmark=request.bookmark,
        send_deletes=request.send_deletes,
        oof_last_received=request.oof_last_received,
        text_form=request.text_form,
        grouping=request.grouping,
        projection=request.projection,
    )


class SubscriptionsServicer(sow_pb2_grpc.SubscriptionsServicer):
    """Translates subscription requests to the hub, and errors to statuses."""

    def __init__(
        self,
        hub: SubscriptionHub,
        codecs: dict[str, Codec],
        calls: Calls,
        events: Events | None = None,
    ) -> None:
        self._hub = hub
        #: The event topics' publisher (None: no client-status events).
        self._events = events
        #: Each call's RequestContext (authenticated, its rights; server/auth.py).
        self._calls = calls
        self._contexts = calls.context
        self._codecs = codecs
        self._status_for = calls.status
        self._streams = threading.BoundedSemaphore(SUBSCRIPTION_STREAMS)

    def _abort(self, context: Any, error: errors.SowError) -> None:
        self._calls.abort(context, error)

    def _converter(self, subscription: Subscription, request: Any) -> ToRecord:
        """(envelope, SowRecord to fill or None) -> SowRecord, shaped as the request
        asks (:func:`processor.requests.changes.shaper`)."""
        text_form = changes.text_form(subscription, request.text_form)
        shaped = changes.shaper(subscription.shape, text_form, self._codecs)
        return lambda envelope, into: convert.record(shaped(envelope), None, into)

    def _client(self, context: Any, caller: RequestContext, *, logon: bool) -> ClientEvents:
        """The client of a call (:func:`client_name`), on its connection (peer)."""
        name = client_name(context, caller)
        return ClientEvents(self._events, name, context.peer(), self._hub.unsubscribe, logon=logon)

    def Subscribe(self, request: Any, context: Any) -> Iterator[Any]:
        caller = self._contexts(context)
        client = self._client(context, caller, logon=False)
        opener = partial(self._open_subscribe, caller=caller, client=client)
        return self._stream(request, context, opener, client)

    def SowAndSubscribe(self, request: Any, context: Any) -> Iterator[Any]:
        caller = self._contexts(context)
        client = self._client(context, caller, logon=False)
        opener = partial(self._open_sow_and_subscribe, caller=caller, client=client)
        return self._stream(request, context, opener, client)

    def Session(self, commands: Iterator[Any], context: Any) -> Iterator[Any]:
        """Many subscriptions on one stream (:mod:`processor.server.sessions`), all of
        the caller who opened it."""
        caller = self._contexts(context)
        if not self._streams.acquire(blocking=False):
            self._abort(context, _too_many())
        client = self._client(context, caller, logon=True)
        session = Session(
            client.unsubscribe,
            partial(self._open_subscribe, caller=caller, client=client),
            partial(self._open_sow_and_subscribe, caller=caller, client=client),
            partial(self._calls.status, caller=caller),
            self._changes,
            lambda subscription, request, with_query: self._hub.replace(
                subscription, _request(request), with_query=with_query, context=caller
            ),
        )
        try:
            context.add_callback(session.close)
            reader = threading.Thread(
                target=session.read, args=(commands,), name="sow-session-commands", daemon=True
            )
            reader.start()
            yield from session.messages(context.is_active, IDLE_CHECK_S, SEND_BATCH)
        finally:
            session.close()
            client.close()
            self._streams.release()

    def _open_subscribe(
        self,
        request: Any,
        sender: SharedSender | None = None,
        *,
        caller: RequestContext = OPEN,
        client: ClientEvents | None = None,
    ) -> tuple[Subscription, Iterable[Any]]:
        """Register a subscribe: the subscription and its ``registered`` message (for a
        bookmark subscription, then its replay and ``completed``, sent as read)."""
        if request.bookmark and not parse_bookmark(request.bookmark).now:
            subscription, replay = self._hub.subscribe_replaying(_request(request), sender, caller)
            if client is not None:
                client.subscribed(subscription, "subscribe", request)
            registered = sow_pb2.SubscriptionMessage(
                sub_id=request.sub_id, registered=sow_pb2.Registered()
            )
            return subscription, itertools.chain([registered], self._replayed(request, replay))
        subscription = self._hub.subscribe(_request(request), sender, caller)
        if client is not None:
            client.subscribed(subscription, "subscribe", request)
        snapshot = [convert.position(p) for p in subscription.start_vector()]
        registered = sow_pb2.SubscriptionMessage(
            sub_id=request.sub_id, registered=sow_pb2.Registered(snapshot=snapshot)
        )
        return subscription, [registered]

    def _replayed(self, request: Any, replay: Replay) -> Iterator[Any]:
        """A replay's changes as it reads them, then ``completed``."""
        for deliveries in replay:
            for start in range(0, len(deliveries), SEND_BATCH):
                chunk = deliveries[start : start + SEND_BATCH]
                message = self._changes(replay.live, request, chunk)
                if message is not None:  # no_empties may drop every update of a batch
                    yield message
        yield sow_pb2.SubscriptionMessage(
            sub_id=request.sub_id,
            completed=sow_pb2.Completed(position=[convert.position(p) for p in replay.completed]),
        )

    def _open_sow_and_subscribe(
        self,
        request: Any,
        sender: SharedSender | None = None,
        *,
        caller: RequestContext = OPEN,
        client: ClientEvents | None = None,
    ) -> tuple[Subscription, Iterable[Any]]:
        """Register a sow_and_subscribe: the subscription and its query result (group
        begin, batches, group end; for a historical one, then the replay and
        ``completed``)."""
        subscription, phase = self._hub.sow_and_subscribe(_request(request), sender, caller)
        if client is not None:
            client.subscribed(subscription, "sow_and_subscribe", request)
        try:
            opening = self._query_phase(request, phase, subscription)
        except BaseException:
            (self._hub.unsubscribe if client is None else client.unsubscribe)(subscription)
            raise
        if phase.replay is not None:
            return subscription, itertools.chain(opening, self._replayed(request, phase.replay))
        return subscription, opening

    def _query_phase(
        self, request: Any, phase: QueryPhase, subscription: Subscription
    ) -> list[Any]:
        sub_id = request.sub_id
        snapshot = [convert.position(p) for p in phase.snapshot]
        messages = [
            sow_pb2.SubscriptionMessage(
                sub_id=sub_id,
                group_begin=sow_pb2.GroupBegin(
                    query_id=request.query_id,
                    topic=request.topic,
                    snapshot=snapshot,
                    staleness_ms=self._hub.replica.staleness_ms(),
                ),
            )
        ]
        to_record = self._converter(subscription, request)
        for batch in phase.batches:
            message = sow_pb2.SubscriptionMessage(sub_id=sub_id)
            message.batch.SetInParent()  # a batch even when empty, as before
            records = message.batch.records
            for envelope in batch:
                to_record(envelope, records.add())
            messages.append(message)
        stats = phase.stats
        messages.append(
            sow_pb2.SubscriptionMessage(
                sub_id=sub_id,
                group_end=sow_pb2.SubscribeGroupEnd(
                    query_id=request.query_id,
                    snapshot=snapshot,
                    **convert.stats(stats),
                ),
            )
        )
        return messages

    def _changes(self, subscription: Subscription, request: Any, deliveries: list[Notice]) -> Any:
        """One message with a subscription's changes (``change`` when there is one), or
        None when ``no_empties`` suppressed every delta update among them."""
        shape = subscription.shape
        text_form = changes.text_form(subscription, request.text_form)
        shaped = changes.shaper(shape, text_form, self._codecs)
        out = [convert.change(c) for c in changes.changes(deliveries, shape, shaped)]
        if not out:
            return None
        if len(out) == 1:
            return sow_pb2.SubscriptionMessage(sub_id=request.sub_id, change=out[0])
        return sow_pb2.SubscriptionMessage(
            sub_id=request.sub_id, changes=sow_pb2.ChangeBatch(changes=out)
        )

    def _stream(
        self,
        request: Any,
        context: Any,
        register: Callable[[Any], tuple[Subscription, Iterable[Any]]],
        client: ClientEvents,
    ) -> Iterator[Any]:
        """One subscription stream: take a stream slot, register with the hub, send the
        opening messages, then the live changes; the subscription is dropped however
        the stream ends."""
        if not self._streams.acquire(blocking=False):
            self._abort(context, _too_many())
        try:
            try:
                subscription, opening = register(request)
            except errors.SowError as exc:
                self._abort(context, exc)
            try:
                yield from opening
            except BaseException:
                client.unsubscribe(subscription)
                raise
            yield from self._live(subscription, request, context, client)
        finally:
            self._streams.release()

    def _live(
        self, subscription: Subscription, request: Any, context: Any, client: ClientEvents
    ) -> Iterator[Any]:
        """Send the subscription's changes until the client leaves or it closes."""
        context.add_callback(lambda: client.unsubscribe(subscription))
        subscription.on_close.append(lambda: _cancel_later(context))
        try:
            for deliveries in changes.live(subscription, context.is_active, SEND_BATCH):
                message = self._changes(subscription, request, deliveries)
                if message is not None:
                    yield message
        except (errors.SlowConsumerError, errors.NotEntitledError) as exc:
            self._abort(context, exc)
        finally:
            client.unsubscribe(subscription)


def _cancel_later(context: Any) -> None:
    """End a slow consumer's stream if its thread stays blocked on a full connection
    (the thread itself ends it with the reason when it gets to run)."""
    timer = threading.Timer(SLOW_CONSUMER_GRACE_S, context.cancel)
    timer.daemon = True
    timer.start()


def _too_many() -> errors.SowError:
    return errors.TooManySubscriptionsError(
        f"this query service already serves {SUBSCRIPTION_STREAMS} subscription streams; "
        "subscribe to another query-service replica or retry later"
    )
