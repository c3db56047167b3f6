"""Historical sow_and_subscribe (spec 3.13): the SOW at the saved point at or before a
bookmark, the replay of the changelogs from just after it, then live.

The history read (:mod:`processor.replica.history`) and the subscription's registration
share one hold of the replica's lock, so the replay ends, and the live stream starts, at
the position vector of that moment: every change after the returned state is delivered
once (see :mod:`processor.subscriptions.replay`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from processor import changelog
from processor.changelog.bookmarks import parse_bookmark
from processor.errors import InvalidRequestError
from processor.expr import Expression
from processor.log import LogPosition
from processor.messages import Codec
from processor.query.historical import historical_states
from processor.query.sow import QueryEngine, QueryStats, SowQuery
from processor.query.sow import select as select_records
from processor.replica.table import SowTable
from processor.subscriptions.replay import Replay, open_replay, saved_point
from processor.subscriptions.subscription import Subscription
from processor.topology.model import SowTopic

Opening = tuple[list[LogPosition], list[list[changelog.Envelope]], QueryStats, Replay]


def open_historical(
    engine: QueryEngine,
    subscription: Subscription,
    topics: Sequence[SowTopic],
    expression: Expression | None,
    codecs: Mapping[str, Codec],
    *,
    register: Callable[[], None],
    close: Callable[[], None],
) -> Opening:
    """Check the request, read the historical state and ``register`` the (not started)
    ``subscription`` in one hold of the replica's lock, and plan the replay; return the
    position vector, the result's batches, its counts and the replay (which starts the
    subscription). Raises InvalidRequestError for a range or a topic without History;
    a failure after registering calls ``close``."""
    request = subscription.request
    without = [t.name for t in topics if t.history is None]
    if without:
        raise InvalidRequestError(
            "a historical sow_and_subscribe needs History on every topic; "
            f"{', '.join(without)} has none: subscribe to the History topics alone"
        )
    bookmark = parse_bookmark(request.bookmark)
    if bookmark.is_range:
        raise InvalidRequestError(
            f"bookmark {request.bookmark!r} is a range; a historical sow_and_subscribe "
            "starts at one point: give a timestamp or a position vector"
        )
    state_point, replay_from = saved_point(bookmark, topics)
    prepared = engine.prepare(
        SowQuery(request.topic, filter=request.filter, batch_size=request.batch_size)
    )
    started = time.perf_counter()

    # The replica's lock is re-entrant: the history read nests in this hold.
    def read(_: list[SowTable]) -> list[SowTable]:
        register()
        return historical_states(prepared, engine, state_point)[0]

    tables, vector = engine.replica.read(prepared.topics, read)
    try:
        selection = select_records(prepared, tables)
        envelopes = [changelog.decode(raw) for _, raw in selection.rows]
        rows = [
            (topic, e.sow_key.encode(), raw)
            for (topic, raw), e in zip(selection.rows, envelopes, strict=True)
        ]
        replay = open_replay(
            engine.replica,
            subscription,
            replay_from,
            topics,
            expression,
            codecs,
            vector,
            focus=rows if subscription.tracks_focus else (),
            close=close,
        )
    except BaseException:
        close()
        raise
    size = prepared.batch_size
    stats = QueryStats(
        topic_matches=selection.examined,
        matches=selection.matches,
        records_returned=len(envelopes),
        elapsed_us=int((time.perf_counter() - started) * 1e6),
        plan="historical: " + "; ".join(selection.plans),
    )
    batches = [envelopes[i : i + size] for i in range(0, len(envelopes), size)]
    return vector, batches, stats, replay
