"""Replica snapshots: the read replica's records and the changelog positions they reflect,
in one file, so a restarted query service tails the changelogs from there instead of
replaying them from offset 0.

File layout (``<dir>/replica.snapshot``)::

    MAGIC | header length (u32) | header (JSON) | payload length (u64) | payload | CRC-32

The header holds the format, the Python marshal version, the topology's fingerprint,
the position vector (next changelog offset per changelog partition), the processor's
input progress and the record count; the payload is ``marshal`` of, per topic in header
order, the list of SowKeys and the list of envelopes in record order. The CRC covers
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

from processor.errors import StoreError
from processor.topology.model import Topology

log = logging.getLogger(__name__)

MAGIC = b"SOW-REPLICA-SNAPSHOT\n"
FORMAT = 1
FILE_NAME = "replica.snapshot"

TopicPartitionKey = tuple[str, int]


class SnapshotUnusableError(StoreError):
    """A snapshot file exists but cannot be used (the message says why)."""


@dataclass(slots=True)
class Snapshot:
    """A replica's content: per SOW topic, its records in record order; the next
    changelog offset per changelog partition; the processor's input progress."""

    records: dict[str, dict[bytes, bytes]]
    positions: dict[TopicPartitionKey, int]
    log_next: dict[TopicPartitionKey, int]

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.records.values())


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
    records: Mapping[str, tuple[Sequence[bytes], Sequence[bytes]]],
    positions: Mapping[TopicPartitionKey, int],
    log_next: Mapping[TopicPartitionKey, int],
) -> Path:
    """Write a snapshot atomically (temporary file, fsync, rename); return its path.

    ``records`` holds, per SOW topic, its SowKeys and its envelopes in record order; they
    must not change while this runs (the replica passes copies)."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(records)
    header = json.dumps(
        {
            "format": FORMAT,
            "marshal": marshal.version,
            "topology": fingerprint(topology),
            "topics": names,
            "positions": [[t, p, o] for (t, p), o in positions.items()],
            "log_next": [[t, p, o] for (t, p), o in log_next.items()],
            "records": sum(len(keys) for keys, _ in records.values()),
            "written_ms": int(time.time() * 1000),
        }
    ).encode()
    payload = marshal.dumps([(list(records[n][0]), list(records[n][1])) for n in names])
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
        tables: Sequence[tuple[list[bytes], list[bytes]]] = marshal.loads(payload)
        records = {
            name: dict(zip(keys, values, strict=True))
            for name, (keys, values) in zip(header["topics"], tables, strict=True)
        }
    except (ValueError, EOFError, TypeError) as exc:
        raise SnapshotUnusableError(f"{path} is damaged: {exc}") from exc
    finally:
        if enabled:
            gc.enable()
    return Snapshot(
        records,
        {(str(t), int(p)): int(o) for t, p, o in header["positions"]},
        {(str(t), int(p)): int(o) for t, p, o in header["log_next"]},
    )


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


Records = Mapping[str, tuple[Sequence[bytes], Sequence[bytes]]]
Positions = Mapping[TopicPartitionKey, int]


class SnapshotWriter:
    """Writes a replica's snapshots to one directory, one at a time, on a background
    thread or in the caller's; a failed write is logged (the snapshot only speeds up
    the next start). Used by the replica's applier thread only."""

    def __init__(self, directory: Path, topology: Topology) -> None:
        self.directory = directory
        self.topology = topology
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def write_in_background(
        self, records: Records, positions: Positions, log_next: Positions
    ) -> None:
        """Start writing unless a write is still running (then skip this one)."""
        if self.busy():
            return
        self._thread = threading.Thread(
            target=self.write,
            args=(records, positions, log_next),
            name="sow-replica-snapshot",
            daemon=True,
        )
        self._thread.start()

    def write(self, records: Records, positions: Positions, log_next: Positions) -> None:
        """Write now, after any background write has finished."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        began = time.monotonic()
        try:
            path = write(self.directory, self.topology, records, positions, log_next)
        except OSError as exc:
            log.warning("cannot write the replica snapshot to %s: %s", self.directory, exc)
            return
        log.info(
            "wrote the replica snapshot %s: %s records in %.1fs",
            path,
            f"{sum(len(keys) for keys, _ in records.values()):,}",
            time.monotonic() - began,
        )
