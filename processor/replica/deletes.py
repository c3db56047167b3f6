"""What recent delete commands removed: a sow_delete's answer counts the records its
commands deleted, as the replica applied them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from processor.changelog import POSITION_HEADER, REASON_HEADER, parse_position
from processor.changelog.events import ChangeReason
from processor.log import LogPosition, Record

#: How many recent delete commands are remembered.
RECENT_DELETES = 100_000


class RecentDeletes:
    """Delete command position -> records it removed, for the latest commands. Used under
    the replica's lock."""

    def __init__(self, most: int = RECENT_DELETES) -> None:
        self._most = most
        self._counts: OrderedDict[LogPosition, int] = OrderedDict()

    def note(self, tombstone: Record) -> ChangeReason:
        """Count a changelog tombstone against the command that caused it (its
        ``sow.position`` header); return why the record went (its ``sow.reason``)."""
        reason = None
        for name, raw in tombstone.headers() or ():
            if name == REASON_HEADER:
                reason = raw
            elif name == POSITION_HEADER:
                position = parse_position(raw)
                counts = self._counts
                counts[position] = counts.get(position, 0) + 1
                if len(counts) > self._most:
                    counts.popitem(last=False)
        return ChangeReason.of_tombstone(reason)

    def count(self, positions: Iterable[LogPosition]) -> int:
        """How many records the delete commands at ``positions`` removed."""
        return sum(self._counts.get(position, 0) for position in positions)
