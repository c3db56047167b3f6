"""Replica snapshots: the read replica's records and the changelog positions they reflect,
in one file, so a restarted query service tails the changelogs from there instead of
replaying them from offset 0.

File layout (``<dir>/replica.snapshot``)::

    MAGIC | header length (u32) | header (JSON) | payload length (u64) | payload | CRC-32

The header holds the format, the Python marshal version, the topology's fingerprint,
the position vector (next changelog offset per changelog partition), the processor's
input progress and the record count; the payload is ``marshal`` of, per topic in header
order, its state as :meth:`~processor.replica.table.SowTable.export` gives it (SowKeys and
envelopes in record order, hash and memo index contents, so a restart decodes no
message; a queue's also holds its messages' states,
:mod:`processor.replica.queue_states`). The CRC covers
header and payload. The file is written to a temporary name, synced and renamed, so a
reader sees the previous snapshot or the new one, never a mixture.

A snapshot that is missing, damaged, from another topology or another Python marshal
version is not loaded (``load`` says why, and the replica replays from offset 0).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import marshal
import os
import struct
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.errors import SnapshotUnusableError
from processor.log import Record, TailState, lost_log_level
from processor.replica.table import SowTable
from processor.topology.model import Topology

log = logging.getLogger(__name__)

MAGIC = b"SOW-REPLICA-SNAPSHOT\n"
FORMAT = 2
FILE_NAME = "replica.snapshot"

TopicPartitionKey = tuple[str, int]
#: A changelog record as a snapshot remembers it: offset, timestamp (ms) and key.
RecordMark = tuple[int, int, bytes]


@dataclass(slots=True)
class Snapshot:
    """A replica's content: per SOW topic, its exported table state; the next changelog
    offset per changelog partition; the processor's input progress; the record count."""

    tables: dict[str, Any]
    positions: dict[TopicPartitionKey, int]
    log_next: dict[TopicPartitionKey, int]
    count: int
    #: The last record applied per changelog partition (see :class:`LogCheck`).
    last_records: dict[TopicPartitionKey, tuple[int, int, bytes]]


def fingerprint(topology: Topology) -> str:
    """What a snapshot must match to be loaded: each topic's name, changelog, partition
    count and message type."""
    return json.dumps(
        sorted(
            [t.name, t.changelog_topic, t.partitions, t.message_type]
            for t in topology.topics.values()
        )
    )


def write(
    directory: Path,
    topology: Topology,
    tables: Mapping[str, Mapping[str, Any]],
    positions: Mapping[TopicPartitionKey, int],
    log_next: Mapping[TopicPartitionKey, int],
    last_records: Mapping[TopicPartitionKey, tuple[int, int, bytes]],
) -> Path:
    """Write a snapshot atomically (temporary file, fsync, rename); return its path.

    ``tables`` holds each SOW topic's exported state (``SowTable.export``: plain data,
    with at least ``keys``); it must not change while this runs."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tables)
    header = json.dumps(
        {
            "format": FORMAT,
            "marshal": marshal.version,
            "topology": fingerprint(topology),
            "topics": names,
            "positions": [[t, p, o] for (t, p), o in positions.items()],
            "log_next": [[t, p, o] for (t, p), o in log_next.items()],
            "last_records": [[t, p, o, ts, k.hex()] for (t, p), (o, ts, k) in last_records.items()],
            "records": sum(len(t["keys"]) for t in tables.values()),
            "written_ms": int(time.time() * 1000),
        }
    ).encode()
    payload = marshal.dumps([dict(tables[n]) for n in names])
    crc = zlib.crc32(payload, zlib.crc32(header))
    path = directory / FILE_NAME
    temporary = directory / f".{FILE_NAME}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as out:
            out.write(MAGIC)
            out.write(struct.pack(">I", len(header)))
            out.write(header)
            out.write(struct.pack(">Q", len(payload)))
            out.write(payload)
            out.write(struct.pack(">I", crc))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    return path


def load(directory: Path, topology: Topology) -> Snapshot | None:
    """The snapshot in ``directory``, or None when there is none.

    Raises SnapshotUnusableError (saying what is wrong) for a damaged file, one of another
    format, topology or marshal version."""
    path = directory / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotUnusableError(f"cannot read {path}: {exc}") from exc
    try:
        if not raw.startswith(MAGIC):
            raise SnapshotUnusableError(f"{path} is not a replica snapshot")
        at = len(MAGIC)
        (header_size,) = struct.unpack_from(">I", raw, at)
        at += 4
        header_raw = raw[at : at + header_size]
        at += header_size
        (payload_size,) = struct.unpack_from(">Q", raw, at)
        at += 8
        payload = memoryview(raw)[at : at + payload_size]
        at += payload_size
        (crc,) = struct.unpack_from(">I", raw, at)
        if at + 4 != len(raw) or zlib.crc32(payload, zlib.crc32(header_raw)) != crc:
            raise SnapshotUnusableError(f"{path} is damaged (length or checksum mismatch)")
        header = json.loads(header_raw)
    except (struct.error, ValueError) as exc:
        raise SnapshotUnusableError(f"{path} is damaged: {exc}") from exc
    if header.get("format") != FORMAT or header.get("marshal") != marshal.version:
        raise SnapshotUnusableError(
            f"{path} has format {header.get('format')}/marshal {header.get('marshal')}; "
            f"this release reads {FORMAT}/{marshal.version}"
        )
    if header.get("topology") != fingerprint(topology):
        raise SnapshotUnusableError(f"{path} was written for another topology")
    enabled = gc.isenabled()
    gc.disable()  # millions of new objects, none cyclic: collections would only cost
    try:
        states: list[Any] = marshal.loads(payload)
        tables = dict(zip(header["topics"], states, strict=True))
    except (ValueError, EOFError, TypeError) as exc:
        raise SnapshotUnusableError(f"{path} is damaged: {exc}") from exc
    finally:
        if enabled:
            gc.enable()
    return Snapshot(
        tables,
        {(str(t), int(p)): int(o) for t, p, o in header["positions"]},
        {(str(t), int(p)): int(o) for t, p, o in header["log_next"]},
        int(header.get("records", 0)),
        {
            (str(t), int(p)): (int(o), int(ts), bytes.fromhex(k))
            for t, p, o, ts, k in header.get("last_records", [])
        },
    )


def peek(
    directory: Path, topology: Topology
) -> tuple[dict[TopicPartitionKey, int], dict[TopicPartitionKey, RecordMark]] | None:
    """The positions and last records a snapshot's header names, read without loading
    or checking the rest (so the changelogs can be fetched while it loads); None when
    there is no usable-looking snapshot. Only :func:`load` vouches for the snapshot."""
    path = directory / FILE_NAME
    try:
        with open(path, "rb") as source:
            if source.read(len(MAGIC)) != MAGIC:
                return None
            (header_size,) = struct.unpack(">I", source.read(4))
            header = json.loads(source.read(header_size))
        if header.get("format") != FORMAT or header.get("topology") != fingerprint(topology):
            return None
        return (
            {(str(t), int(p)): int(o) for t, p, o in header["positions"]},
            {
                (str(t), int(p)): (int(o), int(ts), bytes.fromhex(k))
                for t, p, o, ts, k in header["last_records"]
            },
        )
    except (OSError, struct.error, ValueError, KeyError, TypeError):
        return None


def load_or_replay(directory: Path, topology: Topology) -> Snapshot | None:
    """``load``, saying in the log what was loaded, or why the changelogs will be
    replayed from offset 0 instead (a warning for an unusable snapshot)."""
    began = time.monotonic()
    log.info("loading the replica snapshot from %s", directory)
    try:
        loaded = load(directory, topology)
    except SnapshotUnusableError as exc:
        log.warning("%s; ignoring it and replaying the changelogs from offset 0", exc)
        return None
    if loaded is None:
        log.info("no replica snapshot in %s: replaying the changelogs from offset 0", directory)
        return None
    log.info(
        "loaded the replica snapshot: %s records in %.1fs; reading the changelogs from its "
        "positions",
        f"{loaded.count:,}",
        time.monotonic() - began,
    )
    return loaded


Records = Mapping[str, Mapping[str, Any]]
Positions = Mapping[TopicPartitionKey, int]
Marks = Mapping[TopicPartitionKey, tuple[int, int, bytes]]


class SnapshotWriter:
    """Writes a replica's snapshots to one directory, one at a time, on a background
    thread or in the caller's; a failed write is logged (the snapshot only speeds up
    the next start). Used by the replica's applier thread only."""

    def __init__(self, directory: Path, topology: Topology, interval_s: float) -> None:
        self.directory = directory
        self.topology = topology
        self._interval_s = interval_s
        self._last = time.monotonic()
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def due(self, now: float) -> bool:
        """Whether a periodic snapshot is due at ``now`` (monotonic): the interval passed
        since the last and none is being written; counts it as taken."""
        if now - self._last < self._interval_s or self.busy():
            return False
        self._last = now
        return True

    def write_in_background(
        self, records: Records, positions: Positions, log_next: Positions, marks: Marks
    ) -> None:
        """Start writing unless a write is still running (then skip this one)."""
        if self.busy():
            return
        self._thread = threading.Thread(
            target=self.write,
            args=(records, positions, log_next, marks),
            name="sow-replica-snapshot",
            daemon=True,
        )
        self._thread.start()

    def write(
        self, records: Records, positions: Positions, log_next: Positions, marks: Marks
    ) -> None:
        """Write now, after any background write has finished."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        began = time.monotonic()
        try:
            path = write(self.directory, self.topology, records, positions, log_next, marks)
        except OSError as exc:
            log.warning("cannot write the replica snapshot to %s: %s", self.directory, exc)
            return
        log.info(
            "wrote the replica snapshot %s: %s records in %.1fs",
            path,
            f"{sum(len(t['keys']) for t in records.values()):,}",
            time.monotonic() - began,
        )


class LogCheck:
    """Checks that the changelogs a loaded snapshot is tailed from are the ones it was
    taken from (a memory-only broker that restarted starts new logs, which may have
    grown past the snapshot's positions by then).

    The replica reads each partition from the offset of the last record the snapshot
    holds; that record must come back unchanged (offset, key, timestamp). When it does,
    it is dropped (already applied); when another record comes first, or the partition
    ends before it, the partition is *mismatched*: read it again from offset 0.
    """

    def __init__(self, marks: Mapping[TopicPartitionKey, RecordMark]) -> None:
        self.waiting = dict(marks)

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def filter(
        self, records: Sequence[Record], states: Mapping[TopicPartitionKey, TailState]
    ) -> tuple[list[Record], list[TopicPartitionKey]]:
        """The records to apply, and the partitions found mismatched (their records are
        left out: they are read again)."""
        kept: list[Record] = []
        mismatched: list[TopicPartitionKey] = []
        waiting = self.waiting
        for record in records:
            tp = (record.topic(), record.partition())
            mark = waiting.pop(tp, None)
            if mark is None:
                if tp not in mismatched:
                    kept.append(record)
            elif mark == (record.offset(), record.timestamp()[1], record.key() or b""):
                continue  # the snapshot's last record: the log it was taken from
            else:
                mismatched.append(tp)
        for tp in list(waiting):
            state = states.get(tp)
            if state is not None and state.at_end:
                del waiting[tp]
                mismatched.append(tp)
        for tp in mismatched:
            log.log(
                lost_log_level(),
                "changelog %s[%d] does not hold the records the replica snapshot was taken "
                "from (the broker's log is a new one); reading it again from offset 0",
                tp[0],
                tp[1],
            )
        return kept, mismatched


def starts(
    partitions: Mapping[TopicPartitionKey, int],
    positions: Mapping[TopicPartitionKey, int],
    marks: Mapping[TopicPartitionKey, RecordMark],
) -> dict[TopicPartitionKey, int]:
    """Where a replica reads each of its changelog ``partitions`` from: its position, or
    for a loaded snapshot's partition, its last record (see :class:`LogCheck`)."""
    found = dict.fromkeys(partitions, 0)
    found.update((tp, o) for tp, o in positions.items() if tp in found)
    found.update((tp, mark[0]) for tp, mark in marks.items() if tp in found)
    return found


def restore_positions(
    loaded: Snapshot,
    changelog_next: dict[TopicPartitionKey, int],
    log_next: dict[TopicPartitionKey, int],
    marks: dict[TopicPartitionKey, RecordMark],
) -> LogCheck:
    """Set a replica's position vectors and record marks to a loaded snapshot's; the
    check of the changelogs it is tailed from."""
    for tp, offset in loaded.positions.items():
        if tp in changelog_next:
            changelog_next[tp] = offset
    log_next.update(loaded.log_next)
    marks.update(loaded.last_records)
    return LogCheck(loaded.last_records)


def restore_tables(loaded: Snapshot, tables: Mapping[str, SowTable], where: Path) -> bool:
    """Put a loaded snapshot's content into ``tables``; False (with a warning) when it
    does not fit them (a snapshot of another release): the caller starts empty."""
    try:
        for name, state in loaded.tables.items():
            tables[name].restore(state)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning(
            "the replica snapshot in %s does not fit this release's tables (%r); "
            "ignoring it and replaying the changelogs from offset 0",
            where,
            exc,
        )
        return False
    return True
