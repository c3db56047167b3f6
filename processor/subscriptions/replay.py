"""Bookmark subscriptions: replay the changelogs from a bookmark, then go live (spec 3.13).

The hub registers the live subscription first, buffering, under the replica's lock and
reads the position vector V there (as for any subscribe). The replay then reads each
changelog partition from the bookmark's offset up to V (:mod:`processor.replica.replay_plan`),
on the subscriber's thread, while the stream sends it: neither the replica's applier
nor the dispatcher waits for it. When the replay is done, the live subscription starts
at V (or, for a partition the bookmark says the subscriber has already seen past V,
right after the bookmark), taking over the records the replay put in focus: every
change is delivered exactly once, in changelog order per partition. The stream then
sends ``completed`` with the vector the replay reached. A range replay ends there: its
subscription is closed.

The replay delivers what the live subscription would have (the same filter, the same
focus rules: ``oof`` (and ``send_deletes``) for records the replay delivered).
Live changes that arrive during the replay wait in the subscription's buffer; more than
its ``max_backlog`` of them by the end of the replay closes it as a slow consumer.

A historical sow_and_subscribe (:func:`open_historical`) is the SOW at the saved point at
or before a bookmark (:mod:`processor.query.historical`), then the replay of the
changelogs from just after it, then live. The history read and the subscription's
registration share one hold of the replica's lock, so the replay ends, and the live
stream starts, at the position vector of that moment: every change after the returned
state is delivered once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from processor import changelog
from processor.changelog.bookmarks import Bookmark, Point, parse_bookmark
from processor.changelog.events import ChangeEvent
from processor.errors import InvalidRequestError, UnsupportedError
from processor.expr import Expression
from processor.log import LogPosition, TopicPartitionKey
from processor.messages import Codec
from processor.query.historical import historical_states
from processor.query.sow import QueryEngine, QueryStats, SowQuery, batched
from processor.query.sow import select as select_records
from processor.replica.replay_plan import (
    ReplayPlan,
    change_filter,
    changelog_topics,
    plan_replay,
    read_changes,
)
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.subscriptions.model import MAX_MAX_BACKLOG, ChangeKind, Notice
from processor.subscriptions.subscription import Subscription
from processor.topology.model import SowTopic, Topic


class Replay:
    """The replay of one bookmark subscription (see the module doc).

    Iterate once (on the thread that sends to the subscriber) for the replayed
    deliveries, in batches; when the iteration ends, the live subscription has started
    (or, for a range, :attr:`ends` is True and it was closed) and :attr:`completed` is
    the position vector the replay reached. Abandoning the iteration leaves the live
    subscription unstarted: the caller unsubscribes it.
    """

    def __init__(
        self,
        live: Subscription,
        plan: ReplayPlan,
        replica: Replica,
        topics: Sequence[SowTopic],
        matches: Callable[[ChangeEvent], bool],
        focus: Sequence[tuple[str, bytes, bytes]] = (),
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.live = live
        self.plan = plan
        self.ends = plan.ends
        self.completed: list[LogPosition] = []
        self.replayed = 0
        self._replica = replica
        self._topics = changelog_topics(topics)
        self._matches = matches
        self._focus = focus
        self._close = close

    def __iter__(self) -> Iterator[list[Notice]]:
        live = self.live
        shadow = Subscription(
            live.request,
            with_query=live.with_query,
            max_backlog=MAX_MAX_BACKLOG,
            unheld_topics=live.unheld_topics,
        )
        shadow.start({}, self._focus)
        opener = self._replica.open_reader
        assert opener is not None
        reader = opener()
        matches = self._matches
        try:
            for events in read_changes(reader, self._topics, self.plan.ranges):
                self.replayed += len(events)
                if not shadow.tracks_focus:
                    # Nothing to remember: every matching change is delivered as it is.
                    publishes = [
                        Notice(ChangeKind.PUBLISH, e.topic, e.sow_key, e.new, e.position)
                        for e in events
                        if e.new is not None and matches(e)
                    ]
                    if publishes:
                        yield publishes
                    continue
                shadow.offer_all(
                    [
                        (
                            event,
                            Notice(
                                ChangeKind.PUBLISH,
                                event.topic,
                                event.sow_key,
                                event.new,
                                event.position,
                            )
                            if event.new is not None and matches(event)
                            else None,
                        )
                        for event in events
                    ]
                )
                taken = shadow.take(MAX_MAX_BACKLOG, 0)
                if taken:
                    yield taken
        finally:
            reader.close()
        if self.ends:
            self.completed = [(t, p, end) for (t, p), (_, end) in sorted(self.plan.ranges.items())]
            self._close()
            return
        start = dict(self.plan.live_start)
        self.completed = [(t, p, o) for (t, p), o in sorted(start.items())]
        live.start(start, [(t, k, e) for (t, k), e in shadow.focus.items()])


def open_replay(
    replica: Replica,
    live: Subscription,
    bookmark: Bookmark,
    topics: Sequence[Topic],
    expression: Expression | None,
    codecs: Mapping[str, Codec],
    present: Sequence[LogPosition],
    *,
    focus: Sequence[tuple[str, bytes, bytes]] = (),
    close: Callable[[], None] = lambda: None,
) -> Replay:
    """Plan the replay of ``bookmark`` for the registered (not started) ``live``
    subscription whose topics stood at ``present`` when it was registered. Raises
    before anything is sent: InvalidRequestError (bad positions, plain topics),
    BookmarkTooOldError (below the retained log), UnsupportedError (no log reader)."""
    sow = [t for t in topics if isinstance(t, SowTopic)]
    plain = [t.name for t in topics if not isinstance(t, SowTopic)]
    if plain:
        raise InvalidRequestError(
            f"topics {', '.join(plain)} have no SOW, hence no changelog to replay; "
            "subscribe to them without a bookmark"
        )
    opener = replica.open_reader
    if opener is None:
        raise UnsupportedError(
            "this query service has no changelog reader, so it cannot replay; subscribe "
            "without a bookmark"
        )
    vector: dict[TopicPartitionKey, int] = {(t, p): o for t, p, o in present}
    reader = opener()
    try:
        plan = plan_replay(bookmark, vector, reader)
    finally:
        reader.close()
    matches = change_filter(expression, codecs)
    return Replay(live, plan, replica, sow, matches, focus, close)


def saved_point(bookmark: Bookmark, topics: Sequence[SowTopic]) -> tuple[Point, Bookmark]:
    """For a historical sow_and_subscribe: the point whose state the query returns, and
    the bookmark the replay starts from (spec 3.13: the nearest saved point at or
    before the bookmark, and the replay from just after it). For a time T and
    Granularity g (the largest of the topics'), the saved point is T rounded down to a
    multiple of g (T itself for g = 0): the query returns the versions saved before it
    and the replay starts there. A position vector is its own saved point."""
    start = bookmark.start
    assert start is not None
    if start.timestamp_ms is None:
        return start, bookmark
    granularity = max(int(t.history.granularity_s * 1000) for t in topics if t.history is not None)
    moment = start.timestamp_ms
    first_replayed = moment + 1 if granularity == 0 else moment // granularity * granularity
    state = Point(timestamp_ms=first_replayed - 1)
    replay = Bookmark(bookmark.text, Point(timestamp_ms=first_replayed), start_inclusive=True)
    return state, replay


Opening = tuple[list[LogPosition], list[list[changelog.Envelope]], QueryStats, Replay]


def open_historical(
    engine: QueryEngine,
    subscription: Subscription,
    given: Sequence[Topic],
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
    topics = [t for t in given if isinstance(t, SowTopic) and t.history is not None]
    without = [t.name for t in given if t not in topics]
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
    stats = selection.stats(len(envelopes), started, "historical: ")
    return vector, batched(envelopes, size), stats, replay
