"""Historical SOW queries: a ``sow`` with a bookmark (spec 3.13).

On a topic with History the answer is the SOW as of the bookmark's point, from the
history index (:mod:`processor.replica.history`): records deleted later are returned if
they existed then, records deleted before are not, a time before the Window gets an
empty result. Filter, OrderBy, top_n/skip_n and aggregation apply as to a current
query. On a topic without History the bookmark is ignored and the current state is
returned (the command reference's rule). A range bookmark is refused: a query reads one
point.
"""

from __future__ import annotations

import time
from typing import Any

from processor.changelog.bookmarks import Point, parse_bookmark
from processor.errors import CatchingUpError, InvalidRequestError
from processor.expr import FieldInput
from processor.log import LogPosition
from processor.messages import codec_for
from processor.query.sow import (
    DEFAULT_TIMEOUT_S,
    PreparedQuery,
    QueryEngine,
    QueryResult,
    SowQuery,
    memo_fields,
    query_result,
    select,
)
from processor.replica.table import SowTable
from processor.security import OPEN, RequestContext

#: A table's state as of the point, its current records, and the live memo values of
#: the query's fields.
_State = tuple[dict[bytes, bytes], dict[bytes, bytes], list[FieldInput], list[dict[bytes, Any]]]


def point_of(text: str) -> Point | None:
    """The point a historical query reads as of (None: now); InvalidRequestError for
    a range or a malformed bookmark. Epoch (``0``) is the empty SOW before any change."""
    bookmark = parse_bookmark(text)
    if bookmark.is_range:
        raise InvalidRequestError(
            f"bookmark {text!r} is a range; a historical sow reads the SOW as of one "
            "point: give a timestamp or a position vector"
        )
    return bookmark.start


def historical_states(
    prepared: PreparedQuery, engine: QueryEngine, point: Point
) -> tuple[list[SowTable], list[LogPosition]]:
    """The tables of ``prepared``'s topics as of ``point`` (current ones for topics
    without History), and the replica's position vector when they were read.

    The tables come with the memo indexes the query reads: a record whose historical
    version is the current one takes its value from the live table's memo index (copied
    under the replica's lock), so only records changed since ``point`` are decoded.
    """
    replica = engine.replica
    history = replica.history
    fields = memo_fields(prepared)
    if fields:
        for topic in prepared.topics:
            replica.build_memo_indexes(topic, fields)

    def read(tables: list[SowTable]) -> list[_State]:
        states = []
        for table in tables:
            topic_history = history.topics.get(table.topic.name)
            if topic_history is None:
                state = dict(table.envelopes)
            elif point.epoch:
                state = {}
            else:
                state = topic_history.state_at(point)
            live = [f for f in fields if f.steps in table.memo]
            columns = [dict(table.memo[f.steps].values) for f in live]
            states.append((state, dict(table.envelopes), live, columns))
        return states

    states, vector = replica.read(prepared.topics, read)
    tables = []
    for topic, (state, current, live, columns) in zip(prepared.topics, states, strict=True):
        table = SowTable(topic, codec_for(topic))
        for sow_key, envelope in state.items():
            table.put(sow_key, envelope)
        if live:
            table.install_memo(live, current, columns)
        tables.append(table)
    return tables, vector


def run_historical(
    engine: QueryEngine, query: SowQuery, point: Point, context: RequestContext = OPEN
) -> QueryResult:
    """Run ``query`` as of ``point`` (see the module doc)."""
    prepared = engine.prepare(query, context)
    replica = engine.replica
    if not replica.caught_up():
        timeout = query.timeout_s or DEFAULT_TIMEOUT_S
        if not query.wait_for_catch_up or not replica.wait_caught_up(timeout):
            raise CatchingUpError(
                f"{replica.catch_up_status()}; retry shortly, or set wait_for_catch_up"
            )
    started = time.perf_counter()
    tables, vector = historical_states(prepared, engine, point)
    selection = select(prepared, tables)
    return query_result(query, prepared, selection, vector, started, "historical: ")
