"""gRPC Queues service: Consume (a subscription to a queue: leases out, acknowledgements,
cancels and expiries in, on one stream) and Act (the same commands outside a stream, and
an acknowledgement by filter). The queue logic is the hub's
(:mod:`processor.subscriptions.queues`); this module translates."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from processor import changelog, errors
from processor.messages import Codec
from processor.queues.commands import CommandKind, Delivery
from processor.server import convert
from processor.server.calls import Calls
from processor.subscriptions.queues import WRITE_TIMEOUT_S, QueueConsumer, QueueHub
from processor.wire import sow_pb2, sow_pb2_grpc

log = logging.getLogger(__name__)

#: Worker threads kept for Consume streams (each holds one while it is open).
QUEUE_STREAMS = 64
#: How often a stream with nothing to send checks that its client is still there.
IDLE_CHECK_S = 0.5
#: Leases sent per wake-up at most (the rest follow at once).
SEND_BATCH = 1_000

_ACTIONS = {
    sow_pb2.QUEUE_ACK: CommandKind.ACK,
    sow_pb2.QUEUE_CANCEL: CommandKind.CANCEL,
    sow_pb2.QUEUE_EXPIRE: CommandKind.EXPIRE,
}


class QueuesServicer(sow_pb2_grpc.QueuesServicer):
    """Translates queue requests to the hub, and errors to statuses."""

    def __init__(
        self,
        hub: QueueHub,
        codecs: dict[str, Codec],
        calls: Calls,
    ) -> None:
        self._hub, self._codecs, self._calls = hub, codecs, calls
        #: Each call's RequestContext (authenticated, its rights; server/auth.py).
        self._contexts = calls.context

    def _abort(self, context: Any, error: errors.SowError) -> None:
        self._calls.abort(context, error)

    def Act(self, request: Any, context: Any) -> Any:
        caller = self._contexts(context)
        try:
            topic = self._hub.queue(request.queue)
            kind = _ACTIONS[request.action]
            if kind is CommandKind.CANCEL:  # returning a lease: whoever may read it
                caller.rights.read_filter(topic.name)
            else:
                caller.rights.check_acknowledge(topic.name)
            if request.filter:
                if kind is not CommandKind.ACK:
                    raise errors.InvalidRequestError("only an acknowledgement takes a filter")
                if request.bookmarks:
                    raise errors.InvalidRequestError("give bookmarks or a filter, not both")
            if kind is CommandKind.ACK:  # waits for the count it removed
                bookmarks, wait_s = list(request.bookmarks), _wait_s(context)
                done = self._hub.acknowledge(topic, bookmarks, request.filter, wait_s, caller)
                return sow_pb2.QueueActionReply(commands=done.commands, removed=done.removed)
            written = self._hub.act(topic, kind, list(request.bookmarks))
        except errors.SowError as exc:
            self._abort(context, exc)
        return sow_pb2.QueueActionReply(commands=written)

    def Consume(self, commands: Iterator[Any], context: Any) -> Iterator[Any]:
        caller = self._contexts(context)
        first = next(commands, None)
        if first is None or first.WhichOneof("command") != "subscribe":
            self._abort(
                context,
                errors.InvalidRequestError("a Consume stream starts with a subscribe command"),
            )
            return
        request = first.subscribe
        try:
            consumer = self._hub.subscribe(
                request.queue,
                request.filter,
                request.max_backlog if request.HasField("max_backlog") else None,
                caller,
            )
        except errors.SowError as exc:
            self._abort(context, exc)
            return
        context.add_callback(consumer.close)
        reader = threading.Thread(
            target=_read_commands,
            args=(commands, consumer),
            name="sow-queue-commands",
            daemon=True,
        )
        reader.start()
        sub_id = request.sub_id
        to_record = self._converter(request.text_form)
        try:
            yield sow_pb2.QueueMessage(sub_id=sub_id, registered=sow_pb2.Registered())
            while context.is_active() and not consumer.closed:
                try:
                    delivery = consumer.inbox.get(timeout=IDLE_CHECK_S)
                except queue.Empty:
                    continue
                ended = delivery is None
                leases = [] if delivery is None else [_lease(delivery, to_record)]
                while not ended and len(leases) < SEND_BATCH:  # what else waits: one message
                    try:
                        delivery = consumer.inbox.get_nowait()
                    except queue.Empty:
                        break
                    ended = delivery is None
                    if delivery is not None:
                        leases.append(_lease(delivery, to_record))
                if len(leases) == 1:
                    yield sow_pb2.QueueMessage(sub_id=sub_id, lease=leases[0])
                elif leases:
                    batch = sow_pb2.QueueLeases(leases=leases)
                    yield sow_pb2.QueueMessage(sub_id=sub_id, leases=batch)
                if ended:
                    break
            if consumer.error is not None:  # its rights changed (subscriptions.rights)
                self._abort(context, consumer.error)
        finally:
            consumer.close()

    def _converter(self, text_form: bool) -> Callable[[changelog.Envelope, Any], Any]:
        """(envelope, the SowRecord to fill) -> that SowRecord."""
        if not text_form:
            return lambda envelope, into: convert.record(envelope, None, into)
        codecs = self._codecs
        return lambda envelope, into: convert.record(envelope, codecs[envelope.topic].to_text, into)


def _wait_s(context: Any) -> float:
    """How long an acknowledgement waits for its count: the call's deadline less a tenth
    to answer, at most WRITE_TIMEOUT_S."""
    remaining: float | None = context.time_remaining()
    return WRITE_TIMEOUT_S if remaining is None else min(remaining * 0.9, WRITE_TIMEOUT_S)


def _lease(delivery: Delivery, to_record: Callable[[changelog.Envelope, Any], Any]) -> Any:
    lease = sow_pb2.QueueLease(
        bookmark=delivery.bookmark,
        lease_deadline_ms=delivery.deadline_ms or 0,
        deliveries=delivery.deliveries,
        barrier=delivery.kind == "barrier",
    )
    to_record(changelog.decode(delivery.envelope), lease.record)
    return lease


def _read_commands(commands: Iterator[Any], consumer: QueueConsumer) -> None:
    """Apply a stream's acknowledgements, cancels and expiries until it ends; its end
    disconnects the consumer."""
    try:
        for command in commands:
            which = command.WhichOneof("command")
            try:
                if which == "ack":
                    consumer.ack(list(command.ack.bookmarks))
                elif which == "cancel":
                    consumer.cancel(list(command.cancel.bookmarks))
                elif which == "expire":
                    consumer.expire(list(command.expire.bookmarks))
            except errors.SowError as exc:  # a bad bookmark: that command only
                log.warning("queue consumer %s: %s refused: %s", consumer.id, which, exc)
    except grpc.RpcError:
        pass  # the client went away: the stream's end disconnects it
    finally:
        consumer.close()
        consumer.inbox.put(None)
