"""A queue message's state as a queue partition keeps it (its counts and lease).

The states are kept in batches, not one record per message: each transaction of a queue
partition that leases or returns messages writes one state record (:data:`STATES` + its
batch number, :func:`batch_key`) holding the state of each message it changed
(:func:`encode_states`). A message's state is the one in the latest batch that holds it;
a batch whose messages all moved on to later batches or left the queue is deleted.
Written by :mod:`processor.queues.partition`, read back by it after a restart and by the
query service's replica (a ``sow`` query over a queue shows each message's state).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from processor.changelog import STATE_PREFIX

_COUNTS = struct.Struct(">iiq")  # deliveries, cancels, lease deadline (-1: none)


@dataclass(frozen=True, slots=True)
class MessageState:
    """How often a message was leased and cancelled, and who holds it until when."""

    deliveries: int = 0
    cancels: int = 0
    holder: str | None = None
    deadline_ms: int | None = None

    def encode(self) -> bytes:
        deadline = -1 if self.deadline_ms is None else self.deadline_ms
        holder = (self.holder or "").encode()
        return _COUNTS.pack(self.deliveries, self.cancels, deadline) + holder

    @classmethod
    def decode(cls, raw: bytes) -> MessageState:
        deliveries, cancels, deadline = _COUNTS.unpack_from(raw)
        holder = raw[_COUNTS.size :].decode()
        return cls(deliveries, cancels, holder or None, None if deadline < 0 else deadline)


#: The state key prefix (under ``STATE_PREFIX``) of a batch of message states: one record
#: per transaction holds the states of every message it leased or returned (followed by
#: the batch's number, :func:`batch_key`).
STATES = b"qb"
#: The changelog key prefix of a batch of message states.
STATES_KEY = STATE_PREFIX + STATES

_ENTRY = struct.Struct(">HH")  # bookmark length, encoded state length
_NUMBER = struct.Struct(">Q")


def batch_key(number: int) -> bytes:
    """The state key (under ``STATE_PREFIX``) of the states batch ``number``: the bytes
    of later batches sort after those of earlier ones."""
    return STATES + _NUMBER.pack(number)


def batch_number(key: bytes) -> int:
    """The number of a states batch from its state key, or from its changelog key."""
    return int(_NUMBER.unpack_from(key, len(key) - _NUMBER.size)[0])


def encode_states(states: dict[bytes, MessageState]) -> bytes:
    """A batch of message states, by bookmark, as one record's value."""
    parts: list[bytes] = []
    for bookmark, state in states.items():
        encoded = state.encode()
        parts += (_ENTRY.pack(len(bookmark), len(encoded)), bookmark, encoded)
    return b"".join(parts)


def decode_states(raw: bytes) -> list[tuple[bytes, bytes]]:
    """A batch's (bookmark, encoded state) pairs, in the order written (ValueError: not a
    batch of states)."""
    found: list[tuple[bytes, bytes]] = []
    at, end, head = 0, len(raw), _ENTRY.size
    try:
        while at < end:
            size, length = _ENTRY.unpack_from(raw, at)
            at += head
            found.append((raw[at : at + size], raw[at + size : at + size + length]))
            at += size + length
    except struct.error as exc:
        raise ValueError(f"a queue's states record is cut short: {exc}") from None
    if at != end:
        raise ValueError("a queue's states record is cut short")
    return found
