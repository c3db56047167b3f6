"""Catching derived state up with what exists: feeding a topic's current records to a new
listener, and resetting a derived partition whose definition changed.

* A :class:`Feeding` listener (a view's feed) must have seen every record of its topic.
  When a store partition of the topic has not fed it yet, or fed it for another version
  (a view defined after the data existed, or redefined), :func:`feed_steps` hands it the
  partition's current records as inserts, in transactions of ``chunk`` records, then
  notes the version in the partition's state (``STATE_PREFIX`` + the listener's
  ``feed_marker``: the version, with ``\\0`` and the last SowKey fed while unfinished, so a
  restarted processor carries on where it stopped).
* A derived partition whose state was computed by another version of its definition
  starts afresh (:func:`reset_steps`): a RESET record in its changelog (readers drop what
  came before, as for a transient topic), its store emptied, the new version noted.

Both run in the partition's recovery, between the processor's own transactions, while
its input is held back; progress is reported as they go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from processor.changelog import RESET_KEY, STATE_PREFIX
from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.commit import CrashHook, commit
from processor.engine.partition import PartitionState
from processor.engine.publishers import PUBLISHER_META_PREFIX
from processor.engine.transaction import Local, PartitionBatch, Produce, Transaction
from processor.log import TransactionalLog
from processor.progress import progress
from processor.state import CHANGELOG_OFFSET, offset_bytes

log = logging.getLogger(__name__)

ProgressReport = Callable[..., None]
_PUBLISH = ChangeReason.PUBLISH


@runtime_checkable
class Feeding(Protocol):
    """A change listener that must see every record of its topic (see the module doc)."""

    #: Where a partition notes what it fed this listener (under ``STATE_PREFIX``).
    feed_marker: bytes
    #: The version the listener needs to have been fed (a view definition's digest).
    feed_version: bytes

    def listen(self, batch: PartitionBatch) -> Listener: ...


def feeding_needed(state: PartitionState, listener: Feeding) -> bool:
    """Whether ``state``'s partition has not fed ``listener`` its current version."""
    return state.store.get_meta(STATE_PREFIX + listener.feed_marker) != listener.feed_version


def feed_steps(
    state: PartitionState,
    listener: Feeding,
    producer: TransactionalLog,
    produce: Produce,
    chunk: int = 10000,
    report: ProgressReport = log.info,
    crash: CrashHook | None = None,
    local: Callable[[], Local] = dict,
) -> Iterator[None]:
    """Feed ``listener`` the partition's current records, one transaction of ``chunk``
    records per step (the generator yields between steps). Call only when
    :func:`feeding_needed`; the caller holds the partition's input back. ``local``: the
    derived partitions that may take direct changes now (see
    :class:`~processor.engine.transaction.Transaction`)."""
    store, version = state.store, listener.feed_version
    name = f"{state.topic.name}[{state.partition}]"
    noted = store.get_meta(STATE_PREFIX + listener.feed_marker) or b""
    done, _, after = noted.partition(b"\x00")
    cursor = after if done == version and after else None
    total = store.count()
    what = listener.feed_marker.decode(errors="replace")
    report(f"{name}: feeding its {total:,} records to {what}" + (" (resuming)" if cursor else ""))
    records = (item for item in store.items(cursor) if cursor is None or item[0] > cursor)
    changelog = state.topic.changelog_topic
    fed = 0
    while True:
        producer.begin()
        transaction = Transaction(-1, int(time.time() * 1000), None, produce, local())
        batch = transaction.batch(state)
        events: list[ChangeEvent] = []
        for sow_key, envelope in records:
            position = (changelog, state.partition, -1)
            events.append(
                ChangeEvent(
                    state.topic.name, sow_key, None, envelope, position, ChangeReason.PUBLISH
                )
            )
            if len(events) >= chunk:
                break
        if events:
            listener.listen(batch)(events)
        fed += len(events)
        finished = len(events) < chunk
        batch.put_state(
            listener.feed_marker, version if finished else version + b"\x00" + events[-1].sow_key
        )
        commit(transaction, producer, {}, None, crash)
        report(f"{name}: fed {fed:,} of {total:,} records to {what}", extra=progress(fed, total))
        if finished:
            return
        yield


def reset_steps(
    state: PartitionState,
    version_key: bytes,
    version: bytes,
    producer: TransactionalLog,
    report: ProgressReport = log.info,
) -> Iterator[None]:
    """Start the partition afresh unless its state is of ``version`` (kept under
    ``STATE_PREFIX + version_key``); one step."""
    store, full = state.store, STATE_PREFIX + version_key
    if store.get_meta(full) == version:
        return
    name = f"{state.topic.name}[{state.partition}]"
    count = store.count()
    report(
        f"{name}: computed by another definition, or new: starting it afresh "
        f"({count:,} records dropped); it is rebuilt from its underlying topics"
    )
    changelog = state.topic.changelog_topic
    producer.begin()
    producer.produce(changelog, b"reset", RESET_KEY, state.partition)
    producer.produce_tracked(changelog, version, full, state.partition)
    ends = producer.commit()
    stale = [
        key
        for prefix in (PUBLISHER_META_PREFIX, STATE_PREFIX)
        for key, _ in store.meta_items(prefix)
    ]
    store.clear(dict.fromkeys(stale))
    end = ends[(changelog, state.partition)]
    store.write({}, {full: version, CHANGELOG_OFFSET: offset_bytes(end + 1)})
    yield
