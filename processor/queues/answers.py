"""A queue command's answer: how many messages an acknowledgement removed.

A ``sow_delete`` on a queue (an acknowledgement by bookmark or by filter) reports the
number of messages it removed, which only the queue's partitions know: a message leased
to another subscription is refused under ``Leasing`` strict, an unknown bookmark removes
nothing, a filter removes whatever it matches there and then.

* The query service writes the command with header :data:`REQUEST_HEADER`, a request id
  unique to it (:func:`request_headers`).
* The partition that applies it writes an answer on the queue's deliveries topic, in the
  transaction that applies the command (:func:`answered`): key the request id, header
  :data:`~processor.queues.commands.DELIVERY_HEADER` :data:`RESULT`, value the number of
  messages removed. An aborted transaction's answer is never read (the service reads
  read_committed), a redone one answers again: the count is the committed removal's.
* The service sums the answers of the partitions it wrote to (:func:`decode_answer`).

A record without the header (a consumer's acknowledgement, a cancel, a heartbeat) is
not answered.
"""

from __future__ import annotations

from collections.abc import Sequence

from processor.engine.partition import PartitionState
from processor.engine.transaction import PartitionBatch
from processor.log import Headers, Record
from processor.queues.commands import BOOKMARK_HEADER, DELIVERY_HEADER
from processor.queues.model import Change, Outcome

#: A command record's header: the request id its answer is keyed by.
REQUEST_HEADER = "sow.queue-request"
#: The delivery kind of an answer.
RESULT = "result"
_RESULT_HEADERS: Headers = [(DELIVERY_HEADER, RESULT.encode()), (BOOKMARK_HEADER, b"")]


def request_headers(request: str) -> Headers:
    """The header a command record carries to be answered."""
    return [(REQUEST_HEADER, request.encode())]


def request_of(headers: Headers | None) -> str | None:
    """The request id a command record carries (None: it wants no answer)."""
    raw = next((v for name, v in headers or () if name == REQUEST_HEADER), None)
    return raw.decode(errors="replace") if raw else None


def removed(outcomes: Sequence[Outcome], batch: PartitionBatch) -> int:
    """How many messages ``outcomes`` remove by acknowledgement, before they are
    persisted: an acknowledgement of a message not stored (deferred) removes none."""
    return sum(
        1 for o in outcomes if o.change is Change.ACKED and batch.lookup(o.bookmark) is not None
    )


def answered(
    record: Record, outcomes: list[Outcome], batch: PartitionBatch, state: PartitionState
) -> None:
    """When the command ``record`` asks for an answer, write it (how many messages its
    ``outcomes`` remove) to the deliveries topic in ``batch``. Call it before the
    outcomes are persisted."""
    request = request_of(record.headers())
    if request is not None:
        key, value, headers = answer(request, removed(outcomes, batch))
        batch.produce(state.topic.deliveries_topic, value, key, state.partition, headers)


def answer(request: str, count: int) -> tuple[bytes, bytes, Headers]:
    """An answer record's key, value and headers."""
    return request.encode(), str(count).encode(), list(_RESULT_HEADERS)


def decode_answer(value: bytes | None, headers: Headers | None) -> int | None:
    """The count of an answer record (None: the record is not an answer; ValueError: an
    answer without a count)."""
    kind = next((v for name, v in headers or () if name == DELIVERY_HEADER), None)
    if kind != RESULT.encode():
        return None
    return int(value or b"")
