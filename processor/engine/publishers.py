"""Duplicate detection state: the highest sequence applied per publisher on one partition.

Clients name a new publisher per process, so the set of publishers only grows. It is kept
so that no transaction pays for all of it:

* the store keeps one meta entry per publisher (``publisher:<name>`` -> decimal sequence),
  written in the same atomic batch as the data of the transaction that changed it;
* the changelog gets one compacted control record per publisher whose sequence a
  transaction changed (:data:`processor.changelog.PUBLISHER_PREFIX`), so a rebuild from
  the changelog restores every publisher;
* memory holds at most ``limit`` publishers, least recently used evicted. An evicted
  publisher is looked up in the store again when it next publishes (one point read), so
  eviction costs a read, never a duplicate.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator

from processor.changelog import PUBLISHER_PREFIX
from processor.errors import ValueFormatError
from processor.state import Store

#: Store meta key prefix: ``publisher:<UTF-8 name>`` -> highest applied sequence (decimal).
PUBLISHER_META_PREFIX = b"publisher:"
#: Meta key of earlier releases: the whole map as JSON (migrated on open).
LEGACY_PUBLISHERS_META = b"publishers"
#: Publishers kept in memory per partition.
PUBLISHER_LIMIT = 100_000


def meta_key(publisher: str) -> bytes:
    """The store meta key of a publisher."""
    return PUBLISHER_META_PREFIX + publisher.encode()


def meta_key_of_control(control_key: bytes) -> bytes:
    """The store meta key for a changelog publisher control record's key."""
    return PUBLISHER_META_PREFIX + control_key[len(PUBLISHER_PREFIX) :]


def publisher_meta(changed: dict[str, int]) -> dict[bytes, bytes]:
    """Publisher sequences as store meta entries."""
    return {meta_key(name): str(sequence).encode() for name, sequence in changed.items()}


def control_records(store: Store) -> Iterator[tuple[bytes, bytes]]:
    """The changelog control record (key, value) of every publisher the store holds
    (republishing a lost changelog)."""
    start = len(PUBLISHER_META_PREFIX)
    for key, value in store.meta_items(PUBLISHER_META_PREFIX):
        yield PUBLISHER_PREFIX + key[start:], value


class PublisherSequences:
    """The publisher -> highest applied sequence map of one partition.

    ``changed`` holds this transaction's changes (handed to its commit with :meth:`take`).
    Like the rest of a PartitionState the object is only valid while its transaction can
    still commit; after a failed one the processor builds a new one from the store. Not
    thread-safe (the processor loop owns it).
    """

    __slots__ = ("_inflight", "_limit", "_recent", "_store", "changed", "store_reads")

    def __init__(self, store: Store, limit: int = PUBLISHER_LIMIT) -> None:
        if limit < 1:
            raise ValueFormatError(f"the publisher limit must be at least 1, not {limit}")
        self._store = store
        self._limit = limit
        self._recent: OrderedDict[str, int] = OrderedDict()
        self.changed: dict[str, int] = {}
        #: The changes of the transaction whose commit is in flight (see :meth:`take`).
        self._inflight: dict[str, int] = {}
        #: Lookups that missed memory and read the store (monitoring, tests).
        self.store_reads = 0

    def __len__(self) -> int:
        """Publishers held in memory."""
        return len(self._recent)

    def load(self) -> int:
        """Fill memory from the store (up to the limit); return how many were loaded.

        A store of an earlier release holds the whole map under one JSON meta key; it is
        converted to one entry per publisher here, and the publishers are marked changed
        so that the next commit writes their control records to the changelog too.
        """
        legacy = self._store.get_meta(LEGACY_PUBLISHERS_META)
        if legacy:
            old = {str(k): int(v) for k, v in json.loads(legacy).items()}
            meta: dict[bytes, bytes | None] = {
                meta_key(name): str(sequence).encode() for name, sequence in old.items()
            }
            meta[LEGACY_PUBLISHERS_META] = None
            self._store.write({}, meta)
            self.changed.update(old)
        start = len(PUBLISHER_META_PREFIX)
        for key, value in self._store.meta_items(PUBLISHER_META_PREFIX):
            if len(self._recent) >= self._limit:
                break
            self._recent[key[start:].decode()] = int(value)
        return len(self._recent)

    def highest(self, publisher: str) -> int | None:
        """The highest sequence applied for a publisher (None: never seen)."""
        recent = self._recent
        last = recent.get(publisher)
        if last is not None:
            recent.move_to_end(publisher)
            return last
        last = self.changed.get(publisher)
        if last is None:
            last = self._inflight.get(publisher)
        if last is None:
            self.store_reads += 1
            raw = self._store.get_meta(meta_key(publisher))
            if raw is None:
                return None
            last = int(raw)
        self._remember(publisher, last)
        return last

    def accept(self, publisher: str, sequence: int) -> bool:
        """Note (publisher, sequence) as applied and return True, or return False for a
        duplicate: a sequence not above the highest applied for the publisher."""
        last = self.highest(publisher)
        if last is not None and sequence <= last:
            return False
        self._remember(publisher, sequence)
        self.changed[publisher] = sequence
        return True

    def _remember(self, publisher: str, sequence: int) -> None:
        recent = self._recent
        recent[publisher] = sequence
        recent.move_to_end(publisher)
        if len(recent) > self._limit:
            recent.popitem(last=False)

    def take(self) -> dict[str, int]:
        """This transaction's changes, handed to its commit: the next transaction's start
        empty, and lookups still see these until :meth:`stored`."""
        taken, self.changed = self.changed, {}
        self._inflight = taken
        return taken

    def stored(self, taken: dict[str, int]) -> None:
        """The changes :meth:`take` gave are in the store."""
        if self._inflight is taken:
            self._inflight = {}

    def snapshot(self) -> dict[str, int]:
        """The publishers held in memory (tests, diagnostics)."""
        return dict(self._recent)
