"""RocksDB store (rocksdict, raw bytes mode): the persistent SOW state of one partition.

Layout: one RocksDB database per SOW topic partition with column families ``records``
(SowKey -> changelog envelope), ``meta`` (changelog offset, format version) and ``due``
(the expiration index: due time then SowKey -> empty). Later features add their own
column families (hash indexes, history) to the same database so that their updates join
the same atomic batch.

A rebuild (an empty store filled from its changelog) writes in bulk mode: no write-ahead
log and an unsorted (vector) memtable, whose sorted inserts cost most of a restore's time
otherwise. A ``rebuilding`` marker, written durably before the first unlogged write and
deleted only after those writes are flushed to table files, makes a crash mid-rebuild
safe: a store opened with the marker present is emptied, and its rebuild starts over.
The flush that ends a rebuild runs in RocksDB's background threads; the store's next
write (or ``close``) waits for it, reopens the database with its ordinary memtable and
deletes the marker. Reads do not wait: the flushed memtable answers them meanwhile.
"""

from __future__ import annotations

import enum
import logging
import shutil
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from rocksdict import MemtableFactory, Options, Rdict, WriteBatch, WriteOptions

from processor.errors import StoreCorruptedError, StoreError
from processor.state import FORMAT_VERSION, STORE_FORMAT, Changes

log = logging.getLogger(__name__)

COLUMN_FAMILIES = ("records", "meta", "due")

#: Meta key: present while a rebuild's unlogged writes may not be on disk yet.
REBUILDING = b"rebuilding"


class _Mode(enum.Enum):
    ORDINARY = "ordinary"  # logged writes, sorted memtable
    BULK = "bulk"  # a rebuild: unlogged writes, unsorted memtable
    FLUSHING = "flushing"  # a rebuild ended: its memtable is being flushed


def _options(bulk: bool) -> tuple[Options, dict[str, Options]]:
    """Database and column-family options; ``bulk``: the records column takes puts into
    an unsorted memtable (sorted once, when flushed), which reads answer slowly."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(2)
    families = {name: Options(raw_mode=True) for name in COLUMN_FAMILIES}
    if bulk:
        options.set_allow_concurrent_memtable_write(False)  # the vector memtable needs it
        families["records"].set_memtable_factory(MemtableFactory.vector())
    return options, families


def _write_options(wal: bool, sync: bool = False) -> WriteOptions:
    options = WriteOptions()
    # A property at run time; rocksdict's stub declares a method.
    options.disable_wal = not wal  # type: ignore[method-assign,assignment]
    options.sync = sync
    return options


class RocksDBStore:
    """A :class:`~processor.state.Store` in a RocksDB directory.

    ``open`` raises StoreCorruptedError when the directory exists but is not a readable
    store of this format; :func:`quarantine` moves such a directory aside for rebuilding.
    A store whose rebuild was cut short by a crash opens empty (a warning says so).
    Single-writer, and readers in other threads see whole batches only, except between
    ``begin_rebuild`` and ``end_rebuild``, when only the writer may use the store.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._closed = True
        self._mode = _Mode.ORDINARY
        self._write_with = _write_options(wal=True)
        self._open(bulk=False)
        if self._meta_view.get(REBUILDING) is not None:
            log.warning(
                "the store %s was being rebuilt from its changelog when its process "
                "stopped: emptying it; its rebuild starts over",
                path,
            )
            self._close_db()
            shutil.rmtree(path)
            self._open(bulk=False)
        version = self._meta_view.get(FORMAT_VERSION)
        if version is None:
            self.write({}, {FORMAT_VERSION: STORE_FORMAT})
        elif version != STORE_FORMAT:
            self.close()
            raise StoreCorruptedError(
                f"the store at {path} has format {version!r}, this release reads {STORE_FORMAT!r}"
            )

    def _open(self, bulk: bool) -> None:
        path = self.path
        options, families = _options(bulk)
        try:
            self._db = Rdict(str(path), options, column_families=families)
            self._records = self._db.get_column_family_handle("records")
            self._meta = self._db.get_column_family_handle("meta")
            self._due = self._db.get_column_family_handle("due")
            self._records_view = self._db.get_column_family("records")
            self._meta_view = self._db.get_column_family("meta")
            self._due_view = self._db.get_column_family("due")
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB statuses
            if "lock" in str(exc).lower():
                raise StoreError(
                    f"the RocksDB store at {path} is in use by another process or store "
                    f"object ({exc}); run one processor per state directory and instance id"
                ) from exc
            raise StoreCorruptedError(f"cannot open the RocksDB store at {path}: {exc}") from exc
        self._closed = False

    def get(self, sow_key: bytes) -> bytes | None:
        value = self._records_view.get(sow_key)
        return None if value is None else bytes(value)

    def items(self, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return cast(Iterator[tuple[bytes, bytes]], iter(self._records_view.items(from_key=start)))

    def count(self) -> int:
        keys = cast(Iterator[bytes], iter(self._records_view.keys()))
        return sum(1 for _ in keys)

    def get_meta(self, key: bytes) -> bytes | None:
        value = self._meta_view.get(key)
        return None if value is None else bytes(value)

    def meta_items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        found = cast(Iterator[tuple[bytes, bytes]], self._meta_view.items(from_key=prefix))
        for key, value in found:
            if not key.startswith(prefix):
                return
            yield key, value

    def due_keys(self, start: bytes, before: bytes, limit: int) -> list[bytes]:
        found: list[bytes] = []
        if limit <= 0:
            return found
        keys = cast(Iterator[bytes], self._due_view.keys(from_key=start or None))
        for key in keys:
            if key >= before:
                break
            found.append(key)
            if len(found) >= limit:
                break
        return found

    def write(self, records: Changes, meta: Changes, due: Changes | None = None) -> None:
        if self._mode is _Mode.FLUSHING:
            self._settle()
        batch = WriteBatch(raw_mode=True)
        batch.set_default_column_family(self._records)
        if None in records.values():
            put, delete = batch.put, batch.delete
            for key, value in records.items():
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        else:  # the common case (restores, upserts): puts driven from C
            deque(map(batch.put, records.keys(), records.values()), maxlen=0)
        _stage(batch, meta, self._meta)
        if due:
            _stage(batch, due, self._due)
        try:
            self._db.write(batch, self._write_with)
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB statuses
            raise StoreError(f"cannot write to the RocksDB store at {self.path}: {exc}") from exc

    @property
    def rebuilding(self) -> bool:
        """Whether a rebuild's writes may not be durable yet (from ``begin_rebuild`` to
        the write or ``close`` after ``end_rebuild``)."""
        return self._mode is not _Mode.ORDINARY

    def begin_rebuild(self) -> None:
        """Switch an empty store to bulk mode for a rebuild from its changelog: the
        ``rebuilding`` marker is written and synced first, then the database reopens
        with an unsorted memtable and later writes skip the write-ahead log.

        Raises StoreError when the store holds records (wiping it after a crash would
        lose them). Idempotent.
        """
        if self._mode is _Mode.BULK:
            return
        self._settle()
        if next(iter(self._records_view.keys()), None) is not None:
            raise StoreError(
                f"the store at {self.path} holds records: only an empty store is rebuilt "
                "in bulk; replay into it with ordinary writes"
            )
        self._write_with = _write_options(wal=True, sync=True)
        self.write({}, {REBUILDING: b"1"})
        self._reopen(bulk=True)
        self._mode = _Mode.BULK
        self._write_with = _write_options(wal=False)

    def end_rebuild(self) -> None:
        """Leave bulk mode: start flushing the rebuild's writes to table files (in the
        background) and return. The next write or ``close`` waits for the flush, reopens
        the database with its ordinary memtable and deletes the ``rebuilding`` marker
        (a logged write). Idempotent."""
        if self._mode is _Mode.BULK:
            self._flush(wait=False)
            self._mode = _Mode.FLUSHING

    def _settle(self) -> None:
        """Finish an ended rebuild (see ``end_rebuild``); a no-op otherwise."""
        if self._mode is not _Mode.FLUSHING:
            return
        self._flush(wait=True)
        self._reopen(bulk=False)
        self._mode = _Mode.ORDINARY
        self._write_with = _write_options(wal=True)
        self.write({}, {REBUILDING: None})

    def _flush(self, wait: bool) -> None:
        try:
            self._records_view.flush(wait)
            self._meta_view.flush(wait)
            self._due_view.flush(wait)
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB statuses
            raise StoreError(f"cannot flush the RocksDB store at {self.path}: {exc}") from exc

    def _reopen(self, bulk: bool) -> None:
        self._close_db()
        self._open(bulk)

    def clear(self, meta: Mapping[bytes, bytes | None]) -> None:
        keys: list[bytes] = list(self._records_view.keys())  # type: ignore[arg-type]
        due: list[bytes] = list(self._due_view.keys())  # type: ignore[arg-type]
        self.write(dict.fromkeys(keys), meta, dict.fromkeys(due))

    def compact(self) -> tuple[int, int]:
        try:
            before = self._disk_bytes()
            for view in (self._records_view, self._meta_view, self._due_view):
                view.compact_range(None, None)
            return before, self._disk_bytes()
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB statuses
            raise StoreError(f"cannot compact the RocksDB store at {self.path}: {exc}") from exc

    def _disk_bytes(self) -> int:
        """The bytes of the store's data: its SST files and memtables, every family."""
        total = 0
        for view in (self._records_view, self._meta_view, self._due_view):
            for name in ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"):
                total += view.property_int_value(name) or 0
        return total

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        if self.rebuilding:  # keep what was rebuilt: a later restore goes on from there
            self._flush(wait=True)
            self._mode = _Mode.ORDINARY
            self._write_with = _write_options(wal=True)
            self.write({}, {REBUILDING: None})
        self._close_db()

    def _close_db(self) -> None:
        self._closed = True
        # Every column-family view holds the database open; close them all, then drop them.
        self._records_view.close()
        self._meta_view.close()
        self._due_view.close()
        self._db.close()
        del self._records_view, self._meta_view, self._due_view
        del self._records, self._meta, self._due, self._db


def quarantine(path: Path) -> Path | None:
    """Move a damaged store directory aside (kept for inspection); return where it went."""
    if not path.exists():
        return None
    target = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    shutil.move(str(path), str(target))
    log.warning("moved the damaged store %s aside to %s; rebuilding it", path, target)
    return target


def _stage(batch: Any, changes: Changes, handle: Any) -> None:
    """Put (a value) or delete (None) each of ``changes`` in one column family's part of
    a write batch."""
    for key, value in changes.items():
        if value is None:
            batch.delete(key, handle)
        else:
            batch.put(key, value, handle)
