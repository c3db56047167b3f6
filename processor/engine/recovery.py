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

from processor.changelog import CONTROL_PREFIX, RESET_KEY
from processor.log import PartitionReader
from processor.state import CHANGELOG_OFFSET, Store, offset_bytes, offset_from
from processor.topology.model import RecoveryKind, SowTopic

log = logging.getLogger(__name__)

OFFSET_BEGINNING = -2
OFFSET_END = -1

ProgressReport = Callable[[str], None]


def restore_from_changelog(
    store: Store,
    topic: SowTopic,
    partition: int,
    reader: PartitionReader,
    report: ProgressReport = log.info,
) -> int:
    """Replay the changelog into ``store`` from its stored offset to the end.

    Returns the number of changelog records applied. When the changelog ends before the
    store's offset (the broker lost its log), the store keeps its state and takes no other
    action, as AMPS does when its transaction log is older than its SOW; the stored offset
    moves to the changelog's end so that new records are not skipped.
    """
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
    for batch in reader.read_to_end(changelog, partition, start):
        updates: dict[bytes, bytes | None] = {}
        for record in batch:
            key = record.key() or b""
            if key.startswith(CONTROL_PREFIX):
                if key == RESET_KEY:
                    updates.clear()
                    store.clear({})
                continue
            updates[key] = record.value()
        end = batch[-1].offset() + 1
        store.write(updates, {CHANGELOG_OFFSET: offset_bytes(end)})
        applied += len(batch)
        now = time.monotonic()
        if now - last_report >= 1.0:
            last_report = now
            total = f" of about {behind:,}" if behind else ""
            report(f"restoring {name}: {applied:,}{total} changelog records replayed")
    reached = reader.last_end_offset
    if 0 <= reached < start and applied == 0:
        log.warning(
            "%s: the changelog %s ends at offset %d but the store reflects offset %d: the "
            "log was lost or truncated; keeping the store's %d records and taking no action",
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
    return applied


def transient_start_offset(
    topic: SowTopic, log_topic: str, partition: int, reader: PartitionReader
) -> int:
    """Where a transient topic re-reads its log from, per its RecoveryPoint."""
    point = topic.recovery_point
    if point.kind is RecoveryKind.EPOCH:
        return OFFSET_BEGINNING
    if point.kind is RecoveryKind.NOW:
        return OFFSET_END
    assert point.timestamp_ms is not None
    return reader.offset_for_time(log_topic, partition, point.timestamp_ms)
