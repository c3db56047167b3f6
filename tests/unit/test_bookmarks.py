"""Bookmark strings (spec 3.13) and the retention check of replays."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from processor.changelog.bookmarks import EPOCH_POINT, format_vector, parse_bookmark, parse_vector
from processor.errors import BookmarkTooOldError, InvalidRequestError
from processor.replica.replay_plan import check_retained


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize("text", ["", "0|1|", "  "])
def test_now(text: str) -> None:
    bookmark = parse_bookmark(text)
    assert bookmark.now
    assert not bookmark.is_range


def test_epoch() -> None:
    bookmark = parse_bookmark("0")
    assert bookmark.start == EPOCH_POINT
    assert bookmark.start.epoch
    assert not bookmark.now
    assert not bookmark.is_range


def test_timestamp_forms() -> None:
    assert parse_bookmark("20261123T201100").start is not None
    for text in ("20261123T201100", "20261123T201100Z"):
        start = parse_bookmark(text).start
        assert start is not None
        assert start.timestamp_ms == ms("2026-11-23T20:11:00")
    start = parse_bookmark("20261123T201100.250000Z").start
    assert start is not None
    assert start.timestamp_ms == ms("2026-11-23T20:11:00") + 250


def test_position_vector() -> None:
    bookmark = parse_bookmark("a.sow-changelog/0/17,a.sow-changelog/1/3,a.sow-changelog/0/12")
    assert bookmark.start is not None
    assert not bookmark.start_inclusive
    # A partition given twice keeps its highest offset.
    assert dict(bookmark.start.vector or {}) == {
        ("a.sow-changelog", 0): 17,
        ("a.sow-changelog", 1): 3,
    }
    vector = parse_vector("x/1/2,y/0/5")
    assert parse_vector(format_vector(vector)) == vector


def test_ranges() -> None:
    day = parse_bookmark("[20200604T000000:20200605T000000)")
    assert day.is_range
    assert day.start_inclusive
    assert not day.end_inclusive
    assert day.start is not None
    assert day.end is not None
    assert day.end.timestamp_ms == (day.start.timestamp_ms or 0) + 86_400_000
    mixed = parse_bookmark("(t/0/4:t/0/9]")
    assert not mixed.start_inclusive
    assert mixed.end_inclusive
    assert mixed.start is not None
    assert dict(mixed.start.vector or {}) == {("t", 0): 4}
    from_epoch = parse_bookmark("[0:20200605T000000]")
    assert from_epoch.start is not None
    assert from_epoch.start.epoch


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("recent", "client-library constant"),
        ("MOST_RECENT", "client-library constant"),
        ("banana", "is not a position 'topic/partition/offset'"),
        ("t/0", "is not a position"),
        ("t/x/3", "whole numbers from 0"),
        ("t/0/-1", "whole numbers from 0"),
        ("[t/0/1]", "exactly one ':'"),
        ("[t/0/1:0)", "cannot end at epoch"),
        ("[:t/0/1)", "empty part"),
        ("20261340T000000", "not a valid date"),
    ],
)
def test_bad_bookmarks_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(InvalidRequestError, match="bookmark") as raised:
        parse_bookmark(text)
    assert fragment in str(raised.value)


def test_retention_check_names_partition_bookmark_and_earliest_offset() -> None:
    check_retained(("c", 1), "c/1/9", start=10, earliest=10)
    with pytest.raises(BookmarkTooOldError) as raised:
        check_retained(("c", 1), "c/1/4", start=5, earliest=10)
    message = str(raised.value)
    assert "'c/1/4'" in message
    assert "c partition 1 at offset 5" in message
    assert "from offset 10 on only" in message
