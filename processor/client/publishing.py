"""Publish results, and the publish stream: a window of batches in flight, acknowledged in order."""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import grpc

from processor.errors import DeadlineError, SowError
from processor.wire import sow_pb2


class LogPosition(NamedTuple):
    """Where a message landed in the log (pass it as a query's ``min_position``)."""

    topic: str
    partition: int
    offset: int


class PublishResult(NamedTuple):
    """One message's outcome in a publish stream: its SowKey and position, or why it was
    refused (``error_code`` is the gRPC status name; nothing was written for it)."""

    sow_key: str
    position: LogPosition | None
    error_code: str = ""
    error: str = ""


class _StreamPublish:
    """One bulk publish over PublishStream, resumable: batches stay in ``unacked`` until
    their ack arrives; ``run`` (re)opens the stream, resends them first, then goes on with
    the source."""

    def __init__(
        self,
        stub: Any,
        topic: str,
        source: Iterator[bytes],
        publisher: str,
        batch_size: int,
        window: int,
        text_form: bool,
        options: dict[str, Any],
        ack_timeout: float | None = None,
        address: str = "",
    ) -> None:
        self.stub = stub
        self.address = address
        self.ack_timeout = ack_timeout
        #: ``time.monotonic()`` of the last ack, or of the send that left the service
        #: owing one (the ack timeout's clock).
        self.owed_since = 0.0
        self.topic = topic
        self.source = source
        self.publisher = publisher
        self.batch_size = max(batch_size, 1)
        self.window = max(window, 1)
        self.options = options
        self.text_form = text_form
        self.sequence = 0
        self.batch_id = 0
        self.unacked: collections.deque[Any] = collections.deque()

    def _next_batch(self) -> Any:
        """The next batch from the source in the columnar form, or None at its end."""
        data = list(itertools.islice(self.source, self.batch_size))
        if not data:
            return None
        first_sequence = 0
        if self.publisher:
            first_sequence = self.sequence + 1
            self.sequence += len(data)
        self.batch_id += 1
        options = dict(self.options)
        sow_key = options.pop("sow_key", "")
        return sow_pb2.PublishBatch(
            batch_id=self.batch_id,
            topic=self.topic,
            data=data,
            text_form=self.text_form,
            publisher=self.publisher,
            first_sequence=first_sequence,
            sow_keys=[sow_key] * len(data) if sow_key else [],
            **options,
        )

    def run(self) -> Iterator[list[PublishResult]]:
        credits = threading.Semaphore(self.window)
        closed = threading.Event()
        resend = list(self.unacked)

        def requests() -> Iterator[Any]:
            for batch in resend:
                while not credits.acquire(timeout=0.1):
                    if closed.is_set():
                        return
                yield batch
            while True:
                while not credits.acquire(timeout=0.1):
                    if closed.is_set():
                        return
                batch = self._next_batch()
                if batch is None:
                    return
                if not self.unacked:
                    self.owed_since = time.monotonic()
                self.unacked.append(batch)
                yield batch

        self.owed_since = time.monotonic()
        call = self.stub.PublishStream(requests())
        expired = self._watch(call, closed)
        try:
            for ack in self._acks(call, expired):
                self.owed_since = time.monotonic()
                batch = self.unacked.popleft()
                if batch.batch_id != ack.batch_id:
                    raise SowError(
                        f"the service acknowledged batch {ack.batch_id} but {batch.batch_id} "
                        "was next; the stream is out of order"
                    )
                credits.release()
                yield _results(ack)
        finally:
            closed.set()
            call.cancel()

    def _watch(self, call: Any, closed: threading.Event) -> threading.Event:
        """With an ack timeout, a thread that cancels ``call`` once the service owes an
        ack for longer; the event it returns is set when it did."""
        expired = threading.Event()
        limit = self.ack_timeout
        if limit is None:
            return expired

        def watch() -> None:
            while not closed.wait(min(limit / 4, 0.1)):
                if self.unacked and time.monotonic() - self.owed_since > limit:
                    expired.set()
                    call.cancel()
                    return

        threading.Thread(target=watch, name="publish-ack-timeout", daemon=True).start()
        return expired

    def _acks(self, call: Any, expired: threading.Event) -> Iterator[Any]:
        """The call's acks; a cancel by the ack timeout becomes DeadlineError."""
        try:
            yield from call
        except grpc.RpcError as exc:
            if expired.is_set():
                outstanding = sum(len(batch.data) for batch in self.unacked)
                raise DeadlineError(
                    f"the service at {self.address} acknowledged nothing for "
                    f"{self.ack_timeout:g}s with {outstanding:,} messages outstanding (they "
                    "may or may not be in the log)"
                ) from exc
            raise


def _results(ack: Any) -> list[PublishResult]:
    topics = ack.log_topics or itertools.repeat(ack.log_topic, len(ack.offsets))
    results = [
        PublishResult(key, LogPosition(topic, partition, offset))
        for topic, partition, offset, key in zip(
            topics, ack.partitions, ack.offsets, ack.sow_keys, strict=True
        )
    ]
    for refusal in ack.refused:
        results[refusal.index] = PublishResult("", None, refusal.error_code, refusal.error)
    return results


def _position(position: Any) -> Any:
    if isinstance(position, sow_pb2.Position):
        return position
    if isinstance(position, dict):
        return sow_pb2.Position(**position)
    return sow_pb2.Position(
        topic=position.topic, partition=position.partition, offset=position.offset
    )
