"""A publish stream for any transport: batches handed to the log as they arrive, up to a
window of unacknowledged ones, each acknowledged in order once the broker has all of it
(and, when asked, once the SOW reflects it); a bad message is refused in its batch's
acknowledgement and the stream goes on."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from processor import errors
from processor.log import LogPosition
from processor.publish.gateway import PendingPublishes
from processor.publish.requests import Published
from processor.requests.queries import Queries

#: Unacknowledged batches a publish stream may have in the log writer.
STREAM_WINDOW = 16

#: One batch's outcome: each message's place in the log, or why it was refused.
Results = list[Published | errors.SowError]


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch as the transport read it: its id, its publishes handed to the gateway
    (``publish``, called on the stream's reading thread), and whether its
    acknowledgement waits until the SOW reflects it (``processed``)."""

    batch_id: int
    publish: Callable[[], PendingPublishes]
    processed: bool = False


def last_per_partition(results: Results) -> list[LogPosition]:
    """The last position a batch's publishes reached in each log partition."""
    last: dict[tuple[str, int], int] = {}
    for result in results:
        if not isinstance(result, errors.SowError):
            topic, partition, offset = result.position
            last[(topic, partition)] = max(offset, last.get((topic, partition), -1))
    return [(topic, partition, offset) for (topic, partition), offset in last.items()]


def acknowledged(
    batches: Iterable[Batch],
    queries: Queries,
    wait_s: Callable[[], float],
    window: int = STREAM_WINDOW,
) -> Iterator[tuple[int, Results]]:
    """Each batch's id and results, in order (see the module doc). ``batches`` is read
    on a thread of its own, ``window`` batches ahead; ``wait_s()`` is how long the next
    acknowledgement may wait (the call's deadline). UnconfirmedWriteError when the
    broker does not confirm a batch in time, PositionTimeoutError when a processed one
    is not applied in time; an error reading ``batches`` (the caller left) is raised
    here."""
    pending: queue.Queue[tuple[int, PendingPublishes, bool] | BaseException | None]
    pending = queue.Queue(maxsize=window)
    ended = threading.Event()

    def hand_over(item: tuple[int, PendingPublishes, bool] | BaseException | None) -> bool:
        while not ended.is_set():
            try:
                pending.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not hand_over((batch.batch_id, batch.publish(), batch.processed)):
                    return
            hand_over(None)
        except BaseException as exc:  # the caller cancelled, or a bug: end the stream
            hand_over(exc)

    threading.Thread(target=read, name="sow-publish-stream", daemon=True).start()
    try:
        while True:
            item = pending.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            batch_id, publishes, processed = item
            timeout = wait_s()
            if not publishes.wait(timeout):
                raise errors.UnconfirmedWriteError(
                    f"the broker did not confirm batch {batch_id} within {timeout:.3g}s; "
                    "its messages may still be written. Resend the unacknowledged "
                    "batches with the same publisher and sequences"
                )
            results = publishes.results()
            if processed:
                queries.until_processed(last_per_partition(results), wait_s())
            yield batch_id, results
    finally:
        ended.set()
