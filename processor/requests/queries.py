"""A ``sow`` query answered for any transport: the records as the caller asked for them
(select list, text form, a queue message's state), and the processed-acknowledgement wait
of a publish.

The transports (``server/`` for gRPC, ``http/``) turn a :class:`Answer` into their own
messages and nothing else: what a query returns is decided here, once.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from processor import errors
from processor.changelog import Envelope
from processor.log import LogPosition
from processor.publish.gateway import Gateway
from processor.query.historical import point_of, run_historical
from processor.query.sow import QueryEngine, QueryResult, QueryStats, SowQuery
from processor.queues.state import MessageState
from processor.security import RequestContext
from processor.subscriptions.shape import MessageShape
from processor.topology.model import PlainTopic
from processor.topology.topics import resolve_topic, resolve_topics

#: How long a processed acknowledgement waits when the request has no deadline.
DEFAULT_PROCESSED_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class QueryRequest:
    """A ``sow`` command as a transport received it: the query, and how its records are
    returned (``select`` list, ``text_form``) and as of when (``bookmark``: a historical
    query)."""

    query: SowQuery
    select: str = ""
    text_form: bool = False
    bookmark: str = ""


@dataclass(slots=True)
class Row:
    """One record of an answer: its envelope (data as the caller asked for it) and, for a
    queue's message, its state (None: not a queue; no state: available)."""

    envelope: Envelope
    queue: bool = False
    state: MessageState | None = None


@dataclass(slots=True)
class Answer:
    """A query's answer: the group begin's fields, the batches (read as they are sent),
    then the group end's counts (:attr:`stats`, set once the batches are read)."""

    query_id: str
    topic: str
    snapshot: list[LogPosition]
    staleness_ms: int
    batches: Iterator[list[Row]]
    result: QueryResult = field(repr=False)

    @property
    def stats(self) -> QueryStats:
        assert self.result.stats is not None
        return self.result.stats


def stats_fields(counts: QueryStats) -> dict[str, Any]:
    """A query's counts as a group end's fields (every transport's)."""
    return {
        "topic_matches": counts.topic_matches,
        "matches": counts.matches,
        "records_returned": counts.records_returned,
        "elapsed_us": counts.elapsed_us,
        "plan": counts.plan,
    }


class Queries:
    """Answers ``sow`` queries and waits for publishes to be processed, over one query
    engine (its replica) and gateway (the topology's codecs)."""

    def __init__(self, engine: QueryEngine, gateway: Gateway) -> None:
        self.engine = engine
        self.gateway = gateway
        topology = gateway.topology
        #: The input topics whose records the replica applies (a processed ack waits).
        self._sow_logs = {
            t.kafka_topic for t in topology.topics.values() if not isinstance(t, PlainTopic)
        }

    def answer(self, request: QueryRequest, caller: RequestContext) -> Answer:
        """Run ``request`` for ``caller``; SowError when it is refused (bad request,
        unknown topic, not entitled, catching up)."""
        shape = self._select(request)
        point = point_of(request.bookmark) if request.bookmark else None
        if point is None:
            result = self.engine.run(request.query, caller)
        else:
            result = run_historical(self.engine, request.query, point, caller)
        return Answer(
            result.query_id,
            result.topic,
            result.snapshot,
            self.engine.replica.staleness_ms(),
            self._rows(result, shape, request.text_form and not result.aggregated),
            result,
        )

    def _rows(
        self, result: QueryResult, shape: MessageShape | None, text_form: bool
    ) -> Iterator[list[Row]]:
        topology = self.gateway.topology
        topic = topology.topics.get(result.topic)
        queue = topic is not None and topic.queue is not None and not result.aggregated
        states = self.engine.replica.queue_states
        for batch in result.batches:
            rows = []
            for stored in batch:
                envelope, data = stored, stored.data
                if shape is not None and shape.shapes(envelope.topic):
                    data = shape.full(envelope.topic, data)
                elif text_form:  # a pattern can match topics of different message types
                    data = self.gateway.codec(resolve_topic(topology, envelope.topic)).to_text(data)
                if data is not stored.data:
                    envelope = copy.copy(stored)
                    envelope.data = data
                row = Row(envelope)
                if queue:
                    row.queue = True
                    row.state = states.get(result.topic, envelope.sow_key.encode())
                rows.append(row)
            yield rows

    def _select(self, request: QueryRequest) -> MessageShape | None:
        """A query's select list, checked against the topics it reads (None: no select)."""
        if not request.select:
            return None
        query = request.query
        if query.grouping or query.projection:
            raise errors.InvalidRequestError(
                "a select list does not apply to an aggregated query (grouping/projection); "
                "choose the fields with the projection instead"
            )
        topics = resolve_topics(self.gateway.topology, query.topic)
        codecs = {t.name: self.gateway.codec(t) for t in topics}
        return MessageShape.for_request(
            topics, codecs, select=request.select, text_form=request.text_form, what="sow query"
        )

    def until_processed(self, positions: Sequence[LogPosition], timeout_s: float) -> None:
        """Return once the replica has applied every one of ``positions`` (a processed
        acknowledgement); PositionTimeoutError when ``timeout_s`` (0: the default) passes
        first, ReplicaStoppedError when the service stops. Positions of topics without a
        SOW are persisted already."""
        waited = [p for p in positions if p[0] in self._sow_logs]
        if not waited:
            return
        timeout = timeout_s or DEFAULT_PROCESSED_WAIT_S
        if self.engine.replica.wait_for(waited, timeout):
            return
        topic, partition, offset = max(waited)
        raise errors.PositionTimeoutError(
            f"the publish is in the log at {topic}/{partition}/{offset} but was not "
            f"applied to the SOW within {timeout:.3g}s (a processed acknowledgement); "
            "the processor may be behind or stopped. Publishing again with the same "
            "publisher and sequence is safe"
        )
