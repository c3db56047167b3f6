"""gRPC service: Publish, SowQuery (streamed group begin / batches / group end), SowDelete
(by SowKeys, filter or message data).

The one table mapping failure reasons to gRPC status codes is :data:`STATUS_FOR`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from functools import partial
from typing import Any

import grpc

from processor import errors
from processor.log import LogPosition
from processor.publish.gateway import Gateway, PendingPublishes
from processor.publish.requests import PublishColumns
from processor.query.sow import QueryEngine, SowQuery
from processor.requests.deletes import DeleteRequest, delete
from processor.requests.events import Events
from processor.requests.publishes import Batch, acknowledged
from processor.requests.queries import Queries, QueryRequest
from processor.security import RequestContext
from processor.server import convert
from processor.server.calls import (
    PUBLISH_SLOTS,
    WORKERS,
    Calls,
    ContextOf,
    busy_error,
    client_name,
    publish_ack,
    publish_reply,
    time_left,
    wait_budget,
)
from processor.server.health import Health
from processor.server.queues import QUEUE_STREAMS, QueuesServicer
from processor.server.subscriptions import SUBSCRIPTION_STREAMS, SubscriptionsServicer
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import WRITE_TIMEOUT_S, QueueHub
from processor.wire import sow_pb2, sow_pb2_grpc

log = logging.getLogger(__name__)


class SowServicer(sow_pb2_grpc.SowServicer):
    """Translates gRPC requests to the query engine and gateway, and errors to statuses."""

    def __init__(
        self,
        engine: QueryEngine,
        gateway: Gateway,
        queues: QueueHub | None = None,
        calls: Calls | None = None,
        events: Events | None = None,
    ) -> None:
        self._engine = engine
        #: The event topics' publisher (None: no client-status events).
        self._events = events
        #: Each call's RequestContext (authenticated, its rights; server/auth.py).
        self._calls = calls or Calls()
        self._contexts = self._calls.context
        self._gateway = gateway
        #: A sow_delete on a queue acknowledges its messages (by bookmark or filter).
        self._queues = queues
        #: Queries answered and processed acknowledgements waited for.
        self._queries = Queries(engine, gateway)
        self._publish_slots = threading.BoundedSemaphore(PUBLISH_SLOTS)

    def _abort(self, context: Any, error: errors.SowError) -> None:
        self._calls.abort(context, error)

    def Publish(self, request: Any, context: Any) -> Any:
        caller = self._contexts(context)
        if not self._publish_slots.acquire(blocking=False):
            self._abort(context, busy_error())
        try:
            published = self._gateway.publish(request, time_left(context), caller)
        except errors.SowError as exc:
            self._abort(context, exc)
        finally:
            self._publish_slots.release()
        if request.ack == sow_pb2.PROCESSED:
            self._until_processed([published.position], context)
        return publish_reply(published)

    def _until_processed(self, positions: Sequence[LogPosition], context: Any) -> None:
        """Return once this service's replica has applied every one of ``positions`` (a
        ``processed`` acknowledgement), or abort (DEADLINE_EXCEEDED when the call's
        deadline comes first)."""
        try:
            self._queries.until_processed(positions, wait_budget(context, 0.0))
        except errors.SowError as exc:
            self._abort(context, exc)

    def PublishStream(self, request_iterator: Any, context: Any) -> Iterator[Any]:
        """Bulk publish (:func:`processor.requests.publishes.acknowledged`): batches go
        to the log as they arrive, each acknowledged in order once the broker has it."""
        caller = self._contexts(context)
        if not self._publish_slots.acquire(blocking=False):
            self._abort(context, busy_error())
        batches = (
            Batch(
                batch.batch_id,
                partial(self._publish_batch, batch, caller),
                batch.ack == sow_pb2.PROCESSED,
            )
            for batch in request_iterator
        )
        try:
            for batch_id, results in acknowledged(
                batches, self._queries, lambda: time_left(context)
            ):
                yield publish_ack(batch_id, results)
        except errors.SowError as exc:
            self._abort(context, exc)
        except grpc.RpcError:
            return  # the client cancelled its stream
        except Exception as exc:  # a bug: end the stream, say so
            if context.is_active():
                log.error("publish stream failed", exc_info=exc)
                context.abort(grpc.StatusCode.INTERNAL, f"publish stream failed: {exc!r}")
        finally:
            self._publish_slots.release()

    def _publish_batch(self, batch: Any, caller: RequestContext) -> PendingPublishes:
        """Hand one PublishBatch (either form) to the gateway."""
        if batch.delta:
            for message in batch.messages:
                message.delta = True
        if not batch.topic and not batch.data:
            return self._gateway.publish_many(batch.messages, caller)
        columns = PublishColumns(
            batch.topic,
            batch.data,
            batch.text_form,
            batch.publisher,
            batch.first_sequence,
            batch.expiration,
            batch.correlation_id,
            batch.sow_keys,
            batch.delta,
        )
        if batch.messages:
            error = errors.InvalidRequestError(
                f"batch {batch.batch_id} has both messages and columns; send one form"
            )
            count = len(batch.messages) + len(batch.data)
            return PendingPublishes.refused([error] * count)
        return self._gateway.publish_columns(columns, caller)

    def SowQuery(self, request: Any, context: Any) -> Iterator[Any]:
        caller = self._contexts(context)
        query = SowQuery(
            topic=request.topic,
            sow_keys=tuple(request.sow_keys),
            query_id=request.query_id,
            batch_size=request.batch_size,
            min_position=tuple((p.topic, p.partition, p.offset) for p in request.min_position),
            timeout_s=wait_budget(context, request.timeout_seconds),
            filter=request.filter,
            top_n=request.top_n,
            skip_n=request.skip_n,
            order_by=request.order_by,
            grouping=request.grouping,
            projection=request.projection,
            wait_for_catch_up=request.wait_for_catch_up,
        )
        asked = QueryRequest(query, request.select, request.text_form, request.bookmark)
        try:
            answer = self._queries.answer(asked, caller)
        except errors.SowError as exc:
            self._abort(context, exc)
        yield sow_pb2.SowQueryReply(
            group_begin=sow_pb2.GroupBegin(
                query_id=answer.query_id,
                topic=answer.topic,
                snapshot=[convert.position(p) for p in answer.snapshot],
                staleness_ms=answer.staleness_ms,
            )
        )
        for rows in answer.batches:
            reply = sow_pb2.SowQueryReply()
            reply.batch.SetInParent()  # a batch even when empty, as before
            records = reply.batch.records
            for row in rows:
                convert.row(row, records.add())
            yield reply
        yield sow_pb2.SowQueryReply(
            group_end=sow_pb2.GroupEnd(query_id=answer.query_id, **convert.stats(answer.stats))
        )

    def SowDelete(self, request: Any, context: Any) -> Any:
        caller = self._contexts(context)
        asked = DeleteRequest(
            request.topic,
            request.sow_keys,
            request.filter,
            request.data,
            request.text_form,
            request.timeout_seconds,
        )
        wait_s = time_left(context, request.timeout_seconds or WRITE_TIMEOUT_S)
        try:
            deleted = delete(self._gateway, self._queues, asked, caller, wait_s)
        except errors.SowError as exc:
            self._abort(context, exc)
        if self._events is not None:
            self._events.client(
                "sow_delete",
                client_name(context, caller),
                connection_name=context.peer(),
                topic=request.topic,
                filter=request.filter,
            )
        return sow_pb2.SowDeleteReply(
            records_deleted=deleted.records_deleted,
            positions=[convert.position(p) for p in deleted.positions],
        )


def start_server(
    engine: QueryEngine,
    gateway: Gateway,
    address: str,
    hub: SubscriptionHub | None = None,
    health: Health | None = None,
    interceptors: Sequence[Any] = (),
    queues: QueueHub | None = None,
    contexts: ContextOf | None = None,
    credentials: Any | None = None,
    blocking: Callable[[], str | None] | None = None,
    events: Events | None = None,
) -> tuple[Any, str]:
    """Start the gRPC server on ``address``; return it and the address it bound. With a
    subscription hub it also serves the Subscriptions service (one more worker thread per
    subscription stream); with ``health`` the grpc.health.v1 service. A port another
    process listens on is refused (no SO_REUSEPORT sharing: two servers on one port
    would answer queries in turn). ``contexts`` builds each call's RequestContext
    (authentication and entitlements, :mod:`processor.server.auth`; default: the open
    context with the call's deadline); ``credentials``: grpc.ServerCredentials for TLS
    (default: plaintext); ``blocking``: what stops the Kafka cluster taking writes now
    (None: nothing), said in the message of a call that fails for want of the broker;
    ``events``: the event topics' publisher (client-status events)."""
    audit = getattr(contexts, "audit", None)
    calls = Calls(contexts, audit, blocking)
    workers = WORKERS + (SUBSCRIPTION_STREAMS if hub is not None else 0)
    workers += QUEUE_STREAMS if queues is not None else 0
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        interceptors=list(interceptors),
        options=[("grpc.so_reuseport", 0)],
    )
    if health is not None:
        health.add_to(server)
    sow_pb2_grpc.add_SowServicer_to_server(  # type: ignore[no-untyped-call]
        SowServicer(engine, gateway, queues, calls, events), server
    )
    if hub is not None:
        codecs = {t.name: gateway.codec(t) for t in gateway.topology.every_topic()}
        sow_pb2_grpc.add_SubscriptionsServicer_to_server(  # type: ignore[no-untyped-call]
            SubscriptionsServicer(hub, codecs, calls, events), server
        )
    if queues is not None:
        codecs = {t.name: gateway.codec(t) for t in gateway.topology.every_topic()}
        sow_pb2_grpc.add_QueuesServicer_to_server(  # type: ignore[no-untyped-call]
            QueuesServicer(queues, codecs, calls), server
        )
    host, _, _port = address.rpartition(":")
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpcio raises where older versions returned 0
        bound = 0
    if bound == 0:
        raise errors.ConfigurationError(
            f"cannot listen for gRPC on {address}: the port is taken or the address is not "
            "local; pick another with --grpc-address or SOW_GRPC_ADDRESS"
        )
    server.start()
    return server, f"{host}:{bound}"
