"""State stores: one per SOW topic partition, bytes in and bytes out.

The records column holds ``SowKey -> changelog envelope``; the meta column holds the
offsets the data reflects and the engine's per-partition bookkeeping (duplicate detection,
the republish cursor); the due index holds the keys of the expiration index
(:mod:`processor.engine.expiry`: due time then SowKey, opaque bytes to the store, kept in
key order). ``write`` applies record changes, meta and index changes in one atomic batch,
so a store never holds data without the offsets it came from (or the reverse).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

#: Meta key: the next changelog offset the store has not applied yet.
CHANGELOG_OFFSET = b"changelog-offset"
#: Meta key: the store's layout version.
FORMAT_VERSION = b"format-version"
STORE_FORMAT = b"1"


#: Keys to put (a value) or delete (None), written in one atomic batch.
Changes = Mapping[bytes, bytes | None]


class Store(Protocol):
    """A key-value store of one SOW topic partition."""

    def get(self, sow_key: bytes) -> bytes | None:
        """The envelope stored for a SowKey, or None."""
        ...

    def items(self, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every (SowKey, envelope), in key order for RocksDB, insertion order in memory;
        with ``start``, only the keys from ``start`` on, in key order for both."""
        ...

    def count(self) -> int:
        """How many records the store holds (exact)."""
        ...

    def get_meta(self, key: bytes) -> bytes | None:
        """A metadata value, or None."""
        ...

    def meta_items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of the meta column whose key starts with ``prefix``, in key
        order for RocksDB, insertion order in memory. The caller must not write to the
        store while iterating."""
        ...

    def due_keys(self, start: bytes, before: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` keys of the due index below ``before``, in key order. ``start``
        is a hint: the caller knows there are no keys below it (RocksDB then seeks past
        the deleted ones instead of stepping over them); ``b""`` means no hint."""
        ...

    def write(self, records: Changes, meta: Changes, due: Changes | None = None) -> None:
        """Atomically put/delete (None) records, meta values and due index keys (whose
        values are put as given, and are not read back)."""
        ...

    def compact(self) -> tuple[int, int]:
        """Reclaim the space of deleted and overwritten entries now (AMPS's compact SOW;
        the action ``amps-action-do-compact-sow``) rather than when the store gets round
        to it; (bytes before, bytes after) of its data. The caller writes nothing
        meanwhile (the processor's loop compacts its own partitions)."""
        ...

    def clear(self, meta: Mapping[bytes, bytes | None]) -> None:
        """Atomically drop every record and the whole due index, and put/delete (None)
        meta values."""
        ...

    def begin_rebuild(self) -> None:
        """Prepare an empty store to be filled from its changelog in bulk: writes stay
        atomic, but until :meth:`end_rebuild` they may be durable only together, and a
        crash before it leaves the store empty again (its rebuild starts over). Only the
        writer may use the store meanwhile. Raises StoreError when the store holds
        records. Idempotent."""
        ...

    def end_rebuild(self) -> None:
        """End a rebuild: its writes become durable, possibly in the background (the
        next write or ``close`` waits for that); then writes are ordinary again. That
        write may reopen the store: iterators taken before it must be finished.
        Idempotent; ``close`` ends a rebuild too."""
        ...

    def close(self) -> None:
        """Release the store; idempotent."""
        ...


def offset_bytes(offset: int) -> bytes:
    """Encode an offset for the meta column."""
    return offset.to_bytes(8, "big", signed=True)


def offset_from(value: bytes | None, default: int = 0) -> int:
    """Decode an offset from the meta column."""
    return default if value is None else int.from_bytes(value, "big", signed=True)
