"""Republishing: write a store's state back to a changelog the broker lost.

AMPS keeps a SOW that is newer than its transaction log; so does kafka-sow, and it writes
the SOW back to the (new, empty) changelog so that readers see it again. The work is done
in transactions of ``chunk`` records, one per step, between the processor's own
transactions (the partition's input stays paused until it is done), and it survives a
crash at any point: each step's commit is followed by one atomic store write of the
changelog offset it reached *and* a cursor (the last key republished). A restarted
processor finds the cursor and carries on after it. A crash between a step's Kafka commit
and its store write republishes that one chunk again, with the same values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from itertools import chain

from processor.changelog import PROGRESS_KEY, PUBLISHER_PREFIX, encode_progress
from processor.engine.partition import PartitionState
from processor.engine.publishers import PUBLISHER_META_PREFIX
from processor.log import TransactionalLog
from processor.progress import progress
from processor.state import CHANGELOG_OFFSET, Store, offset_bytes

log = logging.getLogger(__name__)

#: Store meta key present while a republish is unfinished. Its value says what is done:
#: empty (nothing yet), ``r`` + SowKey (the records up to that key) or ``p`` + publisher
#: meta key (every record and the publishers up to that one).
REPUBLISH_CURSOR = b"republish-cursor"

ProgressReport = Callable[..., None]
CrashHook = Callable[[str], None]


def republish_pending(store: Store) -> bool:
    """True when the store has a republish to start or finish."""
    return store.get_meta(REPUBLISH_CURSOR) is not None


def _remaining(store: Store, cursor: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(cursor after it, key, value) of every changelog record still to write."""
    records: Iterator[tuple[bytes, bytes, bytes]] = iter(())
    if cursor[:1] in (b"", b"r"):
        after = cursor[1:]
        records = (
            (b"r" + key, key, value)
            for key, value in store.items(after or None)
            if not after or key > after
        )
    done = cursor[1:] if cursor[:1] == b"p" else b""
    start = len(PUBLISHER_META_PREFIX)
    publishers = (
        (b"p" + meta, PUBLISHER_PREFIX + meta[start:], value)
        for meta, value in store.meta_items(PUBLISHER_META_PREFIX)
        if not done or meta > done
    )
    return chain(records, publishers)


def republish_steps(
    state: PartitionState,
    producer: TransactionalLog,
    chunk: int = 10000,
    report: ProgressReport = log.info,
    crash: CrashHook | None = None,
) -> Iterator[None]:
    """Republish the store from its cursor, one transaction of ``chunk`` records per step
    (the generator yields between steps); the last step removes the cursor.

    Call only when :func:`republish_pending`. The caller keeps the partition's input
    paused and runs no other transaction during a step.
    """
    store = state.store
    changelog = state.topic.changelog_topic
    partition = state.partition
    name = f"{state.topic.name}[{partition}]"
    cursor = store.get_meta(REPUBLISH_CURSOR) or b""
    total = store.count()
    if cursor:
        report(f"{name}: resuming the re-publishing of {total:,} records where it stopped")
    else:
        report(f"{name}: the changelog was lost; re-publishing {total:,} records from the store")
    remaining = _remaining(store, cursor)
    written = publishers = 0  # SOW records and publisher records re-published
    while True:
        producer.begin()
        count = 0
        for position, key, value in remaining:
            producer.produce(changelog, value, key, partition)
            count += 1
            if position[:1] == b"p":
                publishers += 1
            else:
                written += 1
            cursor = position
            if count >= chunk:
                break
        producer.produce_tracked(changelog, encode_progress([]), PROGRESS_KEY, partition)
        ends = producer.commit()
        finished = count < chunk
        store.write(
            {},
            {
                CHANGELOG_OFFSET: offset_bytes(ends[(changelog, partition)] + 1),
                REPUBLISH_CURSOR: None if finished else cursor,
            },
        )
        also = f" and {publishers:,} publisher sequences" if publishers else ""
        report(
            f"{name}: re-published {written:,} records (of {total:,} in the store){also}",
            extra=progress(total if finished else written, total),
        )
        if crash:
            crash("republished")
        if finished:
            return
        yield
