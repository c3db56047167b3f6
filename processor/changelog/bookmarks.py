"""Bookmarks: where a replay starts (and, for a range, ends), and what a historical query
reads as of (spec 3.13). Parsing only; :mod:`processor.replica.replay_plan` turns a bookmark
into offsets of the changelog partitions.

The string forms a subscriber (or a historical ``sow``) sends:

* ``""`` or ``"0|1|"``: NOW, no replay (the live stream only).
* ``"0"``: EPOCH, replay everything the changelogs still hold, then go live.
* ``"topic/partition/offset,topic/partition/offset,..."``: a position vector naming the
  LAST change the subscriber received per changelog partition (each change carries its
  ``changelog_position``); the replay starts right after each. A changelog partition the
  vector does not list is replayed from its earliest retained offset (the subscriber
  received nothing from it).
* ``YYYYmmddTHHMMSS[.ffffff][Z]`` (UTC): the changes written to the changelogs after
  that time.
* A range ``B:E`` between ``[`` or ``(`` and ``)`` or ``]``: ``[`` starts at B inclusive,
  ``(`` right after it, ``)`` ends before E, ``]`` includes E. B and E are timestamps or
  position vectors (B may be ``0``, epoch). A range replay ends with ``completed``.
* ``recent`` is the client library's constant for its own stored bookmark: it is never
  valid on the wire, and is refused with a message saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from processor.errors import InvalidRequestError, ValueFormatError
from processor.topology.quantities import parse_timestamp

#: (changelog topic, partition) -> offset.
Vector = Mapping[tuple[str, int], int]

_TIMESTAMP = re.compile(r"^\d{8}T\d{6}(\.\d{1,6})?Z?$")
_HELP = (
    "use '0' (epoch), '' or '0|1|' (now), a position vector "
    "'topic/partition/offset,...' of the last changes received, a UTC timestamp "
    "YYYYmmddTHHMMSS[Z], or a range such as '[20260101T000000:20260102T000000)'"
)


@dataclass(frozen=True, slots=True)
class Point:
    """One end of a bookmark: a time (ms since the epoch), a position vector (the last
    change included per partition), or epoch (both None)."""

    timestamp_ms: int | None = None
    vector: Vector | None = None

    @property
    def epoch(self) -> bool:
        return self.timestamp_ms is None and self.vector is None


EPOCH_POINT = Point()


@dataclass(frozen=True, slots=True)
class Bookmark:
    """A parsed bookmark: ``start`` (None: now, no replay), whether the start itself is
    included (``[``; a plain timestamp or vector excludes it), and for a range its
    ``end`` and whether the end is included."""

    text: str
    start: Point | None
    start_inclusive: bool = False
    end: Point | None = None
    end_inclusive: bool = False

    @property
    def now(self) -> bool:
        return self.start is None

    @property
    def is_range(self) -> bool:
        return self.end is not None


def parse_bookmark(text: str) -> Bookmark:
    """Parse a bookmark string (see the module doc); InvalidRequestError names what is
    wrong and the accepted forms."""
    stripped = text.strip()
    if stripped in ("", "0|1|"):
        return Bookmark(stripped, None)
    if stripped.lower() in ("recent", "most_recent"):
        raise InvalidRequestError(
            f"bookmark {stripped!r} is a client-library constant (the client's own last "
            "discarded bookmark) and is never sent to the server; send the stored bookmark "
            "itself"
        )
    if stripped[0] in "[(" and stripped[-1] in ")]":
        inner = stripped[1:-1]
        if inner.count(":") != 1:
            raise InvalidRequestError(
                f"bookmark range {stripped!r} needs exactly one ':' between its start and "
                f"end; {_HELP}"
            )
        begin, finish = inner.split(":")
        start = _point(begin, stripped, allow_epoch=True)
        end = _point(finish, stripped, allow_epoch=False)
        return Bookmark(stripped, start, stripped[0] == "[", end, stripped[-1] == "]")
    return Bookmark(stripped, _point(stripped, stripped, allow_epoch=True))


def _point(text: str, whole: str, *, allow_epoch: bool) -> Point:
    text = text.strip()
    if text == "0":
        if allow_epoch:
            return EPOCH_POINT
        raise InvalidRequestError(f"bookmark {whole!r}: a range cannot end at epoch ('0')")
    if not text:
        raise InvalidRequestError(f"bookmark {whole!r} has an empty part; {_HELP}")
    if _TIMESTAMP.match(text):
        try:
            moment = parse_timestamp(text)
        except ValueFormatError as exc:
            raise InvalidRequestError(f"bookmark {whole!r}: {exc}") from None
        return Point(timestamp_ms=int(moment.timestamp() * 1000))
    return Point(vector=parse_vector(text, whole))


def parse_vector(text: str, whole: str | None = None) -> Vector:
    """A position vector ``topic/partition/offset,...``; a partition given twice keeps
    its highest offset."""
    where = whole if whole is not None else text
    vector: dict[tuple[str, int], int] = {}
    for item in text.split(","):
        parts = item.strip().rsplit("/", 2)
        if len(parts) != 3 or not parts[0]:
            raise InvalidRequestError(
                f"bookmark {where!r}: {item.strip()!r} is not a position "
                f"'topic/partition/offset'; {_HELP}"
            )
        topic, partition_text, offset_text = parts
        try:
            partition, offset = int(partition_text), int(offset_text)
        except ValueError:
            partition = offset = -1
        if partition < 0 or offset < 0:
            raise InvalidRequestError(
                f"bookmark {where!r}: in {item.strip()!r} the partition and the offset must "
                "be whole numbers from 0"
            )
        key = (topic, partition)
        vector[key] = max(offset, vector.get(key, -1))
    return MappingProxyType(vector)


def format_vector(vector: Vector) -> str:
    """The string form of a position vector (the inverse of :func:`parse_vector`)."""
    return ",".join(f"{t}/{p}/{o}" for (t, p), o in sorted(vector.items()))
