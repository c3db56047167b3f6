"""Domain values as the wire's messages (schemas/sow.proto): one conversion each, shared
by the query and subscription servicers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor.changelog import Envelope
from processor.log import LogPosition
from processor.requests.changes import Change
from processor.requests.queries import Row, stats_fields
from processor.subscriptions.model import ChangeKind
from processor.wire import sow_pb2


def position(where: LogPosition, into: Any = None) -> Any:
    """A (topic, partition, offset) as a Position (``into``: that Position, filled)."""
    topic, partition, offset = where
    if into is None:
        return sow_pb2.Position(topic=topic, partition=partition, offset=offset)
    into.topic, into.partition, into.offset = topic, partition, offset
    return into


def record(
    envelope: Envelope, to_text: Callable[[bytes], bytes] | None = None, into: Any = None
) -> Any:
    """A SOW record as a SowRecord (its data through ``to_text`` when given); ``into``:
    that SowRecord (a field of a message being built), filled in place. Fields are set
    one by one: building a message from keywords costs about three times as much, and a
    message given as a keyword is copied (this runs for every record sent)."""
    target = sow_pb2.SowRecord() if into is None else into
    target.sow_key = envelope.sow_key
    target.data = envelope.data if to_text is None else to_text(envelope.data)
    target.topic = envelope.topic
    target.message_type = envelope.message_type
    where = target.position
    where.topic = envelope.log_topic
    where.partition = envelope.log_partition
    where.offset = envelope.log_offset
    target.publish_time_ms = envelope.publish_time_ms
    target.apply_time_ms = envelope.apply_time_ms
    if envelope.expiration_ms:
        target.expiration_ms = envelope.expiration_ms
    if envelope.correlation_id:
        target.correlation_id = envelope.correlation_id
    return target


def row(answered: Row, into: Any) -> Any:
    """A query answer's row as a SowRecord (``into``), with a queue message's state."""
    target = record(answered.envelope, None, into)
    if answered.queue:
        state = answered.state
        if state is None:
            target.queue_state.SetInParent()
        else:
            queue_state = target.queue_state
            queue_state.leased = state.holder is not None
            queue_state.leased_to = state.holder or ""
            queue_state.lease_deadline_ms = state.deadline_ms or 0
            queue_state.deliveries = state.deliveries
            queue_state.cancels = state.cancels
    return target


_KINDS = {
    ChangeKind.PUBLISH: sow_pb2.CHANGE_PUBLISH,
    ChangeKind.DELETE: sow_pb2.CHANGE_DELETE,
    ChangeKind.OOF: sow_pb2.CHANGE_OOF,
}


def change(out: Change) -> Any:
    """A subscription's change as a Change message."""
    message = sow_pb2.Change(kind=_KINDS[out.kind], topic=out.topic, sow_key=out.sow_key)
    record(out.record, None, message.record)
    position(out.position, message.changelog_position)
    if out.oof_reason is not None:
        message.oof_reason = out.oof_reason
    if out.current is not None:
        record(out.current, None, message.current)
    if out.delta:
        message.delta = True
    return message


#: A query's counts as a group end's fields.
stats = stats_fields
