"""RocksDB store (rocksdict, raw bytes mode): the persistent SOW state of one partition.

Layout: one RocksDB database per SOW topic partition with column families ``records``
(SowKey -> changelog envelope) and ``meta`` (changelog offset, format version). Later
features add their own column families (hash indexes, expiration, history) to the same
database so that their updates join the same atomic batch.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

from rocksdict import Options, Rdict, WriteBatch

from processor.errors import StoreCorruptedError, StoreError
from processor.state import FORMAT_VERSION, STORE_FORMAT

log = logging.getLogger(__name__)

COLUMN_FAMILIES = ("records", "meta")


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(2)
    return options


class RocksDBStore:
    """A :class:`~processor.state.Store` in a RocksDB directory.

    ``open`` raises StoreCorruptedError when the directory exists but is not a readable
    store of this format; :func:`quarantine` moves such a directory aside for rebuilding.
    Single-writer; readers in other threads see whole batches only.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(
                str(path),
                _options(),
                column_families={name: Options(raw_mode=True) for name in COLUMN_FAMILIES},
            )
            self._records = self._db.get_column_family_handle("records")
            self._meta = self._db.get_column_family_handle("meta")
            self._records_view = self._db.get_column_family("records")
            self._meta_view = self._db.get_column_family("meta")
        except Exception as exc:
            if "lock" in str(exc).lower():
                raise StoreError(
                    f"the RocksDB store at {path} is in use by another process or store "
                    f"object ({exc}); run one processor per state directory and instance id"
                ) from exc
            raise StoreCorruptedError(f"cannot open the RocksDB store at {path}: {exc}") from exc
        self._closed = False
        version = self._meta_view.get(FORMAT_VERSION)
        if version is None:
            self.write({}, {FORMAT_VERSION: STORE_FORMAT})
        elif version != STORE_FORMAT:
            self.close()
            raise StoreCorruptedError(
                f"the store at {path} has format {version!r}, this release reads {STORE_FORMAT!r}"
            )

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

    def write(
        self, records: Mapping[bytes, bytes | None], meta: Mapping[bytes, bytes | None]
    ) -> None:
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
        meta_handle = self._meta
        for key, value in meta.items():
            if value is None:
                batch.delete(key, meta_handle)
            else:
                batch.put(key, value, meta_handle)
        try:
            self._db.write(batch)
        except Exception as exc:
            raise StoreError(f"cannot write to the RocksDB store at {self.path}: {exc}") from exc

    def clear(self, meta: Mapping[bytes, bytes | None]) -> None:
        keys: list[bytes] = list(self._records_view.keys())  # type: ignore[arg-type]
        self.write(dict.fromkeys(keys), meta)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        # Every column-family view holds the database open; close them all, then drop them.
        self._records_view.close()
        self._meta_view.close()
        self._db.close()
        del self._records_view, self._meta_view, self._records, self._meta, self._db


def quarantine(path: Path) -> Path | None:
    """Move a damaged store directory aside (kept for inspection); return where it went."""
    if not path.exists():
        return None
    target = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    shutil.move(str(path), str(target))
    log.warning("moved the damaged store %s aside to %s; rebuilding it", path, target)
    return target
