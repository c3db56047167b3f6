"""Planning a read into offset ranges (driver) and reading one range (executor).

Planning asks the broker for each partition's end, confirmed by a fetch (never trusting
ListOffsets alone), and cuts each partition into :class:`Split` ranges: one per Kafka
partition, several for a partition longer than ``max_records_per_split``. ``mode=latest``
keeps one split per partition, since a key's whole history is in one partition and its
last value is decided there.

Latest state, as the query service's replica computes it: changelog records applied in
offset order, control records skipped (RESET empties the partition), tombstones remove
the key. With ``as_of`` at a time, only whole processor transactions (units ending with a
PROGRESS or RESET record) whose records are all at or before that time are applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructType

from processor.changelog import (
    CONTROL_PREFIX,
    PROGRESS_KEY,
    RESET_KEY,
    decode,
)
from processor.changelog.commands import FILTER_DELETE_KEY
from processor.errors import ConfigurationError, EnvelopeError
from processor.log import Record
from processor.log.kafka.ranges import KafkaRangeReader, partition_count
from processor.spark.batches import BatchBuilder, ChangelogItem, InputItem, tombstone_change
from processor.spark.options import ReadOptions

#: Rows per Arrow batch for a latest read (other reads yield one batch per fetch).
LATEST_BATCH = 20_000
UNIT_ENDS = (PROGRESS_KEY, RESET_KEY)


@dataclass(frozen=True, slots=True)
class Split:
    """Offsets ``start <= offset < end`` of one Kafka partition. ``closed``: ``end`` is
    where the partition ended when the read was planned (not an as_of cut)."""

    partition: int
    start: int
    end: int
    closed: bool = True


def end_offsets(options: ReadOptions) -> dict[int, int]:
    """Each partition's end, confirmed by a fetch."""
    reader = KafkaRangeReader(options.bootstrap, **options.kafka)
    try:
        count = partition_count(options.bootstrap, options.kafka_topic, options.kafka)
        return {p: reader.end_offset(options.kafka_topic, p) for p in range(count)}
    finally:
        reader.close()


def _cut(options: ReadOptions, ends: Mapping[int, int]) -> dict[int, int]:
    """Where ``as_of`` ends each partition (the planned ends without as_of)."""
    if options.as_of_positions is not None:
        missing = sorted(set(ends) - set(options.as_of_positions))
        if missing:
            raise ConfigurationError(
                f"option as_of has no position for partition(s) {missing} of "
                f"{options.kafka_topic}; give one per partition (a sow query's bookmark)"
            )
        return {p: min(end, options.as_of_positions[p]) for p, end in ends.items()}
    if options.as_of_ms is not None:
        reader = KafkaRangeReader(options.bootstrap, **options.kafka)
        try:
            return {
                p: min(end, reader.offset_for_time(options.kafka_topic, p, options.as_of_ms + 1))
                for p, end in ends.items()
            }
        finally:
            reader.close()
    return dict(ends)


def plan(
    options: ReadOptions,
    starts: Mapping[int, int] | None = None,
    ends: Mapping[int, int] | None = None,
    partitions: Iterable[int] | None = None,
) -> list[Split]:
    """The splits of a read: from ``starts`` (default 0) to ``ends`` (default: the
    partitions' ends, cut by as_of), only ``partitions`` when given."""
    planned = dict(ends) if ends is not None else end_offsets(options)
    cut = _cut(options, planned) if ends is None else planned
    wanted = set(planned if partitions is None else partitions)
    splits: list[Split] = []
    step = options.max_records_per_split
    for p in sorted(wanted & set(planned)):
        start = (starts or {}).get(p, 0)
        end = cut[p]
        # A time cut keeps whole transactions only; a position vector is taken as given.
        closed = end >= planned[p] or options.as_of_positions is not None
        if options.latest:
            splits.append(Split(p, 0, end, closed))
            continue
        while start < end:
            splits.append(Split(p, start, min(start + step, end), closed))
            start += step
    return splits


def read_split(options: ReadOptions, schema: StructType, split: Split) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one split (executor side)."""
    builder = BatchBuilder(options, schema)
    reader = KafkaRangeReader(options.bootstrap, **options.kafka)
    batches = reader.read_range(options.kafka_topic, split.partition, split.start, split.end)
    try:
        if options.read == "input":
            for records in batches:
                yield builder.input_batch(input_items(records))
        elif options.latest:
            state = latest_state(batches, split.closed)
            for chunk in _chunks(list(state.values()), LATEST_BATCH):
                yield builder.changelog_batch(changelog_items(chunk, builder))
        else:
            for records in batches:
                yield builder.changelog_batch(changelog_items(records, builder))
    finally:
        # The range first (it unassigns the consumer), then the consumer: Spark stops
        # reading early for limit() and the like.
        batches.close()
        reader.close()


def changelog_items(records: Sequence[Record], builder: BatchBuilder) -> list[ChangelogItem]:
    """One item per changelog record that becomes a row (control records other than
    RESET do not)."""
    items: list[ChangelogItem] = []
    for record in records:
        key = record.key()
        value = record.value()
        if key is not None and key.startswith(CONTROL_PREFIX):
            if key == RESET_KEY:
                items.append((record, None, "reset", None))
            continue
        if value is None:
            items.append((record, None, tombstone_change(record)[0], None))
            continue
        try:
            envelope = decode(value)
        except EnvelopeError as exc:
            items.append((record, None, None, builder.corrupt(record, f"not an envelope: {exc}")))
        else:
            items.append((record, envelope, "publish", None))
    return items


def input_items(records: Sequence[Record]) -> list[InputItem]:
    """One item per transaction-log command."""
    items: list[InputItem] = []
    for record in records:
        if record.value() is not None:
            items.append((record, "publish"))
        elif record.key() == FILTER_DELETE_KEY:
            items.append((record, "delete_filter"))
        else:
            items.append((record, "delete"))
    return items


def latest_state(batches: Iterable[Sequence[Record]], closed: bool) -> dict[bytes, Record]:
    """The last upsert record per SowKey after applying the changelog records in order,
    one unit at a time; records after the last unit end count only when ``closed``."""
    state: dict[bytes, Record] = {}
    pending: list[Record] = []
    for records in batches:
        for record in records:
            pending.append(record)
            if record.key() in UNIT_ENDS:
                _apply(state, pending)
                pending = []
    if closed:
        _apply(state, pending)
    return state


def _apply(state: dict[bytes, Record], records: Sequence[Record]) -> None:
    for record in records:
        key = record.key() or b""
        if key.startswith(CONTROL_PREFIX):
            if key == RESET_KEY:
                state.clear()
        elif record.value() is None:
            state.pop(key, None)
        else:
            # Moved to the end, so the result lists keys in order of last change.
            state.pop(key, None)
            state[key] = record


def _chunks(items: list[Record], size: int) -> Iterator[list[Record]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
