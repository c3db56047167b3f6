"""Recovery: bring a store partition up to its changelog before processing resumes.

Runs on start and on every partition assignment. A persistent store replays its changelog
from the offset it stored (a missing store starts from 0, a damaged one is moved aside and
rebuilt). A transient store starts empty and instead re-reads the transaction log from its
RecoveryPoint. Progress is logged at least every second while a replay runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from itertools import chain

from processor.changelog import (
    CONTROL_PREFIX,
    POSITION_HEADER,
    PROGRESS_KEY,
    PUBLISHER_PREFIX,
    RESET_KEY,
    decode,
    decode_progress,
    decode_progress_publishers,
    encode_progress,
    parse_position,
)
from processor.engine.partition import PartitionState
from processor.engine.publishers import (
    PUBLISHER_META_PREFIX,
    control_records,
    meta_key,
    meta_key_of_control,
)
from processor.log import PartitionReader, Record, TransactionalLog
from processor.state import CHANGELOG_OFFSET, Store, offset_bytes, offset_from
from processor.topology.model import RecoveryKind, SowTopic

log = logging.getLogger(__name__)

OFFSET_BEGINNING = -2

ProgressReport = Callable[[str], None]


class Restored:
    """What a restore found: records replayed, whether the log was lost, and how far the
    changelog shows the input was applied (next offset per log topic)."""

    __slots__ = ("applied", "log_lost", "log_next")

    def __init__(self) -> None:
        self.applied = 0
        self.log_lost = False
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
        """An upsert or delete after the last progress record (an unfinished batch)."""
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
    """Replay the changelog into ``store`` from its stored offset to the end.

    When the changelog ends before the store's offset (the broker lost its log), the store
    keeps its state and takes no other action, as AMPS does when its transaction log is
    older than its SOW; ``log_lost`` tells the caller, which re-publishes the state.

    Publisher control records become the store's publisher meta entries, so a store
    rebuilt from the changelog discards the same repeated sequences as before.

    ``log_next`` records how far the replayed records show the input applied. A broker
    may expose the records of a transaction a crashed processor left open (Kafka aborts
    it; Tansu commits it), so the changelog can be ahead of the committed consumer offsets;
    the caller resumes from whichever is later, and no update is applied twice.
    """
    restored = Restored()
    changelog = topic.changelog_topic
    name = f"{topic.name}[{partition}]"
    start = offset_from(store.get_meta(CHANGELOG_OFFSET))
    estimate = reader.end_offset_estimate(changelog, partition)
    behind = None if estimate is None else max(estimate - start, 0)
    if behind:
        report(f"restoring {name} from {changelog}: about {behind:,} records to replay")
    began = last_report = time.monotonic()
    applied = 0
    end = start
    unfinished: list[Record] = []
    for batch in reader.read_to_end(changelog, partition, start):
        updates: dict[bytes, bytes | None] = {}
        meta: dict[bytes, bytes | None] = {}
        for record in batch:
            key = record.key() or b""
            if key.startswith(CONTROL_PREFIX):
                if key.startswith(PUBLISHER_PREFIX):
                    meta[meta_key_of_control(key)] = record.value()
                elif key == RESET_KEY:
                    updates.clear()
                    meta.clear()
                    stale = [k for k, _ in store.meta_items(PUBLISHER_META_PREFIX)]
                    store.clear(dict.fromkeys(stale))
                elif key == PROGRESS_KEY and record.value() is not None:
                    meta.update(restored.saw_progress(record.value() or b""))
                    unfinished.clear()
                continue
            unfinished.append(record)
            updates[key] = record.value()
        end = batch[-1].offset() + 1
        meta[CHANGELOG_OFFSET] = offset_bytes(end)
        store.write(updates, meta)
        applied += len(batch)
        now = time.monotonic()
        if now - last_report >= 1.0:
            last_report = now
            total = f" of about {behind:,}" if behind else ""
            report(f"restoring {name}: {applied:,}{total} changelog records replayed")
    for record in unfinished:
        restored.saw_change(record)
    restored.applied = applied
    reached = reader.last_end_offset
    if 0 <= reached < start and applied == 0:
        restored.log_lost = True
        log.warning(
            "%s: the changelog %s ends at offset %d but the store reflects offset %d: the "
            "log was lost or truncated; keeping the store's %d records as they are (no "
            "replay) and re-publishing them to the new changelog",
            name,
            changelog,
            reached,
            start,
            store.count(),
        )
        store.write({}, {CHANGELOG_OFFSET: offset_bytes(reached)})
    if applied or behind:
        report(
            f"restored {name}: {applied:,} changelog records replayed in "
            f"{time.monotonic() - began:.1f}s, store at offset {end}"
        )
    return restored


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


def republish(
    state: PartitionState,
    producer: TransactionalLog,
    chunk: int = 10000,
    report: ProgressReport = log.info,
) -> None:
    """Write a store's records back to its (lost) changelog, so readers see the SOW again.

    Used after the broker lost its log while the store kept its state. Transactions of
    ``chunk`` records (the SOW records, then one control record per publisher); the
    store's changelog offset follows each commit.
    """
    changelog = state.topic.changelog_topic
    name = f"{state.topic.name}[{state.partition}]"
    total = state.store.count()
    report(f"{name}: the changelog was lost; re-publishing {total:,} records from the store")
    items = chain(state.store.items(), control_records(state.store))
    written = 0
    while True:
        producer.begin()
        count = 0
        for key, value in items:
            producer.produce(changelog, value, key, state.partition)
            count += 1
            if count >= chunk:
                break
        progress = encode_progress([])
        producer.produce_tracked(changelog, progress, PROGRESS_KEY, state.partition)
        ends = producer.commit()
        end = ends[(changelog, state.partition)]
        state.store.write({}, {CHANGELOG_OFFSET: offset_bytes(end + 1)})
        written += count
        report(f"{name}: re-published {written:,} of {total:,} records")
        if count < chunk:
            return
