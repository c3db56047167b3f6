"""Recovery: bring a store partition up to its changelog before processing resumes.

Runs on start and on every partition assignment, in the processor's poll loop while the
partition's input is paused. A persistent store replays its changelog from the offset it
stored (a missing store starts from 0, a damaged one is moved aside and rebuilt), one
fetched batch per step. A transient store starts empty and instead re-reads the
transaction log from its RecoveryPoint. Progress is logged at least every second while a
replay runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Sequence
from itertools import compress
from typing import cast

from processor.changelog import (
    CONTROL_PREFIX,
    POSITION_HEADER,
    PROGRESS_KEY,
    PUBLISHER_PREFIX,
    RESET_KEY,
    STATE_PREFIX,
    decode,
    decode_progress,
    decode_progress_publishers,
    expiration_of,
    parse_position,
)
from processor.engine.expiry import due_key
from processor.engine.partition import PartitionState
from processor.engine.publishers import PUBLISHER_META_PREFIX, meta_key, meta_key_of_control
from processor.engine.republish import REPUBLISH_CURSOR
from processor.errors import EnvelopeError
from processor.log import PartitionReader, Record, TransactionalLog, lost_log_level
from processor.progress import progress
from processor.state import CHANGELOG_OFFSET, Store, offset_bytes, offset_from
from processor.topology.model import RecoveryKind, SowTopic

log = logging.getLogger(__name__)

OFFSET_BEGINNING = -2

ProgressReport = Callable[..., None]
"""Reports progress: ``report(text, extra=progress(done, total))`` (:mod:`processor.progress`)."""


class Restored:
    """What a restore found: records replayed, and how far the changelog shows the input
    was applied (next offset per log topic)."""

    __slots__ = ("applied", "log_next")

    def __init__(self) -> None:
        self.applied = 0
        self.log_next: dict[str, int] = {}

    def saw_progress(self, value: bytes) -> dict[bytes, bytes]:
        """Note a PROGRESS record; return the publisher meta entries it carries (only
        PROGRESS records of earlier releases carry any)."""
        for log_topic, _, nxt in decode_progress(value):
            self.log_next[log_topic] = max(self.log_next.get(log_topic, 0), nxt)
        if b'"publishers"' not in value:
            return {}
        legacy = decode_progress_publishers(value)
        return {meta_key(name): str(sequence).encode() for name, sequence in legacy.items()}

    def saw_change(self, record: Record) -> None:
        """A record after the last progress record (an unfinished batch)."""
        key = record.key()
        if not key or key.startswith(CONTROL_PREFIX):
            return
        value = record.value()
        if value is not None:
            envelope = decode(value)
            log_topic, offset = envelope.log_topic, envelope.log_offset
        else:
            headers = dict(record.headers() or ())
            if POSITION_HEADER not in headers:
                return
            log_topic, _, offset = parse_position(headers[POSITION_HEADER])
        self.log_next[log_topic] = max(self.log_next.get(log_topic, 0), offset + 1)


def restore_from_changelog(
    store: Store,
    topic: SowTopic,
    partition: int,
    reader: PartitionReader,
    report: ProgressReport = log.info,
) -> Restored:
    """Run :func:`restore_steps` to the end (for callers that may block)."""
    steps = restore_steps(store, topic, partition, reader, report)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            restored: Restored = done.value
            return restored


#: Keys below this one are control records (they start with NUL), or empty.
_CONTROL_END = b"\x01"
#: ``_CONTROL_END > key`` from C, per key; a None key answers NotImplemented (truthy).
_is_control = cast(Callable[[bytes | None], object], _CONTROL_END.__gt__)

#: An empty store at least this far behind its changelog is rebuilt in bulk
#: (:meth:`Store.begin_rebuild`); below it, switching modes costs more than it saves.
BULK_REBUILD_MIN_RECORDS = 20_000


def restore_steps(
    store: Store,
    topic: SowTopic,
    partition: int,
    reader: PartitionReader,
    report: ProgressReport = log.info,
    report_every_s: float = 1.0,
) -> Generator[int, None, Restored]:
    """Replay the changelog into ``store`` from its stored offset to the end, one fetched
    batch per step: the generator yields the records replayed so far after each batch is
    written (data and the changelog offset it reached, in one atomic write), so the
    caller can poll its consumer between steps and a crash at any point loses nothing.
    Its return value (``StopIteration.value``) says what the restore found. Progress is
    reported at the start, every ``report_every_s`` and at the end.

    When the changelog ends before the store's offset (the broker lost its log), the store
    keeps its state and takes no other action, as AMPS does when its transaction log is
    older than its SOW (a warning says so), and the store is marked for
    republishing (:mod:`processor.engine.republish`) in the same write.

    A derived topic's state records (``STATE_PREFIX``) become meta entries under the same
    key. Publisher control records become the store's publisher meta entries, so a store
    rebuilt from the changelog discards the same repeated sequences as before. On a topic
    with expiration enabled, every replayed record that expires gets its due index entry
    in the same write (:func:`due_entries`), so a rebuilt store expires what the lost one
    would have.

    ``log_next`` records how far the replayed records show the input applied. A broker
    may expose the records of a transaction a crashed processor left open (Kafka aborts
    it; Tansu commits it), so the changelog can be ahead of the committed consumer offsets;
    the caller resumes from whichever is later, and no update is applied twice.

    An empty store at least ``BULK_REBUILD_MIN_RECORDS`` behind is rebuilt in bulk mode
    (:meth:`Store.begin_rebuild`): a crash before the rebuild ends (or is cut short,
    which ends it too) leaves the store empty, and the next restore starts over.
    """
    changelog = topic.changelog_topic
    name = f"{topic.name}[{partition}]"
    start = offset_from(store.get_meta(CHANGELOG_OFFSET))
    estimate = reader.end_offset_estimate(changelog, partition)
    behind = None if estimate is None else max(estimate - start, 0)
    if behind:
        report(f"restoring {name} from {changelog}: about {behind:,} records to replay")
    began = time.monotonic()
    bulk = start == 0 and (behind or 0) >= BULK_REBUILD_MIN_RECORDS and _empty(store)
    if bulk:
        store.begin_rebuild()
    try:
        restored, applied, end = yield from _replay(
            store, topic, partition, reader, report, report_every_s, start, behind
        )
    finally:
        if bulk:
            store.end_rebuild()
    reached = reader.last_end_offset
    if 0 <= reached < start and applied == 0:
        log.log(
            lost_log_level(),
            "%s: the changelog %s ends at offset %d but the store reflects offset %d: the "
            "log was lost or truncated; keeping the store's %d records as they are (no "
            "replay) and re-publishing them to the new changelog",
            name,
            changelog,
            reached,
            start,
            store.count(),
        )
        store.write({}, {CHANGELOG_OFFSET: offset_bytes(reached), REPUBLISH_CURSOR: b""})
    if applied or behind:
        report(
            f"restored {name}: {applied:,} changelog records replayed in "
            f"{time.monotonic() - began:.3f}s, store at offset {end}"
            + (" (bulk rebuild)" if bulk else ""),
            extra=progress(applied, applied),
        )
    return restored


def _empty(store: Store) -> bool:
    return next(store.items(), None) is None


def _replay(
    store: Store,
    topic: SowTopic,
    partition: int,
    reader: PartitionReader,
    report: ProgressReport,
    report_every_s: float,
    start: int,
    behind: int | None,
) -> Generator[int, None, tuple[Restored, int, int]]:
    """The replay loop of :func:`restore_steps`; returns (what it found, records
    replayed, the changelog offset the store reached)."""
    restored = Restored()
    name = f"{topic.name}[{partition}]"
    expiring = topic.expiration_s is not None
    last_report = time.monotonic()
    applied = 0
    end = start
    unfinished: list[Record] = []
    for batch in reader.read_to_end(topic.changelog_topic, partition, start):
        end = replay_batch(store, batch, restored, unfinished, expiring)
        applied += len(batch)
        now = time.monotonic()
        if now - last_report >= report_every_s:
            last_report = now
            total = f" of about {behind:,}" if behind else ""
            report(
                f"restoring {name}: {applied:,}{total} changelog records replayed",
                extra=progress(applied, behind),
            )
        yield applied
    for record in unfinished:
        restored.saw_change(record)
    restored.applied = applied
    return restored, applied, end


def replay_batch(
    store: Store,
    batch: Sequence[Record],
    restored: Restored,
    unfinished: list[Record],
    expiring: bool,
) -> int:
    """Write one batch of a changelog partition's records (in offset order, following
    the store's changelog offset) into ``store``: data, control records (publisher
    sequences, resets, progress), due index entries when ``expiring``, and the changelog
    offset reached, in one atomic write; return that offset.

    ``restored`` notes the PROGRESS records; ``unfinished`` keeps the records after the
    last one (the caller passes them to :meth:`Restored.saw_change` when it is done).
    Used by restores and by standby stores (:mod:`processor.engine.standby`).
    """
    kind = type(batch[0])  # the log client's record class: its methods, looked up once
    keys: list[bytes | None] = list(map(kind.key, batch))
    values: list[bytes | None] = list(map(kind.value, batch))
    controls = list(compress(range(len(keys)), map(_is_control, keys)))
    meta: dict[bytes, bytes | None] = {}
    if not controls:
        updates: dict[bytes, bytes | None] = dict(zip(keys, values, strict=True))  # type: ignore[arg-type]
        unfinished.extend(batch)
    else:
        updates = {}
        begin = after_progress = 0
        for i in controls:
            updates.update(zip(keys[begin:i], values[begin:i], strict=True))  # type: ignore[arg-type]
            begin = i + 1
            key, value = keys[i] or b"", values[i]
            if key.startswith(STATE_PREFIX):
                meta[key] = value
            elif key.startswith(PUBLISHER_PREFIX):
                meta[meta_key_of_control(key)] = value
            elif key == RESET_KEY:
                updates.clear()
                meta.clear()
                stale = [
                    k
                    for prefix in (PUBLISHER_META_PREFIX, STATE_PREFIX)
                    for k, _ in store.meta_items(prefix)
                ]
                store.clear(dict.fromkeys(stale))
            elif key == PROGRESS_KEY and value is not None:
                meta.update(restored.saw_progress(value))
                unfinished.clear()
                after_progress = i + 1
        updates.update(zip(keys[begin:], values[begin:], strict=True))  # type: ignore[arg-type]
        unfinished.extend(batch[after_progress:])
    end = batch[-1].offset() + 1
    meta[CHANGELOG_OFFSET] = offset_bytes(end)
    store.write(updates, meta, due_entries(updates) if expiring else None)
    return end


def due_entries(updates: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
    """The due index entries of the records a replay step writes: one per record whose
    envelope has an expiration instant. Entries of the versions these replace stay in the
    index, stale (:mod:`processor.engine.expiry`); an undecodable envelope gets none."""
    due: dict[bytes, bytes | None] = {}
    for sow_key, envelope in updates.items():
        if envelope is None:
            continue
        try:
            expiration_ms = expiration_of(envelope)
        except EnvelopeError:
            continue
        if expiration_ms is not None:
            due[due_key(expiration_ms, sow_key)] = b""
    return due


def transient_start_offset(
    topic: SowTopic, log_topic: str, partition: int, reader: PartitionReader, started_ms: int
) -> int:
    """Where a transient topic re-reads its log from, per its RecoveryPoint.

    ``now`` means the publishes after the processor started (``started_ms``), including
    those accepted while it was still joining its consumer group.
    """
    point = topic.recovery_point
    if point.kind is RecoveryKind.EPOCH:
        return OFFSET_BEGINNING
    if point.kind is RecoveryKind.NOW:
        return reader.offset_for_time(log_topic, partition, started_ms)
    assert point.timestamp_ms is not None
    return reader.offset_for_time(log_topic, partition, point.timestamp_ms)


def write_reset(state: PartitionState, producer: TransactionalLog) -> None:
    """Start a transient partition's changelog afresh: readers drop what came before."""
    changelog = state.topic.changelog_topic
    producer.begin()
    producer.produce_tracked(changelog, b"reset", RESET_KEY, state.partition)
    producer.commit()
