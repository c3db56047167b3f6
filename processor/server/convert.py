"""Domain values as the wire's messages (schemas/sow.proto): one conversion each, shared
by the query and subscription servicers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor.changelog import Envelope
from processor.log import LogPosition
from processor.query.sow import QueryStats
from processor.wire import sow_pb2


def position(where: LogPosition) -> Any:
    """A (topic, partition, offset) as a Position."""
    topic, partition, offset = where
    return sow_pb2.Position(topic=topic, partition=partition, offset=offset)


def record(envelope: Envelope, to_text: Callable[[bytes], bytes] | None = None) -> Any:
    """A SOW record as a SowRecord (its data through ``to_text`` when given)."""
    return sow_pb2.SowRecord(
        sow_key=envelope.sow_key,
        data=envelope.data if to_text is None else to_text(envelope.data),
        topic=envelope.topic,
        message_type=envelope.message_type,
        position=sow_pb2.Position(
            topic=envelope.log_topic, partition=envelope.log_partition, offset=envelope.log_offset
        ),
        publish_time_ms=envelope.publish_time_ms,
        apply_time_ms=envelope.apply_time_ms,
        expiration_ms=envelope.expiration_ms or 0,
        correlation_id=envelope.correlation_id or "",
    )


def stats(counts: QueryStats) -> dict[str, Any]:
    """A query's counts as the fields of a group end (GroupEnd, SubscribeGroupEnd)."""
    return {
        "topic_matches": counts.topic_matches,
        "matches": counts.matches,
        "records_returned": counts.records_returned,
        "elapsed_us": counts.elapsed_us,
        "plan": counts.plan,
    }
