"""A small Python client for the gRPC service (used by the CLI and tests)."""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import grpc

from processor.client.credentials import ClientSecurity, with_client_name
from processor.client.failures import Translate, bound, translate
from processor.client.publishing import (
    PublishResult,
    _position,
    _StreamPublish,
)
from processor.client.queues import QueueStream
from processor.client.queues import act as queue_act
from processor.errors import ChannelSecurityError, InvalidRequestError, ServiceError
from processor.wire import sow_pb2, sow_pb2_grpc

__all__ = ["PublisherSequences", "ServiceError", "SowClient", "SubscriptionStream", "ack_type_of"]

#: Status codes after which a publish with a sequence number is sent again: it may or may
#: not be in the log, and the processor discards a duplicate.
RETRYABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


#: AMPS's ack types a publish may ask for, by name.
ACK_TYPES = {"persisted": sow_pb2.PERSISTED, "processed": sow_pb2.PROCESSED}


def ack_type_of(name: str) -> Any:
    """The AckType for ``name`` ("persisted" or "processed"); InvalidRequestError else."""
    try:
        return ACK_TYPES[name]
    except KeyError:
        raise InvalidRequestError(
            f"ack {name!r} is not an ack type this service gives: use one of {', '.join(ACK_TYPES)}"
        ) from None


class PublisherSequences:
    """Publisher names and sequence numbers for duplicate detection (AMPS publish store).

    Each thread publishes under a name of its own, ``prefix`` plus a suffix (default
    prefix: host, process and a random part; "" turns detection off), with sequence
    numbers 1, 2, 3, ... Thread-safe.
    """

    def __init__(self, prefix: str | None = None) -> None:
        if prefix is None:
            prefix = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._prefix = prefix
        self._names = itertools.count(1)
        self._local = threading.local()

    def new_name(self) -> str:
        """A publisher name not used before ("" when detection is off)."""
        return f"{self._prefix}.{next(self._names)}" if self._prefix else ""

    def take(self, count: int) -> tuple[str, int]:
        """This thread's publisher name and the first of ``count`` new sequence numbers
        (("", 0) when detection is off)."""
        local = self._local
        if getattr(local, "name", None) is None:
            local.name = self.new_name()
            local.sequence = 0
        if not local.name:
            return "", 0
        first = local.sequence + 1
        local.sequence += count
        return local.name, first


class SowClient:
    """Blocking client. ``address`` is ``host:port``. Thread-safe.

    Publishes carry duplicate detection by default: each thread publishes under its own
    publisher name (``publisher`` plus a per-thread suffix; default: host, process and a
    random part) with sequence numbers 1, 2, 3, ...; a publish that fails with
    UNAVAILABLE or DEADLINE_EXCEEDED is sent again with the same name and sequence up to
    ``retries`` times, and the processor applies it once. ``publisher=""`` turns this off
    (then a timed-out publish may or may not have been written; nothing is retried).

    ``security``: TLS, mutual TLS and the credentials sent with every call
    (:class:`~processor.client.credentials.ClientSecurity`; default: plaintext, none).
    A failure of the channel's security raises ChannelSecurityError and is not retried.
    """

    def __init__(
        self,
        address: str,
        publisher: str | None = None,
        retries: int = 3,
        *,
        security: ClientSecurity | None = None,
        client_name: str = "",
    ) -> None:
        """``client_name``: how the service's client-status events (/AMPS/ClientStatus)
        name this client (default: its principal's name)."""
        self.address = address
        self.security = security or ClientSecurity()
        self._translate: Translate = bound(address, self.security)
        self._channel = self.security.channel(address)
        if client_name:
            self._channel = with_client_name(self._channel, client_name)
        self._stub = sow_pb2_grpc.SowStub(self._channel)  # type: ignore[no-untyped-call]
        self._subscriptions = sow_pb2_grpc.SubscriptionsStub(self._channel)  # type: ignore[no-untyped-call]
        self._queues = sow_pb2_grpc.QueuesStub(self._channel)  # type: ignore[no-untyped-call]
        self._sequences = PublisherSequences(publisher)
        self._retries = retries

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_publisher(self) -> str:
        """A publisher name of this client not used before ("" when detection is off)."""
        return self._sequences.new_name()

    def _next_sequence(self) -> tuple[str, int]:
        return self._sequences.take(1)

    def publish(
        self,
        topic: str,
        data: bytes,
        sow_key: str = "",
        expiration: float = 0.0,
        correlation_id: str = "",
        timeout: float = 30.0,
        text_form: bool = False,
        delta: bool = False,
        ack: str = "persisted",
    ) -> Any:
        """Publish one message; the reply has its log position and SowKey. ``timeout``
        covers every attempt. ``delta``: a delta_publish, merged into the stored record
        (it must give the Key fields). ``ack`` (AMPS's ack types): "persisted", the
        reply comes once the message is in the log; "processed", once it is also applied,
        so a query or sow_and_subscribe of this service sees it."""
        ack_type = ack_type_of(ack)
        publisher, sequence = self._next_sequence()
        request = sow_pb2.PublishRequest(
            topic=topic,
            data=data,
            sow_key=sow_key,
            expiration=expiration,
            correlation_id=correlation_id,
            text_form=text_form,
            publisher=publisher,
            sequence=sequence,
            delta=delta,
            ack=ack_type,
        )
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            try:
                return self._stub.Publish(request, timeout=max(deadline - time.monotonic(), 0))
            except grpc.RpcError as exc:
                error = self._translate(exc)
                attempt += 1
                pause = 0.05 * 2**attempt
                if (
                    not sequence
                    or not _retryable(error)
                    or attempt > self._retries
                    or time.monotonic() + pause >= deadline
                ):
                    raise error from exc
                time.sleep(pause)

    def publish_stream(
        self,
        topic: str,
        messages: Iterable[bytes],
        *,
        text_form: bool = False,
        batch_size: int = 500,
        window: int = 8,
        ack_timeout: float | None = None,
        ack: str = "persisted",
        **options: Any,
    ) -> Iterator[PublishResult]:
        """Publish many messages over one stream; yield one result per message, in order
        (a refused message's has ``error_code`` and ``error``; the others have position
        and SowKey). ``options`` are PublishRequest fields for every message
        (expiration, correlation_id, sow_key, delta). ``ack``: as for ``publish``, for
        each batch.

        At most ``window`` batches are unacknowledged at a time. When the stream breaks
        with UNAVAILABLE, it is opened again and the unacknowledged batches are resent
        with their sequence numbers (up to ``retries`` times in a row), so no message is
        lost or applied twice.

        With ``ack_timeout``, a service that acknowledges nothing for that many seconds
        while batches are outstanding ends the publish with DeadlineError (the outstanding
        messages may or may not be in the log). Waiting for ``messages`` never counts.
        """
        if ack_timeout is not None and not ack_timeout > 0:
            raise InvalidRequestError(
                f"ack_timeout must be a positive number of seconds (or None), got {ack_timeout!r}"
            )
        publish = _StreamPublish(
            self._stub,
            topic,
            iter(messages),
            self.new_publisher(),
            batch_size,
            window,
            text_form,
            {**options, "ack": ack_type_of(ack)},
            ack_timeout,
            self.address,
        )
        failures = 0
        while True:
            try:
                for replies in publish.run():
                    failures = 0
                    yield from replies
                return
            except grpc.RpcError as exc:
                error = self._translate(exc)
                failures += 1
                if not publish.publisher or not _retryable(error):
                    raise error from exc
                if failures > self._retries:
                    raise error from exc
                time.sleep(0.05 * 2**failures)

    def query_stream(
        self,
        topic: str,
        sow_keys: Sequence[str] = (),
        query_id: str = "",
        batch_size: int = 0,
        min_position: Sequence[Any] = (),
        timeout: float = 60.0,
        **fields: Any,
    ) -> Iterator[Any]:
        """The raw reply stream: group begin, batches, group end. ``min_position`` takes
        Positions, anything with ``topic``, ``partition`` and ``offset`` (a publish's
        ``position``), or dicts of those."""
        request = sow_pb2.SowQueryRequest(
            topic=topic,
            sow_keys=list(sow_keys),
            query_id=query_id,
            batch_size=batch_size,
            min_position=[_position(p) for p in min_position],
            **fields,
        )
        try:
            yield from self._stub.SowQuery(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise self._translate(exc) from exc

    def query(self, topic: str, **kwargs: Any) -> tuple[list[Any], Any, Any]:
        """All records of a query, with its group begin and group end."""
        records: list[Any] = []
        begin = end = None
        for reply in self.query_stream(topic, **kwargs):
            part = reply.WhichOneof("part")
            if part == "group_begin":
                begin = reply.group_begin
            elif part == "batch":
                records.extend(reply.batch.records)
            else:
                end = reply.group_end
        return records, begin, end

    def delete(
        self,
        topic: str,
        sow_keys: Sequence[str] = (),
        timeout: float = 30.0,
        *,
        filter: str = "",
        data: bytes = b"",
        text_form: bool = False,
    ) -> Any:
        """sow_delete by SowKeys, by filter, or by message data (exactly one of them)."""
        request = sow_pb2.SowDeleteRequest(
            topic=topic, sow_keys=list(sow_keys), filter=filter, data=data, text_form=text_form
        )
        try:
            return self._stub.SowDelete(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise self._translate(exc) from exc

    def subscribe(self, topic: str, **options: Any) -> SubscriptionStream:
        """A live subscription: every later matching change, as SubscriptionMessages
        with ``change`` set. ``options`` are SubscribeRequest fields (filter, sub_id, oof,
        no_empties, text_form, max_backlog; projection and grouping for an aggregated
        subscription's live group rows). Iterate it; ``cancel()`` (or leaving its
        ``with`` block) ends it cleanly."""
        request = sow_pb2.SubscribeRequest(topic=topic, **options)
        return SubscriptionStream(self._subscriptions.Subscribe(request), self._translate)

    def sow_and_subscribe(self, topic: str, **options: Any) -> SubscriptionStream:
        """The query result (group_begin, batch..., group_end with the position vector it
        reflects), then every later matching change with no gap and no duplicate.
        ``options`` as for :meth:`subscribe`, plus batch_size and query_id."""
        request = sow_pb2.SubscribeRequest(topic=topic, **options)
        return SubscriptionStream(self._subscriptions.SowAndSubscribe(request), self._translate)

    def session(self) -> SubscriptionSession:
        """A session: many subscriptions on one stream (``subscribe``,
        ``sow_and_subscribe`` and ``unsubscribe`` on it; iterate it for every
        subscription's messages, each with its ``sub_id``)."""
        return SubscriptionSession(self._subscriptions, self._translate)

    def consume(self, queue_name: str, **options: Any) -> QueueStream:
        """Subscribe to a queue: leases as they come (options: ``filter``, ``sub_id``,
        ``max_backlog``, ``text_form``; see :class:`~processor.client.queues.QueueStream`)."""
        return QueueStream(self._queues, queue_name, failure=self._translate, **options)

    def queue_act(self, queue_name: str, action: str, **options: Any) -> Any:
        """``ack``, ``cancel`` or ``expire`` messages of a queue outside a stream
        (options: ``bookmarks``, ``filter``, ``timeout``); the QueueActionReply
        (``commands`` written; ``removed``: the messages an ``ack`` removed)."""
        return queue_act(self._queues, queue_name, action, failure=self._translate, **options)


def _retryable(error: ServiceError) -> bool:
    """Whether a publish that failed with ``error`` is sent again (with its sequence)."""
    return error.code in RETRYABLE and not isinstance(error, ChannelSecurityError)


class SubscriptionStream:
    """The messages of one subscription, as they come (iterate it from one thread);
    changes the service sent together (``changes``) come out one ``change`` at a time.

    ``cancel()`` may be called from any thread: the iteration then ends without an
    error. A stream the service ends raises ServiceError (a slow consumer gets
    RESOURCE_EXHAUSTED with "slow consumer: N messages behind").
    """

    def __init__(self, call: Any, failure: Translate = translate) -> None:
        self._call = call
        self._failure = failure
        self.cancelled = False

    def __iter__(self) -> Iterator[Any]:
        try:
            for message in self._call:
                if message.WhichOneof("part") != "changes":
                    yield message
                    continue
                for change in message.changes.changes:
                    yield sow_pb2.SubscriptionMessage(sub_id=message.sub_id, change=change)
        except grpc.RpcError as exc:
            if self.cancelled and exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._failure(exc) from exc

    def cancel(self) -> None:
        """End the subscription (idempotent)."""
        self.cancelled = True
        self._call.cancel()

    def __enter__(self) -> SubscriptionStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class SubscriptionSession(SubscriptionStream):
    """Many subscriptions on one stream. Each needs a ``sub_id`` unique in the session;
    its messages come tagged with it, as from a single subscription, and a subscription
    that ends (refused, unsubscribed, or a slow consumer) sends one ``ended`` message
    (code and details); the session and the others go on. Commands may be sent from any
    thread; iterate from one. ``cancel()`` ends the whole session."""

    _END = object()

    def __init__(self, stub: Any, failure: Translate = translate) -> None:
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        super().__init__(stub.Session(self._command_stream()), failure)

    def _command_stream(self) -> Iterator[Any]:
        while True:
            command = self._commands.get()
            if command is self._END:
                return
            yield command

    def subscribe(self, topic: str, sub_id: str, **options: Any) -> None:
        """Add a live subscription (options as for :meth:`SowClient.subscribe`)."""
        request = sow_pb2.SubscribeRequest(topic=topic, sub_id=sub_id, **options)
        self._commands.put(sow_pb2.SessionCommand(subscribe=request))

    def sow_and_subscribe(self, topic: str, sub_id: str, **options: Any) -> None:
        """Add a sow_and_subscribe (options as for :meth:`SowClient.sow_and_subscribe`)."""
        request = sow_pb2.SubscribeRequest(topic=topic, sub_id=sub_id, **options)
        self._commands.put(sow_pb2.SessionCommand(sow_and_subscribe=request))

    def unsubscribe(self, sub_id: str) -> None:
        """End one subscription; an ``ended`` message with code CANCELLED confirms it."""
        self._commands.put(sow_pb2.SessionCommand(unsubscribe=sub_id))

    def cancel(self) -> None:
        self._commands.put(self._END)
        super().cancel()
