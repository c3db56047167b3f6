"""What every gRPC call of the Sow service shares: the failure-to-status table, the
call's context and deadline budgets, and the shapes of publish replies and acks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from processor import errors
from processor.publish.requests import Published
from processor.requests.events import CLIENT_NAME_HEADER
from processor.security import OPEN, RequestContext
from processor.wire import sow_pb2

#: gRPC worker threads, and how many of them publishes may hold while they wait for the
#: broker: the others always serve reads, which answer from memory even while the broker
#: is unreachable.
WORKERS = 32
PUBLISH_SLOTS = 24
#: The longest a publish waits for the broker when the request has no deadline.
DEFAULT_WAIT_S = 30.0
#: A request's deadline is honoured with up to this much room to send the answer.
DEADLINE_MARGIN_S = 0.25

#: A failure's kind (``SowError.failure``) -> its gRPC status code.
STATUS_FOR: dict[str, grpc.StatusCode] = {
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "not-entitled": grpc.StatusCode.PERMISSION_DENIED,
    "not-found": grpc.StatusCode.NOT_FOUND,
    "exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unsupported": grpc.StatusCode.UNIMPLEMENTED,
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "timeout": grpc.StatusCode.DEADLINE_EXCEEDED,
    "precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "internal": grpc.StatusCode.INTERNAL,
}


#: Builds a call's RequestContext from its gRPC ServicerContext: authenticates the
#: caller (aborting UNAUTHENTICATED) and resolves its rights.
ContextOf = Callable[[Any], RequestContext]


def open_context(context: Any) -> RequestContext:
    """The call's context when security is off: anonymous, every right, its deadline."""
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return OPEN
    return RequestContext(deadline=time.monotonic() + remaining)


def client_name(context: Any, caller: RequestContext) -> str:
    """The client of a call, as its client-status events name it: the name it gave
    (metadata ``sow-client-name``), else its principal's."""
    given = dict(context.invocation_metadata() or ()).get(CLIENT_NAME_HEADER, "")
    return str(given) or caller.principal.name


def status_for(error: errors.SowError) -> grpc.StatusCode:
    """The gRPC status code of a failure."""
    return STATUS_FOR.get(error.failure, grpc.StatusCode.INTERNAL)


def time_left(context: Any, default: float = DEFAULT_WAIT_S) -> float:
    """How long a request may still wait: its deadline less room to answer, capped."""
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return default
    return max(min(remaining - min(DEADLINE_MARGIN_S, remaining * 0.1), default), 0.0)


def wait_budget(context: Any, asked_s: float) -> float:
    """How long a query may wait (for ``min_position`` or a catch-up): what it asked
    for, else its deadline less room to answer, else the query engine's default (0)."""
    if asked_s > 0:
        return asked_s
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return 0.0
    return max(remaining - min(DEADLINE_MARGIN_S, remaining * 0.1), 0.001)


def busy_error() -> errors.SowError:
    return errors.BrokerError(
        f"{PUBLISH_SLOTS} publishes are already waiting for the broker; retry shortly "
        "(reads are still served)"
    )


def publish_reply(result: Published) -> Any:
    topic, partition, offset = result.position
    return sow_pb2.PublishReply(
        position=sow_pb2.Position(topic=topic, partition=partition, offset=offset),
        sow_key=result.sow_key,
    )


def publish_ack(batch_id: int, results: list[Published | errors.SowError]) -> Any:
    """A batch's ack, built column by column."""
    topics: list[str] = []
    partitions: list[int] = []
    offsets: list[int] = []
    keys: list[str] = []
    refused = []
    for index, result in enumerate(results):
        if isinstance(result, errors.SowError):
            topics.append("")
            partitions.append(-1)
            offsets.append(-1)
            keys.append("")
            refused.append(
                sow_pb2.Refusal(index=index, error_code=status_for(result).name, error=str(result))
            )
            continue
        (topic, partition, offset), key = result
        topics.append(topic)
        partitions.append(partition)
        offsets.append(offset)
        keys.append(key)
    log_topic = ""
    if topics and not refused and len(set(topics)) == 1:
        log_topic, topics = topics[0], []
    return sow_pb2.PublishAck(
        batch_id=batch_id,
        log_topic=log_topic,
        log_topics=topics,
        partitions=partitions,
        offsets=offsets,
        sow_keys=keys,
        refused=refused,
    )


#: Statuses of calls that waited on the broker in vain.
_BROKER_WAITS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class Calls:
    """Each call's context (``contexts``, default :func:`open_context`) and its refusals:
    a NotEntitledError is counted and logged by ``audit`` (:class:`~processor.server.
    audit.Audit`) under the principal of the call, before the call is aborted."""

    def __init__(
        self,
        contexts: ContextOf | None = None,
        audit: Any = None,
        blocking: Callable[[], str | None] | None = None,
    ) -> None:
        self._contexts = contexts or open_context
        self._audit = audit
        self._blocking = blocking
        #: The caller of the call this worker thread serves (for the audit).
        self._local = threading.local()

    def context(self, context: Any) -> RequestContext:
        """The call's RequestContext (aborts an unauthenticated call)."""
        caller = self._contexts(context)
        self._local.caller = caller
        return caller

    def status(self, error: errors.SowError, caller: RequestContext | None = None) -> Any:
        """The status of a failure; a refused right goes to the audit first."""
        if self._audit is not None and isinstance(error, errors.NotEntitledError):
            caller = caller or getattr(self._local, "caller", None)
            name = caller.principal.name if caller is not None else "unknown"
            self._audit.refused(name, "not-entitled", str(error))
        return status_for(error)

    def abort(self, context: Any, error: errors.SowError) -> None:
        """End the call with the failure's status and message; a call that failed for
        want of the broker while the Kafka cluster is blocking also says why."""
        status = self.status(error)
        message = str(error)
        if status in _BROKER_WAITS and self._blocking is not None:
            blocking = self._blocking()
            if blocking is not None:
                message = f"{message} (the Kafka cluster is blocking: {blocking})"
        context.abort(status, message)
