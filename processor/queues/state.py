"""A queue message's state as a queue partition keeps it (its counts and lease), in the
partition's state under :data:`MESSAGE_STATE` + bookmark: written by
:mod:`processor.queues.partition`, read back by it after a restart and by the query
service's replica (a ``sow`` query over a queue shows each message's state)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from processor.changelog import STATE_PREFIX

#: The state key prefix (under ``STATE_PREFIX``) of a message's state.
MESSAGE_STATE = b"qm"
#: The changelog key prefix of a message's state record.
MESSAGE_STATE_KEY = STATE_PREFIX + MESSAGE_STATE

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
