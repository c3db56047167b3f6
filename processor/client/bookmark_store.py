"""Client-side bookmark stores: where each subscription of a client got to.

A subscription's *bookmark* is a position vector: for every changelog partition it reads,
the offset of the last message the application is done with (it *discarded* it). As a
string it is ``topic/partition/offset`` entries joined by commas, which is the bookmark
form a subscribe request takes (``SubscribeRequest.bookmark``): the service replays
after each listed offset, then goes live, with no gap and no duplicate.

A store keeps one bookmark per subscription id. :class:`MemoryBookmarkStore` keeps them
for the life of the process (failover between query services); :class:`SowBookmarkStore`
keeps them in a SOW topic of the product itself (seed 004), so a client process that is
killed and started again resumes after its last discarded message.

Contract of :meth:`BookmarkStore.discard`: messages are discarded in the order they were
received (per partition, offsets only move forward); when it returns, the bookmark is
durable as far as the store promises (the SOW store: written to the transaction log).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from processor.errors import InvalidRequestError

#: The bookmark of a subscription that has discarded nothing: replay everything the log
#: still holds (AMPS's EPOCH).
EPOCH = "0"

#: (changelog topic, partition) -> offset of the last discarded message.
Vector = dict[tuple[str, int], int]


def format_vector(vector: Mapping[tuple[str, int], int]) -> str:
    """``topic/partition/offset,...`` in a stable order ("" for an empty vector)."""
    return ",".join(
        f"{topic}/{partition}/{offset}" for (topic, partition), offset in sorted(vector.items())
    )


def parse_vector(text: str) -> Vector:
    """The vector of a ``topic/partition/offset,...`` string; a clear error otherwise."""
    vector: Vector = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        try:
            topic, partition, offset = entry.rsplit("/", 2)
            key, value = (topic, int(partition)), int(offset)
        except ValueError:
            raise InvalidRequestError(
                f"bookmark entry {entry!r} is not TOPIC/PARTITION/OFFSET (a message's "
                "changelog_position, as `sow subscribe` prints it)"
            ) from None
        if not topic or value < -1:
            raise InvalidRequestError(f"bookmark entry {entry!r} has no topic or a negative offset")
        vector[key] = max(value, vector.get(key, -1))
    return vector


class BookmarkStore(Protocol):
    """Where a client keeps its subscriptions' bookmarks (see the module doc)."""

    def most_recent(self, sub_id: str) -> str:
        """The bookmark to (re)subscribe ``sub_id`` with: its vector, or EPOCH if it has
        none yet."""

    def advance(self, sub_id: str, positions: Iterable[tuple[str, int, int]]) -> None:
        """Record where a subscription starts (a ``registered``, ``group_end`` or
        ``completed`` vector of *next* offsets) for partitions it has no bookmark for yet,
        so a resubscription does not replay what came before it."""

    def discard(self, sub_id: str, topic: str, partition: int, offset: int) -> None:
        """The application is done with the message at this changelog position."""

    def forget(self, sub_id: str) -> None:
        """Start ``sub_id`` over: a subscription made with an explicit bookmark replaces
        whatever the store had for it (a stale vector must not skip what it asks for)."""


class MemoryBookmarkStore:
    """Bookmarks kept in this process: enough to fail over between query services."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vectors: dict[str, Vector] = {}

    def most_recent(self, sub_id: str) -> str:
        with self._lock:
            return format_vector(self._vectors.get(sub_id, {})) or EPOCH

    def advance(self, sub_id: str, positions: Iterable[tuple[str, int, int]]) -> None:
        with self._lock:
            if _fill(self._vectors.setdefault(sub_id, {}), positions):
                self._saved(sub_id, dict(self._vectors[sub_id]))

    def discard(self, sub_id: str, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            vector = self._vectors.setdefault(sub_id, {})
            if offset <= vector.get((topic, partition), -1):
                return  # already discarded (a replayed message the store had)
            vector[(topic, partition)] = offset
            self._saved(sub_id, dict(vector))

    def forget(self, sub_id: str) -> None:
        with self._lock:
            if self._vectors.pop(sub_id, None):
                self._saved(sub_id, {})

    def _saved(self, sub_id: str, vector: Vector) -> None:
        """Called (under the lock) when a subscription's vector changed."""


class SowBookmarkStore(MemoryBookmarkStore):
    """Bookmarks kept in a SOW topic (seed 004's store): one record per client name and
    sub_id, ``{"clientName": ..., "subId": ..., "bookmark": "topic/partition/offset,..."}``.

    The topic must be a JSON SOW topic keyed on ``/clientName`` and ``/subId`` (see
    docs/client.md). ``client`` is any client of the product (it need not reach the
    query service the subscriptions use); every discard is one publish, acknowledged once
    it is in the transaction log, so the store costs a round trip per message. Loading
    reads the topic after the query service has caught up; a discard whose publish the
    processor had not applied yet when the store is loaded again is not seen (the
    subscription then gets that message once more).
    """

    def __init__(self, client: Any, topic: str, client_name: str) -> None:
        super().__init__()
        self._client = client
        self._topic = topic
        self._client_name = client_name
        records, _, _ = client.query(
            topic,
            filter=f"/clientName = {_quoted(client_name)}",
            text_form=True,
            wait_for_catch_up=True,
        )
        for record in records:
            document = json.loads(record.data)
            if isinstance(document.get("subId"), str) and isinstance(document.get("bookmark"), str):
                self._vectors[document["subId"]] = parse_vector(document["bookmark"])

    def _saved(self, sub_id: str, vector: Vector) -> None:
        document = {
            "clientName": self._client_name,
            "subId": sub_id,
            "bookmark": format_vector(vector),
        }
        self._client.publish(self._topic, json.dumps(document).encode(), text_form=True)


def _fill(vector: Vector, positions: Iterable[tuple[str, int, int]]) -> bool:
    changed = False
    for topic, partition, next_offset in positions:
        if (topic, partition) not in vector and next_offset > 0:
            vector[(topic, partition)] = next_offset - 1
            changed = True
    return changed


def _quoted(text: str) -> str:
    """An AMPS string literal (backslash and quote escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
