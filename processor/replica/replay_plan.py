"""Bookmark replays: which changelog offsets a bookmark covers, and the changes there.

A replay reads the changelog partitions of the subscribed topics (through a
:class:`~processor.log.ChangelogReader`, on the subscriber's thread: the replica's
applier and the subscription dispatcher never wait for it) from the offsets a
:class:`~processor.changelog.bookmarks.Bookmark` names up to the position vector the live
subscription starts at, so the replay and the live stream meet with no gap and no
duplicate (:mod:`processor.subscriptions.replay`).

What a replay sees: every change the changelog still holds. On a compacting broker a
changelog keeps every version only until compaction runs (at least
``min.compaction.lag.ms``, set to the Window for topics with History, see
docs/subscriptions.md); older parts hold the latest version per SowKey only. Partitions
are replayed one after the other (the order within a partition is the order the
changes were applied); control records (progress marks, transient resets) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from processor import changelog
from processor.changelog import CONTROL_PREFIX, REASON_HEADER
from processor.changelog.bookmarks import Bookmark, Point
from processor.changelog.events import ChangeEvent, ChangeReason
from processor.errors import BookmarkTooOldError, DecodeError, EnvelopeError, InvalidRequestError
from processor.expr import ContextInput, Expression
from processor.log import ChangelogReader, Record, TopicPartitionKey
from processor.messages import Codec
from processor.topology.model import SowTopic


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What to replay: ``ranges`` maps each changelog partition to the offsets
    ``[start, end)`` read; ``live_start`` is where the live subscription starts (never
    before the replica's position, and past anything the bookmark says the subscriber
    already has); ``ends``: a range bookmark, the subscription ends after the replay."""

    ranges: Mapping[TopicPartitionKey, tuple[int, int]]
    live_start: Mapping[TopicPartitionKey, int]
    ends: bool

    def records(self) -> int:
        """At most how many records the replay reads."""
        return sum(max(end - start, 0) for start, end in self.ranges.values())


def check_retained(partition: TopicPartitionKey, bookmark: str, start: int, earliest: int) -> None:
    """Raise BookmarkTooOldError when a replay must start at ``start`` but the partition
    retains offsets from ``earliest`` on only (the changes in between are gone)."""
    if start < earliest:
        topic, number = partition
        raise BookmarkTooOldError(
            f"bookmark {bookmark!r} resumes {topic} partition {number} at offset {start}, but "
            f"the log retains that partition from offset {earliest} on only: the changes "
            "in between were removed by retention. Replay from epoch ('0') or a later "
            "bookmark, or sow_and_subscribe to resynchronise"
        )


def plan_replay(
    bookmark: Bookmark,
    present: Mapping[TopicPartitionKey, int],
    reader: ChangelogReader,
) -> ReplayPlan:
    """The offsets ``bookmark`` covers on the partitions of ``present`` (each
    partition's next offset as the replica applied it: a replay ends there at the
    latest). Raises InvalidRequestError for positions of other partitions and
    BookmarkTooOldError for a position below the retained log."""
    start_point = bookmark.start
    assert start_point is not None, "a NOW bookmark replays nothing"
    for point in (start_point, bookmark.end):
        vector = None if point is None else point.vector
        unknown = sorted(tp for tp in vector or () if tp not in present)
        if unknown:
            topic, partition = unknown[0]
            raise InvalidRequestError(
                f"bookmark {bookmark.text!r} names {topic} partition {partition}, which is "
                "not a changelog partition of the subscribed topics; positions are the "
                "changelog_position of delivered changes"
            )
    ranges: dict[TopicPartitionKey, tuple[int, int]] = {}
    live: dict[TopicPartitionKey, int] = {}
    for tp, now in present.items():
        earliest = reader.earliest_offset(*tp)
        start = _start(bookmark, start_point, tp, earliest, reader)
        end = now
        if bookmark.end is not None:
            end = min(_end(bookmark.end, bookmark.end_inclusive, tp, now, reader), now)
        ranges[tp] = (start, max(start, end))
        live[tp] = max(now, start)
    return ReplayPlan(ranges, live, bookmark.is_range)


def _start(
    bookmark: Bookmark, point: Point, tp: TopicPartitionKey, earliest: int, reader: ChangelogReader
) -> int:
    if point.timestamp_ms is not None:
        after = point.timestamp_ms + (0 if bookmark.start_inclusive else 1)
        # A time before the retained log starts at its beginning (spec: clamped to epoch).
        return max(reader.offset_for_time(*tp, after), earliest)
    if point.vector is not None and tp in point.vector:
        start = point.vector[tp] + (0 if bookmark.start_inclusive else 1)
        check_retained(tp, bookmark.text, start, earliest)
        return start
    return earliest


def _end(
    point: Point, inclusive: bool, tp: TopicPartitionKey, now: int, reader: ChangelogReader
) -> int:
    if point.timestamp_ms is not None:
        return reader.offset_for_time(*tp, point.timestamp_ms + (1 if inclusive else 0))
    if point.vector is not None and tp in point.vector:
        return point.vector[tp] + (1 if inclusive else 0)
    return now


def read_changes(
    reader: ChangelogReader,
    topics: Mapping[str, SowTopic],
    ranges: Mapping[TopicPartitionKey, tuple[int, int]],
) -> Iterator[list[ChangeEvent]]:
    """The changes in ``ranges`` (``topics`` maps changelog names to their topics), a
    batch of the log at a time, partition after partition. ``old`` is never known to a
    replay (None); a tombstone's reason comes from its header."""
    for (changelog_topic, partition), (start, end) in sorted(ranges.items()):
        if start >= end:
            continue
        name = topics[changelog_topic].name
        for batch in reader.read_range(changelog_topic, partition, start, end):
            events = []
            for record in batch:
                key = record.key() or b""
                if key.startswith(CONTROL_PREFIX):
                    continue
                position = (changelog_topic, partition, record.offset())
                value = record.value()
                if value is None:
                    events.append(ChangeEvent(name, key, None, None, position, _reason(record)))
                else:
                    events.append(
                        ChangeEvent(name, key, None, value, position, ChangeReason.PUBLISH)
                    )
            if events:
                yield events


def _reason(record: Record) -> ChangeReason:
    for name, raw in record.headers() or ():
        if name == REASON_HEADER:
            return ChangeReason.of_tombstone(raw)
    return ChangeReason.DELETE


def change_filter(
    expression: Expression | None, codecs: Mapping[str, Codec]
) -> Callable[[ChangeEvent], bool]:
    """Whether a change's new state matches the subscription's filter (a deletion never
    does; a message that cannot be decoded matches only an empty filter)."""
    if expression is None:
        return lambda event: event.new is not None
    needs_context = any(isinstance(i, ContextInput) for i in expression.inputs)

    def matches(event: ChangeEvent) -> bool:
        new = event.new
        if new is None:
            return False
        try:
            message = codecs[event.topic].decode(changelog.data_of(new))
        except (DecodeError, EnvelopeError):
            return False
        context = changelog.decode(new).context() if needs_context else None
        return expression.matches(message, context, overrun="subscription")

    return matches


def changelog_topics(topics: Sequence[SowTopic]) -> dict[str, SowTopic]:
    """Changelog name -> topic, for :func:`read_changes`."""
    return {t.changelog_topic: t for t in topics}
