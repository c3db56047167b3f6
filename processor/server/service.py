"""gRPC service: Publish, SowQuery (streamed group begin / batches / group end), SowDelete
(by SowKeys, filter or message data).

The one table mapping failure reasons to gRPC status codes is :data:`STATUS_FOR`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc

from processor import errors
from processor.log import LogPosition
from processor.publish.gateway import Gateway, PendingPublishes
from processor.publish.requests import Deleted, PublishColumns
from processor.query.historical import point_of, run_historical
from processor.query.sow import QueryEngine, SowQuery
from processor.security import RequestContext
from processor.server import convert
from processor.server.calls import (
    DEFAULT_WAIT_S,
    PUBLISH_SLOTS,
    STREAM_WINDOW,
    WORKERS,
    Calls,
    ContextOf,
    busy_error,
    last_per_partition,
    position_text,
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
from processor.subscriptions.shape import MessageShape
from processor.topology.model import PlainTopic
from processor.topology.topics import resolve_topic, resolve_topics
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
    ) -> None:
        self._engine = engine
        #: Each call's RequestContext (authenticated, its rights; server/auth.py).
        self._calls = calls or Calls()
        self._contexts = self._calls.context
        self._gateway = gateway
        #: A sow_delete on a queue acknowledges its messages (by bookmark or filter).
        self._queues = queues
        #: The input topics whose records the replica applies (a processed ack waits).
        self._sow_logs = {
            t.kafka_topic for t in engine.topology.topics.values() if not isinstance(t, PlainTopic)
        }
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
        ``processed`` acknowledgement); abort with DEADLINE_EXCEEDED when the call's
        deadline comes first. Positions of topics without a SOW are persisted already."""
        replica = self._engine.replica
        sow = self._sow_logs
        waited = [p for p in positions if p[0] in sow]
        if not waited:
            return
        timeout = wait_budget(context, 0.0) or DEFAULT_WAIT_S  # the deadline, or that
        try:
            if replica.wait_for(waited, timeout):
                return
        except errors.ReplicaStoppedError as exc:  # this service is stopping
            self._abort(context, exc)
            return
        self._abort(
            context,
            errors.PositionTimeoutError(
                f"the publish is in the log at {position_text(max(waited))} but was not "
                f"applied to the SOW within {timeout:.3g}s (a processed acknowledgement); "
                "the processor may be behind or stopped. Publishing again with the same "
                "publisher and sequence is safe"
            ),
        )

    def PublishStream(self, request_iterator: Any, context: Any) -> Iterator[Any]:
        """Bulk publish: batches are handed to the log as they arrive (up to
        STREAM_WINDOW unacknowledged), each acknowledged in order once the broker has all
        of it. A bad message is refused in its ack; the stream goes on."""
        caller = self._contexts(context)
        if not self._publish_slots.acquire(blocking=False):
            self._abort(context, busy_error())
        pending: queue.Queue[tuple[int, PendingPublishes, int] | BaseException | None]
        pending = queue.Queue(maxsize=STREAM_WINDOW)
        ended = threading.Event()

        def hand_over(item: tuple[int, PendingPublishes, int] | BaseException | None) -> bool:
            while not ended.is_set():
                try:
                    pending.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for batch in request_iterator:
                    publishes = self._publish_batch(batch, caller)
                    if not hand_over((batch.batch_id, publishes, batch.ack)):
                        return
                hand_over(None)
            except BaseException as exc:  # the client cancelled, or a bug: end the stream
                hand_over(exc)

        threading.Thread(target=read, name="sow-publish-stream", daemon=True).start()
        try:
            while True:
                item = pending.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    if context.is_active() and not isinstance(item, grpc.RpcError):
                        log.error("publish stream failed", exc_info=item)
                        context.abort(grpc.StatusCode.INTERNAL, f"publish stream failed: {item!r}")
                    return
                batch_id, publishes, ack = item
                timeout = time_left(context)
                if not publishes.wait(timeout):
                    self._abort(
                        context,
                        errors.UnconfirmedWriteError(
                            f"the broker did not confirm batch {batch_id} within {timeout:.3g}s; "
                            "its messages may still be written. Resend the unacknowledged "
                            "batches with the same publisher and sequences"
                        ),
                    )
                results = publishes.results()
                if ack == sow_pb2.PROCESSED:
                    self._until_processed(last_per_partition(results), context)
                yield publish_ack(batch_id, results)
        finally:
            ended.set()
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
        try:
            shape = self._select(request)
            point = point_of(request.bookmark) if request.bookmark else None
        except errors.SowError as exc:
            self._abort(context, exc)
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
        try:
            if point is None:
                result = self._engine.run(query, caller)
            else:
                result = run_historical(self._engine, query, point, caller)
        except errors.SowError as exc:
            self._abort(context, exc)
        yield sow_pb2.SowQueryReply(
            group_begin=sow_pb2.GroupBegin(
                query_id=result.query_id,
                topic=result.topic,
                snapshot=[convert.position(p) for p in result.snapshot],
                staleness_ms=self._engine.replica.staleness_ms(),
            )
        )
        text_form = request.text_form and not result.aggregated
        topology = self._gateway.topology
        queue = topology.topics.get(result.topic)
        for batch in result.batches:
            reply = sow_pb2.SowQueryReply()
            reply.batch.SetInParent()  # a batch even when empty, as before
            records = reply.batch.records
            for envelope in batch:
                convert.record(envelope, None, records.add())
            if queue is not None and queue.queue is not None and not result.aggregated:
                self._with_queue_state(queue.name, records)
            if shape is not None:
                for record in records:
                    if shape.shapes(record.topic):
                        record.data = shape.full(record.topic, record.data)
                    elif text_form:
                        codec = self._gateway.codec(resolve_topic(topology, record.topic))
                        record.data = codec.to_text(record.data)
            elif text_form:
                # A pattern can match topics of different message types.
                for record in records:
                    codec = self._gateway.codec(resolve_topic(topology, record.topic))
                    record.data = codec.to_text(record.data)
            yield reply
        stats = result.stats
        assert stats is not None
        yield sow_pb2.SowQueryReply(
            group_end=sow_pb2.GroupEnd(
                query_id=result.query_id,
                **convert.stats(stats),
            )
        )

    def _with_queue_state(self, queue: str, records: Iterable[Any]) -> None:
        """Each queue message's state (available until leased) on its record."""
        replica = self._engine.replica
        for record in records:
            state = replica.queue_states.get(queue, record.sow_key.encode())
            if state is None:
                record.queue_state.SetInParent()
                continue
            record.queue_state.CopyFrom(
                sow_pb2.QueueMessageState(
                    leased=state.holder is not None,
                    leased_to=state.holder or "",
                    lease_deadline_ms=state.deadline_ms or 0,
                    deliveries=state.deliveries,
                    cancels=state.cancels,
                )
            )

    def _select(self, request: Any) -> MessageShape | None:
        """A query's select list, checked against the topics it reads (None: no select)."""
        if not request.select:
            return None
        if request.grouping or request.projection:
            raise errors.InvalidRequestError(
                "a select list does not apply to an aggregated query (grouping/projection); "
                "choose the fields with the projection instead"
            )
        topology = self._gateway.topology
        topics = resolve_topics(topology, request.topic)
        codecs = {t.name: self._gateway.codec(t) for t in topics}
        return MessageShape.for_request(
            topics, codecs, select=request.select, text_form=request.text_form, what="sow query"
        )

    def SowDelete(self, request: Any, context: Any) -> Any:
        caller = self._contexts(context)
        try:
            deleted = self._delete(request, context, caller)
        except errors.SowError as exc:
            self._abort(context, exc)
        return sow_pb2.SowDeleteReply(
            records_deleted=deleted.records_deleted,
            positions=[convert.position(p) for p in deleted.positions],
        )

    def _delete(self, request: Any, context: Any, caller: RequestContext) -> Deleted:
        selectors = [
            name
            for name, given in (
                ("sow_keys", bool(request.sow_keys)),
                ("filter", bool(request.filter)),
                ("data", bool(request.data)),
            )
            if given
        ]
        if len(selectors) != 1:
            raise errors.InvalidRequestError(
                "sow_delete takes exactly one selector: sow_keys, filter or data "
                f"(got {', '.join(selectors) or 'none'})"
            )
        queues = self._queues
        if queues is not None and request.topic in queues.names():
            wait_s = time_left(context, request.timeout_seconds or WRITE_TIMEOUT_S)
            return self._acknowledge(queues, request, wait_s, caller)
        timeout, gateway = request.timeout_seconds, self._gateway
        if request.filter:
            return gateway.delete_by_filter(request.topic, request.filter, timeout, caller)
        if request.data:
            return gateway.delete_by_data(
                request.topic, request.data, timeout, request.text_form, caller
            )
        return gateway.delete(request.topic, list(request.sow_keys), timeout, caller)

    @staticmethod
    def _acknowledge(
        queues: QueueHub, request: Any, wait_s: float, caller: RequestContext
    ) -> Deleted:
        """sow_delete on a queue: acknowledge the messages of the bookmarks given as
        SowKeys, or every message the filter matches; ``records_deleted``: how many
        messages the queue's partitions removed (QueueHub.acknowledge)."""
        topic = queues.queue(request.topic)
        if request.data:
            raise errors.InvalidRequestError(
                f"{topic.name} is a queue: acknowledge its messages by bookmark or filter"
            )
        done = queues.acknowledge(topic, list(request.sow_keys), request.filter, wait_s, caller)
        return Deleted(done.removed, [])


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
) -> tuple[Any, str]:
    """Start the gRPC server on ``address``; return it and the address it bound. With a
    subscription hub it also serves the Subscriptions service (one more worker thread per
    subscription stream); with ``health`` the grpc.health.v1 service. A port another
    process listens on is refused (no SO_REUSEPORT sharing: two servers on one port
    would answer queries in turn). ``contexts`` builds each call's RequestContext
    (authentication and entitlements, :mod:`processor.server.auth`; default: the open
    context with the call's deadline); ``credentials``: grpc.ServerCredentials for TLS
    (default: plaintext); ``blocking``: what stops the Kafka cluster taking writes now
    (None: nothing), said in the message of a call that fails for want of the broker."""
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
        SowServicer(engine, gateway, queues, calls), server
    )
    if hub is not None:
        codecs = {t.name: gateway.codec(t) for t in gateway.topology.every_topic()}
        sow_pb2_grpc.add_SubscriptionsServicer_to_server(  # type: ignore[no-untyped-call]
            SubscriptionsServicer(hub, codecs, calls), server
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
