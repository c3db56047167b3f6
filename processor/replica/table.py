"""One SOW topic in the read replica: its records and the indexes queries use.

Records are kept as changelog envelopes (bytes) by SowKey, in the order of their last
update: an update moves a record to the end, so iteration order is processing order
(aggregated queries take non-aggregated fields from the last record processed).

Indexes (AMPS user guide, "SOW Indexing"):

* **Memo indexes** hold one field's value for every record, in record order, so a
  filter, OrderBy or aggregation reads values without decoding messages. Created on
  first use of a field, pre-created by the topic's ``Index`` entries, and kept current by
  every put and delete from then on.
* **Hash indexes** (the topic's ``HashIndex`` entries) map their fields' values to
  SowKeys, filed under a text that is equal for values ``=`` calls equal (see
  :func:`index_text`); they answer exact-match and IN filters without a scan.
* The **key index** AMPS builds over the Key fields needs no storage here: a generated
  SowKey *is* the checksum of the Key values' text, so the planner computes SowKeys.

Not thread-safe: the replica's lock guards every call.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from processor import changelog
from processor.changelog.events import ChangeEvent, ChangeReason
from processor.errors import EnvelopeError, MessageError
from processor.expr import FieldInput, MessageContext, field_getter
from processor.expr.ast import Step, Value
from processor.expr.values import to_number
from processor.keys import parse_path, partition_for
from processor.log import LogPosition
from processor.messages import Codec
from processor.messages.registry import decode_waiting
from processor.topology.model import SowTopic

log = logging.getLogger(__name__)

#: Memo index builds over more records than this report progress.
PROGRESS_EVERY = 200_000


class MemoIndex:
    """One field's value for every record (None for NULL), in the table's record order,
    so a scan can read it alongside the records without looking keys up."""

    __slots__ = ("get", "path", "values")

    def __init__(self, path: str, steps: tuple[Step, ...]) -> None:
        self.path = path
        self.get: Callable[[Any], Value] = field_getter(steps)
        self.values: dict[bytes, Value] = {}

    def put(self, sow_key: bytes, message: Any) -> None:
        """Set a record's value and move it to the end, as the table moves the record."""
        values = self.values
        values.pop(sow_key, None)
        values[sow_key] = self.get(message)


def index_text(value: Value) -> str | None:
    """The text a hash index files a scalar under: equal for any two values the
    expression language's ``=`` calls equal (``2``, ``2.0``, ``"2"``, ``"02"`` and TRUE
    vs ``1``), None for values that equal nothing (NULL, NaN, objects)."""
    cls = value.__class__
    if cls is str:
        number = to_number(value)
        return value if number is None else index_text(number)
    if cls is int:
        return str(value)
    if cls is bool:
        return "1" if value else "0"
    if cls is float:
        if value != value:  # noqa: PLR0124 - NaN equals nothing
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def index_texts(value: Value) -> list[str]:
    """The texts of a value: one per distinct element for an array (``=`` on an array is
    TRUE when any element is equal)."""
    if value.__class__ is list:
        texts = (index_text(element) for element in value)
        return list(dict.fromkeys(t for t in texts if t is not None))
    text = index_text(value)
    return [] if text is None else [text]


class HashIndex:
    """A configured hash index: the texts of its fields' values -> SowKeys.

    A record whose array fields give more than ``MAX_ENTRIES`` combinations is not filed
    under them but returned by every lookup (the filter then decides)."""

    __slots__ = ("always", "buckets", "entries", "getters", "paths")

    MAX_ENTRIES = 1024

    def __init__(self, paths: tuple[str, ...], steps: tuple[tuple[Step, ...], ...]) -> None:
        self.paths = paths
        self.getters = tuple(field_getter(s) for s in steps)
        self.buckets: dict[tuple[str, ...], set[bytes]] = {}
        self.entries: dict[bytes, list[tuple[str, ...]]] = {}
        self.always: set[bytes] = set()

    @property
    def name(self) -> str:
        return "hash-index(" + ", ".join(self.paths) + ")"

    def put(self, sow_key: bytes, message: Any) -> None:
        self.remove(sow_key)
        texts = [index_texts(get(message)) for get in self.getters]
        combinations = 1
        for field_texts in texts:
            combinations *= len(field_texts)
        if combinations == 0:
            return  # a NULL field can never be equal to a value
        if combinations > self.MAX_ENTRIES:
            self.always.add(sow_key)
            return
        entries = list(itertools.product(*texts))
        self.entries[sow_key] = entries
        for entry in entries:
            self.buckets.setdefault(entry, set()).add(sow_key)

    def remove(self, sow_key: bytes) -> None:
        self.always.discard(sow_key)
        for entry in self.entries.pop(sow_key, ()):
            bucket = self.buckets[entry]
            bucket.discard(sow_key)
            if not bucket:
                del self.buckets[entry]

    def lookup(self, entries: Iterable[tuple[str, ...]]) -> list[bytes]:
        """SowKeys of records filed under any of ``entries`` (or under none at all)."""
        found: set[bytes] = set(self.always)
        for entry in entries:
            found.update(self.buckets.get(entry, ()))
        return list(found)


class SowTable:
    """The records and indexes of one SOW topic (every partition of it)."""

    def __init__(self, topic: SowTopic, codec: Codec) -> None:
        self.topic = topic
        self.codec = codec
        self.envelopes: dict[bytes, bytes] = {}
        #: Memo indexes by the steps of their field (``/a`` and ``[/a]`` share one).
        self.memo: dict[tuple[Step, ...], MemoIndex] = {}
        self.hash_indexes = tuple(
            HashIndex(spec.keys, tuple(parse_path(p) for p in spec.keys))
            for spec in topic.hash_indexes
        )
        for path in topic.indexes:
            self.memo_index(parse_path(path), path)

    def __len__(self) -> int:
        return len(self.envelopes)

    def put(self, sow_key: bytes, envelope: bytes) -> None:
        """Insert or replace a record (it moves to the end of the processing order)."""
        envelopes = self.envelopes
        envelopes.pop(sow_key, None)
        envelopes[sow_key] = envelope
        if self.memo or self.hash_indexes:
            message = self._message(envelope, wait=True)
            for memo in self.memo.values():
                memo.put(sow_key, message)
            for index in self.hash_indexes:
                index.put(sow_key, message)

    def delete(self, sow_key: bytes) -> bool:
        """Remove a record; True when it existed."""
        if self.envelopes.pop(sow_key, None) is None:
            return False
        for memo in self.memo.values():
            memo.values.pop(sow_key, None)
        for index in self.hash_indexes:
            index.remove(sow_key)
        return True

    def export(self) -> dict[str, Any]:
        """The records and index contents as plain data that ``marshal`` can write, copied
        so the table can change right after (a replica snapshot; not under any lock of
        its own: the caller keeps writers out)."""
        envelopes = self.envelopes
        return {
            "keys": list(envelopes),
            "envelopes": list(envelopes.values()),
            "hash": [
                {
                    "paths": index.paths,
                    "entries": dict(index.entries),
                    "buckets": {entry: set(keys) for entry, keys in index.buckets.items()},
                    "always": set(index.always),
                }
                for index in self.hash_indexes
            ],
            "memo": [
                {"steps": steps, "path": memo.path, "values": dict(memo.values)}
                for steps, memo in self.memo.items()
            ],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replace the records and indexes by what :meth:`export` returned (the dicts are
        kept). A configured index the state lacks is built over the records."""
        envelopes = dict(zip(state["keys"], state["envelopes"], strict=True))
        self.envelopes = envelopes
        saved = {tuple(h["paths"]): h for h in state["hash"]}
        missing = []
        for index in self.hash_indexes:
            found = saved.get(index.paths)
            if found is None:
                missing.append(index)
                index.entries, index.buckets, index.always = {}, {}, set()
            else:
                index.entries, index.buckets = found["entries"], found["buckets"]
                index.always = found["always"]
        for index in missing:
            for sow_key, envelope in envelopes.items():
                index.put(sow_key, self._message(envelope))
        self.memo = {}
        for memo_state in state["memo"]:
            memo = MemoIndex(memo_state["path"], tuple(memo_state["steps"]))
            memo.values = memo_state["values"]
            self.memo[memo_state["steps"]] = memo
        for path in self.topic.indexes:
            self.memo_index(parse_path(path), path)

    def reset_partition(
        self, partition: int, position: LogPosition, events: list[ChangeEvent] | None = None
    ) -> None:
        """Drop every record of one partition (a transient topic restarting empty, a lost
        log) at the changelog ``position`` where that was seen; each removal is a DELETE
        event in ``events`` when given."""
        partitions = self.topic.partitions
        for sow_key in [k for k in self.envelopes if partition_for(k, partitions) == partition]:
            old = self.envelopes[sow_key]
            self.delete(sow_key)
            if events is not None:
                events.append(
                    ChangeEvent(self.topic.name, sow_key, old, None, position, ChangeReason.DELETE)
                )

    def memo_index(self, steps: tuple[Step, ...], path: str) -> MemoIndex:
        """The memo index of a field (``path`` is its spelling, for messages), built over
        every record on first use."""
        memo = self.memo.get(steps)
        if memo is None:
            field = FieldInput(path, steps)
            self.install_memo([field], self.envelopes, self.memo_values([field], self.envelopes))
            memo = self.memo[steps]
        return memo

    def build_memo(self, fields: Sequence[FieldInput], lock: AbstractContextManager[Any]) -> None:
        """Create the missing memo indexes for ``fields``; ``lock`` (the replica's) is
        held only to copy the record map and to install the result: the messages are
        decoded without it, so the applier and other queries go on meanwhile."""
        with lock:
            missing = [f for f in dict.fromkeys(fields) if f.steps not in self.memo]
            if not missing:
                return
            records = dict(self.envelopes)
        columns = self.memo_values(missing, records)
        with lock:
            self.install_memo(missing, records, columns)

    def memo_values(
        self, fields: Sequence[FieldInput], envelopes: Mapping[bytes, bytes]
    ) -> list[dict[bytes, Value]]:
        """The values of ``fields`` for the given records, decoding each message once.

        Reads only its arguments and the codec, so it may run without the replica's lock
        over a copy of the records (see :meth:`install_memo`); logs progress on large
        topics."""
        getters = [field_getter(f.steps) for f in fields]
        columns: list[dict[bytes, Value]] = [{} for _ in fields]
        names = ", ".join(f.path for f in fields)
        started = time.monotonic()
        total = len(envelopes)
        for done, (sow_key, envelope) in enumerate(envelopes.items(), 1):
            message = self._message(envelope)
            for column, get in zip(columns, getters, strict=True):
                column[sow_key] = get(message)
            if done % PROGRESS_EVERY == 0:
                log.info("building memo index %s on %s: %d/%d", names, self.topic.name, done, total)
        if total >= PROGRESS_EVERY:
            log.info(
                "built memo index %s on %s over %d records in %.1fs",
                names,
                self.topic.name,
                total,
                time.monotonic() - started,
            )
        return columns

    def install_memo(
        self,
        fields: Sequence[FieldInput],
        snapshot: Mapping[bytes, bytes],
        columns: Sequence[Mapping[bytes, Value]],
    ) -> None:
        """Create memo indexes for ``fields`` from values :meth:`memo_values` computed over
        ``snapshot``: records changed or added since are computed again, deleted ones
        left out, and every index gets the table's record order. Fields that have a memo
        index by now are skipped."""
        for field, computed in zip(fields, columns, strict=True):
            if field.steps in self.memo:
                continue
            memo = MemoIndex(field.path, field.steps)
            values = memo.values
            for sow_key, envelope in self.envelopes.items():
                if snapshot.get(sow_key) is envelope:
                    values[sow_key] = computed[sow_key]
                else:
                    values[sow_key] = memo.get(self._message(envelope))
            self.memo[field.steps] = memo

    def messages(self, sow_keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, Any]]:
        """(SowKey, decoded message) of every record, or of the given SowKeys that exist."""
        envelopes = self.envelopes
        keys = envelopes if sow_keys is None else sow_keys
        for sow_key in keys:
            envelope = envelopes.get(sow_key)
            if envelope is not None:
                yield sow_key, self._message(envelope)

    def context(self, sow_key: bytes) -> MessageContext:
        """The per-record facts of a record that its message does not hold."""
        return changelog.decode(self.envelopes[sow_key]).context()

    def column(self, field: FieldInput | Any, sow_keys: Iterable[bytes]) -> dict[bytes, Value]:
        """The values of one filter input for these records: a memo index for a field
        (every record, in record order), computed from the envelopes for a
        message-context input (the given records, in their order)."""
        if isinstance(field, FieldInput):
            return self.memo_index(field.steps, field.path).values
        return {k: self.context(k).value(field.name) for k in sow_keys if k in self.envelopes}

    def _message(self, envelope: bytes, wait: bool = False) -> Any:
        """The decoded message; ``wait``: through a Schema Registry's outage (the apply
        path), else a query that meets one fails UNAVAILABLE."""
        try:
            data = changelog.data_of(envelope)
            return decode_waiting(self.codec.decode, data) if wait else self.codec.decode(data)
        except (MessageError, EnvelopeError):
            # The processor only writes messages it decoded, so this is a changelog
            # written by another release or by hand; such a record has no field values.
            log.warning(
                "a %s record in the changelog does not decode; indexing it as empty",
                self.topic.name,
            )
            return None
