"""A subscription over HTTP, as Server-Sent Events (``GET /api/subscribe``).

One stream is one client connection (its client-status events: ``logon``,
``subscribe``, then ``unsubscribe`` and ``logoff`` when it ends): ``registered`` (a
subscribe) or ``group_begin``, ``records`` and ``group_end`` (a sow_and_subscribe), then
a ``changes`` event per batch of changes, each in the JSON form of gRPC's Change. A slow
consumer or a caller whose rights were taken away gets ``end`` with the reason; a
caller that leaves ends it at the next write (a ``: ping`` comment every few seconds
finds it gone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from processor import errors
from processor.http import calls
from processor.http.request import Request
from processor.messages import Codec
from processor.requests import changes
from processor.requests.events import ClientEvents, Events
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.model import SubscribeRequest

#: How often an idle stream checks that its caller is still there.
PING_S = 2.0


def subscribe_request(request: Request) -> SubscribeRequest:
    """A SubscribeRequest from the stream's query parameters (gRPC's field names)."""
    skip = request.param("skip_n")
    return SubscribeRequest(
        topic=request.param("topic"),
        filter=request.param("filter"),
        sub_id=request.param("sub_id") or "console",
        oof=request.flag("oof"),
        no_empties=request.flag("no_empties"),
        batch_size=int(request.number("batch_size", 0)),
        query_id=request.param("query_id"),
        max_backlog=int(request.number("max_backlog", 0)),
        delta=request.flag("delta"),
        select=request.param("select"),
        top_n=int(request.number("top_n", 0)),
        skip_n=int(skip) if skip.isdigit() else None,
        order_by=request.param("order_by"),
        conflation=request.param("conflation"),
        conflation_key=request.param("conflation_key"),
        bookmark=request.param("bookmark"),
        send_deletes=request.flag("send_deletes"),
        oof_last_received=request.flag("oof_last_received"),
        text_form=request.param("text_form", "1") != "0",
        grouping=request.param("grouping"),
        projection=request.param("projection"),
    )


class Subscriber:
    """Serves one subscription stream (see the module doc)."""

    def __init__(
        self, hub: SubscriptionHub, codecs: Mapping[str, Codec], events: Events | None
    ) -> None:
        self._hub, self._codecs, self._events = hub, codecs, events

    def serve(self, request: Request) -> None:
        asked = subscribe_request(request)
        with_query = request.flag("sow")
        client = ClientEvents(
            self._events, request.client_name, request.peer, self._hub.unsubscribe, logon=True
        )
        try:
            if with_query:
                subscription, phase = self._hub.sow_and_subscribe(asked, None, request.caller)
            else:
                if asked.bookmark:
                    raise errors.UnsupportedError(
                        "a bookmark subscribe is served over gRPC; over HTTP subscribe from now"
                    )
                subscription = self._hub.subscribe(asked, None, request.caller)
            client.subscribed(
                subscription, "sow_and_subscribe" if with_query else "subscribe", asked
            )
            try:
                text_form = changes.text_form(subscription, asked.text_form)
                shaped = changes.shaper(subscription.shape, text_form, self._codecs)
                request.events()
                if with_query:
                    self._query_phase(request, asked, phase, shaped)
                else:
                    snapshot = [calls.position_text(p) for p in subscription.start_vector()]
                    request.event("registered", {"sub_id": asked.sub_id, "snapshot": snapshot})
                self._live(request, subscription, shaped)
            finally:
                client.unsubscribe(subscription)
        finally:
            client.close()

    def _query_phase(
        self, request: Request, asked: SubscribeRequest, phase: Any, shaped: changes.Shaper
    ) -> None:
        snapshot = [calls.position_text(p) for p in phase.snapshot]
        request.event(
            "group_begin",
            {
                "sub_id": asked.sub_id,
                "query_id": asked.query_id,
                "topic": asked.topic,
                "snapshot": snapshot,
                "staleness_ms": self._hub.replica.staleness_ms(),
            },
        )
        for batch in phase.batches:
            request.event("records", [calls.record(shaped(envelope)) for envelope in batch])
        request.event(
            "group_end",
            {"query_id": asked.query_id, "snapshot": snapshot, **calls.stats(phase.stats)},
        )

    def _live(self, request: Request, subscription: Any, shaped: changes.Shaper) -> None:
        """The live changes (:func:`processor.requests.changes.live`); while none come,
        a ping every ``PING_S`` finds a caller that left (the write raises)."""

        def still_there() -> bool:
            request.ping()
            return True

        shape = subscription.shape
        try:
            for deliveries in changes.live(subscription, still_there, idle_s=PING_S):
                out = changes.changes(deliveries, shape, shaped)
                if out:
                    request.event("changes", [calls.change(c) for c in out])
        except (errors.SlowConsumerError, errors.NotEntitledError) as exc:
            request.event("end", {"status": calls.status_of(exc), "error": str(exc)})
