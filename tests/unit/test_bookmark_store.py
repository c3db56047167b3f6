"""Client-side bookmark vectors and the in-process bookmark store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.client.bookmark_store import (
    EPOCH,
    MemoryBookmarkStore,
    format_vector,
    parse_vector,
)
from processor.errors import InvalidRequestError

topics = st.text(alphabet="abcxyz.-_0123456789", min_size=1, max_size=12)
vectors = st.dictionaries(st.tuples(topics, st.integers(0, 63)), st.integers(-1, 2**40), max_size=6)


@given(vectors)
def test_a_vector_survives_its_text_form(vector: dict[tuple[str, int], int]) -> None:
    assert parse_vector(format_vector(vector)) == vector


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("orders", "TOPIC/PARTITION/OFFSET"),
        ("t/x/3", "TOPIC/PARTITION/OFFSET"),
        ("/0/3", "no topic"),
        ("t/0/-5", "negative"),
    ],
)
def test_a_bad_bookmark_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(InvalidRequestError, match=problem):
        parse_vector(text)


def test_a_repeated_partition_keeps_its_latest_offset() -> None:
    assert parse_vector("t/0/5, t/0/3,u/1/0") == {("t", 0): 5, ("u", 1): 0}


def test_the_store_resumes_after_the_last_discarded_message() -> None:
    store = MemoryBookmarkStore()
    assert store.most_recent("s") == EPOCH
    store.discard("s", "t", 0, 4)
    store.discard("s", "t", 1, 9)
    store.discard("s", "t", 0, 7)
    store.discard("s", "t", 0, 6)  # a replayed message discarded before: no step back
    assert parse_vector(store.most_recent("s")) == {("t", 0): 7, ("t", 1): 9}
    assert store.most_recent("other") == EPOCH


def test_a_start_vector_fills_only_partitions_with_no_bookmark() -> None:
    store = MemoryBookmarkStore()
    store.discard("s", "t", 0, 7)
    store.advance("s", [("t", 0, 100), ("t", 1, 20), ("t", 2, 0)])
    # t/0 keeps its discard; t/1 starts before offset 20; t/2 has nothing to skip.
    assert parse_vector(store.most_recent("s")) == {("t", 0): 7, ("t", 1): 19}


def test_forgetting_starts_a_subscription_over() -> None:
    store = MemoryBookmarkStore()
    store.discard("s", "t", 0, 7)
    store.forget("s")
    store.forget("never")
    assert store.most_recent("s") == EPOCH
    store.discard("s", "t", 0, 2)
    assert parse_vector(store.most_recent("s")) == {("t", 0): 2}
