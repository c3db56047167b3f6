"""What a publisher sends the gateway (commands, columns) and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from processor.log import LogPosition

DEFAULT_TIMEOUT_S = 30.0
#: What a changelog envelope adds to a message besides the names and the SowKey
#: (version, partition, offset, lengths, two times, expiration; see processor.changelog).
ENVELOPE_FIXED_BYTES = 64
#: Headers are measured exactly only for messages this close to the limit.
HEADERS_ALLOWANCE = 4096
#: Longest publisher name accepted (it travels in every record's headers).
MAX_PUBLISHER_LENGTH = 256


class PublishCommand(NamedTuple):
    """One publish: the message (``text_form``: JSON, or Base64 for binary topics, to be
    encoded in the topic's type) and its options (``expiration`` in seconds).
    ``publisher`` and ``sequence`` (> 0) ask for duplicate detection; ``delta`` makes it
    a delta_publish.

    The field names are the gRPC PublishRequest's, so the gateway takes either."""

    topic: str
    data: bytes
    sow_key: str = ""
    expiration: float = 0.0
    correlation_id: str = ""
    text_form: bool = False
    publisher: str = ""
    sequence: int = 0
    delta: bool = False


class PublishColumns(NamedTuple):
    """A columnar batch: many messages to one topic with the same options (the columnar
    form of ``PublishBatch``). Message ``i`` has the sequence ``first_sequence + i`` when
    ``publisher`` is set, and the SowKey ``sow_keys[i]`` when the topic takes
    publisher-provided SowKeys (else ``sow_keys`` is empty)."""

    topic: str
    data: Sequence[bytes]
    text_form: bool = False
    publisher: str = ""
    first_sequence: int = 0
    expiration: float = 0.0
    correlation_id: str = ""
    sow_keys: Sequence[str] = ()
    delta: bool = False


class Published(NamedTuple):
    """Where a publish landed, and the SowKey it was given."""

    position: LogPosition
    sow_key: str


@dataclass(frozen=True, slots=True)
class Deleted:
    """The effect of a sow_delete: how many records it removed (-1 when not waited for)
    and where its commands landed in the log."""

    records_deleted: int
    positions: list[LogPosition]


class PublishFields(Protocol):
    """What a publish carries: a PublishCommand, or a gRPC PublishRequest as it came."""

    @property
    def topic(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def sow_key(self) -> str: ...
    @property
    def expiration(self) -> float: ...
    @property
    def correlation_id(self) -> str: ...
    @property
    def text_form(self) -> bool: ...
    @property
    def publisher(self) -> str: ...
    @property
    def sequence(self) -> int: ...
    @property
    def delta(self) -> bool: ...
