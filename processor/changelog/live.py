"""Live units: changelog records handed from the processor to the read replica beside it
as they are applied, before the Kafka transaction that writes them commits (issue 34).

Why it is safe for some topics (the processor decides which, :mod:`processor.engine.live`):
the input record is already durable in Kafka when the processor reads it, and applying it
to a store partition is deterministic, so a processor that dies before its commit applies
the same records again, to the same state, with the same result. The replica keeps what it
was handed; the records that the restarted processor commits again are recognised by their
input positions and dropped (:mod:`processor.replica.live`).

The processor is the only writer of its changelog partitions (issue 31: one owner), so it
knows where its next transaction's records will land: right after the previous
transaction's PROGRESS record and its commit marker. A unit names that previous PROGRESS
record (``after``) and the offset of its first record (``base``); the replica applies a
unit only right after what it already holds, and a :class:`LiveDone`, sent once the commit
returned, tells it the offset of the transaction's PROGRESS record and the input positions
it reached (what ``processed`` acknowledgements wait for).

Between processes (``sow serve``'s processor child) the units travel over a pipe in frames:
a 4-byte big-endian length, then :mod:`marshal` data of plain tuples (both ends are the same
program; nothing else writes to the pipe). :class:`PipeSink` writes them without ever
blocking the processor: what the pipe cannot take now waits in a buffer, and past
``PipeSink.LIMIT`` bytes new frames are dropped (the replica then takes those records from
the changelog, as it does without live units). Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import marshal
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: (key, value or None, headers or None) of one changelog record.
LiveRecordData = tuple[bytes, "bytes | None", "list[tuple[str, bytes]] | None"]
#: (log topic, partition, next offset): how far a batch read one input.
Reached = tuple[str, int, int]
#: A record handed over as produced: (topic, key, value, partition, headers), as
#: ``processor.log.LogRecord`` (the changelog package does not import the log's).
HandedRecord = tuple[str, "bytes | None", "bytes | None", int, "list[tuple[str, bytes]] | None"]


@dataclass(frozen=True, slots=True)
class LiveUnit:
    """The changelog records one transaction writes to one changelog partition, handed
    over before the commit: ``records[i]`` will be at offset ``base + i``, right after the
    previous transaction's PROGRESS record at ``after`` (and its commit marker).
    ``transaction`` is unique per processor run; ``reached``: the input positions the
    batch read up to (what the replica drops again when a restarted processor commits the
    same records)."""

    changelog: str
    partition: int
    transaction: tuple[int, int]
    after: int
    base: int
    timestamp_ms: int
    records: list[LiveRecordData]
    reached: list[Reached]


@dataclass(frozen=True, slots=True)
class LiveDone:
    """A transaction with a live unit in this changelog partition committed: its PROGRESS
    record is at ``end``, and it reached the input positions ``progress``."""

    changelog: str
    partition: int
    transaction: tuple[int, int]
    end: int
    progress: list[Reached]


def encode_frame(
    units: Sequence[LiveUnit],
    dones: Sequence[LiveDone],
    ended: bool = False,
    handed: Sequence[HandedRecord] = (),
) -> bytes:
    """One frame: its length, then the units, dones and handed records as plain tuples
    (``ended``: the processor run that sent the earlier frames is over, see
    :class:`Frame`)."""
    body = marshal.dumps(
        (
            [
                (
                    u.changelog,
                    u.partition,
                    u.transaction,
                    u.after,
                    u.base,
                    u.timestamp_ms,
                    u.records,
                    u.reached,
                )
                for u in units
            ],
            [(d.changelog, d.partition, d.transaction, d.end, d.progress) for d in dones],
            ended,
            list(handed),
        )
    )
    return len(body).to_bytes(4, "big") + body


@dataclass(frozen=True, slots=True)
class Frame:
    """What one frame carries. ``ended``: the processor run whose units came before is
    over (its pipeline restarted), so what it held back may never be committed."""

    units: list[LiveUnit]
    dones: list[LiveDone]
    ended: bool = False
    #: Records produced in a transaction and handed over as they are (a queue's
    #: at-least-once leases, ``PartitionBatch.hand_over``).
    handed: list[HandedRecord] = field(default_factory=list)


def decode_body(body: bytes) -> Frame:
    """The units and dones of one frame's body (without its length)."""
    units, dones, ended, handed = marshal.loads(body)
    return Frame(
        [
            LiveUnit(c, p, tuple(t), a, b, ts, list(records), [tuple(r) for r in reached])
            for c, p, t, a, b, ts, records, reached in units
        ],
        [
            LiveDone(c, p, tuple(t), e, [tuple(r) for r in progress])
            for c, p, t, e, progress in dones
        ],
        ended,
        [
            (t, k, v, p, [tuple(h) for h in headers] if headers else None)
            for t, k, v, p, headers in handed
        ],
    )


#: Where a frame's parts go in the query service: ``(units, dones, ended, handed)``.
LiveTarget = Callable[[Sequence[LiveUnit], Sequence[LiveDone], bool, Sequence[HandedRecord]], None]


def read_frames(fd: int) -> Iterator[Frame]:
    """Every frame read from ``fd`` (blocking) until its end of file; closes ``fd``."""
    buffer = b""
    try:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            buffer = buffer + chunk if buffer else chunk
            at = 0
            while len(buffer) - at >= 4:
                size = int.from_bytes(buffer[at : at + 4], "big")
                if len(buffer) - at < 4 + size:
                    break
                yield decode_body(buffer[at + 4 : at + 4 + size])
                at += 4 + size
            buffer = buffer[at:]
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


class PipeSink:
    """Writes frames to a pipe's write end without ever blocking (see the module doc)."""

    #: Bytes waiting for the pipe beyond which new frames are dropped.
    LIMIT = 16 << 20

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError, AttributeError):  # Linux: a larger pipe buffer
            import fcntl

            fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ
        self._fd = fd
        self._waiting = bytearray()
        self._closed = False
        #: Frames dropped because the reader did not keep up (monitoring, tests).
        self.dropped = 0

    def send(
        self,
        units: Sequence[LiveUnit],
        dones: Sequence[LiveDone],
        ended: bool = False,
        handed: Sequence[HandedRecord] = (),
    ) -> None:
        if self._closed:
            return
        frame = encode_frame(units, dones, ended, handed)
        if len(self._waiting) > self.LIMIT:
            self._flush()
            if len(self._waiting) > self.LIMIT:
                self.dropped += 1
                return
        self._waiting += frame
        self._flush()

    def _flush(self) -> None:
        while self._waiting:
            try:
                written = os.write(self._fd, self._waiting)
            except BlockingIOError:
                return
            except OSError as exc:  # the reader is gone: nobody to hand units to
                if exc.errno not in (errno.EPIPE, errno.EBADF):
                    log.warning("live units no longer reach the query service: %s", exc)
                self._closed = True
                self._waiting.clear()
                return
            del self._waiting[:written]
