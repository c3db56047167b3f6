"""A ``sow_delete`` for any transport: by SowKeys, filter or message data on a SOW
topic, or on a queue an acknowledgement of its messages by bookmark or filter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from processor import errors
from processor.publish.gateway import Gateway
from processor.publish.requests import Deleted
from processor.security import RequestContext
from processor.subscriptions.queues import QueueHub


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """A sow_delete: ``topic`` and exactly one selector (``sow_keys``, ``filter`` or
    ``data``); ``timeout_s`` how long to wait for its effect (0: the default)."""

    topic: str
    sow_keys: Sequence[str] = ()
    filter: str = ""
    data: bytes = b""
    text_form: bool = False
    timeout_s: float = 0.0


def delete(
    gateway: Gateway,
    queues: QueueHub | None,
    request: DeleteRequest,
    caller: RequestContext,
    queue_wait_s: float,
) -> Deleted:
    """Carry out ``request`` for ``caller``; on a queue, wait up to ``queue_wait_s`` for
    its partitions to remove the messages."""
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
    if queues is not None and request.topic in queues.names():
        return _acknowledge(queues, request, queue_wait_s, caller)
    timeout = request.timeout_s
    if request.filter:
        return gateway.delete_by_filter(request.topic, request.filter, timeout, caller)
    if request.data:
        return gateway.delete_by_data(
            request.topic, request.data, timeout, request.text_form, caller
        )
    return gateway.delete(request.topic, list(request.sow_keys), timeout, caller)


def _acknowledge(
    queues: QueueHub, request: DeleteRequest, wait_s: float, caller: RequestContext
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
