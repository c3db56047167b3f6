"""The Python client's side of the queues: a consumer stream (leases in; acknowledgements,
cancels and expiries out) and the commands outside a stream."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from processor.client.failures import Translate, translate
from processor.wire import sow_pb2

#: How long closing waits for the service to apply the commands sent before it.
DRAIN_S = 5.0


ACTIONS = {
    "ack": sow_pb2.QUEUE_ACK,
    "cancel": sow_pb2.QUEUE_CANCEL,
    "expire": sow_pb2.QUEUE_EXPIRE,
}


class QueueStream:
    """One subscription to a queue. Iterate it (from one thread) for its messages: first
    ``registered``, then a ``lease`` per message leased to it (or barrier message).
    ``ack``, ``cancel`` and ``expire`` may be called from any thread, with bookmarks of
    leases received; ``close()`` ends the subscription, and the leases it still holds
    return to the queue."""

    _END = object()

    def __init__(
        self,
        stub: Any,
        queue_name: str,
        filter: str = "",
        sub_id: str = "",
        max_backlog: int | None = None,
        text_form: bool = False,
        failure: Translate = translate,
    ) -> None:
        self._failure = failure
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        subscribe = sow_pb2.QueueSubscribe(
            queue=queue_name, filter=filter, sub_id=sub_id, text_form=text_form
        )
        if max_backlog is not None:
            subscribe.max_backlog = max_backlog
        self._commands.put(sow_pb2.QueueCommand(subscribe=subscribe))
        self._call = stub.Consume(self._command_stream())
        self.closed = False
        self._iterating = False
        self._ended = threading.Event()

    def _command_stream(self) -> Iterator[Any]:
        while True:
            command = self._commands.get()
            if command is self._END:
                return
            yield command

    def __iter__(self) -> Iterator[Any]:
        self._iterating = True
        try:
            for message in self._call:
                if message.WhichOneof("part") != "leases":
                    yield message
                    continue
                for lease in message.leases.leases:
                    yield sow_pb2.QueueMessage(sub_id=message.sub_id, lease=lease)
        except grpc.RpcError as exc:
            self._ended.set()
            if self.closed and exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._failure(exc) from exc
        except GeneratorExit:  # the caller stopped reading: close() reads the rest
            self._iterating = False
            raise
        self._ended.set()

    def leases(self) -> Iterator[Any]:
        """The leases only (the ``registered`` message skipped)."""
        for message in self:
            if message.WhichOneof("part") == "lease":
                yield message.lease

    def ack(self, bookmarks: Sequence[str]) -> None:
        self._commands.put(sow_pb2.QueueCommand(ack=sow_pb2.QueueBookmarks(bookmarks=bookmarks)))

    def cancel(self, bookmarks: Sequence[str]) -> None:
        command = sow_pb2.QueueCommand(cancel=sow_pb2.QueueBookmarks(bookmarks=bookmarks))
        self._commands.put(command)

    def expire(self, bookmarks: Sequence[str]) -> None:
        command = sow_pb2.QueueCommand(expire=sow_pb2.QueueBookmarks(bookmarks=bookmarks))
        self._commands.put(command)

    def close(self, drain_s: float = DRAIN_S) -> None:
        """End the subscription (idempotent): the service first applies the commands
        sent (up to ``drain_s``), then the leases it still holds return to the queue."""
        if self.closed:
            return
        self.closed = True
        self._commands.put(self._END)  # the service ends the stream once it read them
        if not self._iterating:
            threading.Thread(target=self._drain, daemon=True).start()
        if not self._ended.wait(drain_s):
            self._call.cancel()

    def _drain(self) -> None:
        """Read what is left of the stream (leases sent while it closed: they return)."""
        try:
            for _ in self._call:
                pass
        except grpc.RpcError:
            pass
        finally:
            self._ended.set()

    def __enter__(self) -> QueueStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def act(
    stub: Any,
    queue_name: str,
    action: str,
    bookmarks: Sequence[str] = (),
    filter: str = "",
    timeout: float | None = 30.0,
    failure: Translate = translate,
) -> Any:
    """Acknowledge, cancel or expire messages of a queue by bookmark (or acknowledge
    those a filter matches); returns the QueueActionReply: ``commands``, the command
    records the service wrote, and for an acknowledgement ``removed``, how many messages
    it removed (once the queue's partitions applied it)."""
    request = sow_pb2.QueueActionRequest(
        queue=queue_name, action=ACTIONS[action], bookmarks=bookmarks, filter=filter
    )
    try:
        reply = stub.Act(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise failure(exc) from exc
    return reply
