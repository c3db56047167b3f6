"""The records between the query services and a queue's partitions.

* **Commands** (service -> processor), on the queue topic's repartition topic, one
  partition each: header :data:`COMMAND_HEADER` names the command, the value is a JSON
  object. ``subscribe`` and ``disconnect`` and ``heartbeat`` go to every partition;
  ``ack``, ``cancel`` and ``expire`` to the partition of each bookmark
  (:func:`processor.queues.definition.partition_of`); ``ack_filter`` to every partition.
* **Deliveries** (processor -> service), on the queue's deliveries topic, written in the
  transaction that decides them, key the subscription id: the leases and barrier
  messages a transaction gives one subscription are one record (header
  :data:`DELIVERY_HEADER` :data:`LEASES`, :func:`encode_leases`: each one's kind,
  bookmark, deadline, delivery count and envelope; split only past
  :data:`LEASES_RECORD_BYTES`); an :data:`ENDED` record has the header alone.

A command that cannot be read (not JSON, a field missing) is the record's failure: it is
dead-lettered with the reason and the partition goes on.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from processor.errors import MessageError
from processor.log import Headers

COMMAND_HEADER = "sow.queue-command"
DELIVERY_HEADER = "sow.queue-delivery"
BOOKMARK_HEADER = "sow.queue-bookmark"
DEADLINE_HEADER = "sow.queue-deadline"
DELIVERIES_HEADER = "sow.queue-deliveries"
#: On a leases record the processor also handed to the query service beside it before
#: its commit (at-least-once leases, issue 34): the service takes each lease once,
#: whichever copy comes first (:class:`processor.subscriptions.queues.QueueHub`).
HANDED_HEADER = "sow.queue-handed"
#: A delivery kind besides "lease" and "barrier": the partition disconnected the
#: subscription (its service was taken for dead); its service may subscribe it again.
ENDED = "ended"
#: The delivery kind of a record holding leases and barrier messages
#: (:func:`encode_leases`).
LEASES = "leases"
#: A leases record grows past this many bytes only with a single lease.
LEASES_RECORD_BYTES = 512 * 1024


#: Between a query service's instance and its incarnation in its service id.
_INCARNATION = "@"


def service_id(instance: str, started_ms: int) -> str:
    """A query service's id: its ``instance`` (the same across restarts of one query
    service, e.g. a hash of its host and state directory) and its incarnation (when this
    run started). A partition that hears a later incarnation of an instance knows the
    earlier one is gone: its subscriptions are disconnected at once (their leases
    return) instead of after the heartbeat timeout."""
    return f"{instance}{_INCARNATION}{started_ms}"


def incarnation_of(service: str) -> tuple[str, int] | None:
    """(instance, incarnation) of a service id made by :func:`service_id` (None: an id
    without one, which is never superseded)."""
    instance, sep, started = service.rpartition(_INCARNATION)
    if not sep or not instance or not started.isdigit():
        return None
    return instance, int(started)


class CommandKind(Enum):
    SUBSCRIBE = "subscribe"
    DISCONNECT = "disconnect"
    HEARTBEAT = "heartbeat"
    ACK = "ack"
    ACK_FILTER = "ack_filter"
    CANCEL = "cancel"
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True)
class Command:
    """One queue command. ``subscription``: who asks (None: a client without one);
    ``service``: the query service that holds the subscription (its heartbeats keep
    it)."""

    kind: CommandKind
    subscription: str | None = None
    service: str = ""
    bookmarks: tuple[str, ...] = ()
    filter: str = ""
    max_backlog: int | None = None

    def encode(self) -> tuple[bytes, Headers]:
        """The record's value and headers."""
        body: dict[str, Any] = {"sub": self.subscription, "service": self.service}
        if self.bookmarks:
            body["bookmarks"] = list(self.bookmarks)
        if self.filter:
            body["filter"] = self.filter
        if self.max_backlog is not None:
            body["backlog"] = self.max_backlog
        value = json.dumps(body, separators=(",", ":")).encode()
        return value, [(COMMAND_HEADER, self.kind.value.encode())]


def decode_command(value: bytes | None, headers: Headers | None) -> Command:
    """A command record's command (MessageError: not one)."""
    raw = next((v for name, v in headers or () if name == COMMAND_HEADER), None)
    try:
        kind = CommandKind((raw or b"").decode())
    except (ValueError, UnicodeDecodeError):
        raise MessageError(
            f"a record of a queue's command topic needs header {COMMAND_HEADER} naming one "
            f"of {', '.join(k.value for k in CommandKind)}: only kafka-sow's query service "
            "writes this topic"
        ) from None
    try:
        body = json.loads(value or b"")
        if not isinstance(body, dict):
            raise ValueError("not an object")
        sub = body.get("sub")
        backlog = body.get("backlog")
        return Command(
            kind,
            subscription=None if sub is None else str(sub),
            service=str(body.get("service") or ""),
            bookmarks=tuple(str(b) for b in body.get("bookmarks", ())),
            filter=str(body.get("filter") or ""),
            max_backlog=None if backlog is None else int(backlog),
        )
    except (ValueError, TypeError) as exc:
        raise MessageError(
            f"queue command {kind.value} is not a valid JSON command: {exc}"
        ) from None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A lease or barrier message as the service reads it."""

    subscription: str
    kind: str  # "lease", "barrier" or ENDED
    bookmark: str
    envelope: bytes
    deadline_ms: int | None
    deliveries: int


def delivery_headers(
    kind: str, bookmark: bytes, deadline_ms: int | None, deliveries: int
) -> Headers:
    return [
        (DELIVERY_HEADER, kind.encode()),
        (BOOKMARK_HEADER, bookmark),
        (DEADLINE_HEADER, b"" if deadline_ms is None else str(deadline_ms).encode()),
        (DELIVERIES_HEADER, str(deliveries).encode()),
    ]


def decode_delivery(key: bytes | None, value: bytes | None, headers: Headers | None) -> Delivery:
    """A deliveries record (ValueError when it is not one)."""
    found = dict(headers or ())
    deadline = found.get(DEADLINE_HEADER) or b""
    return Delivery(
        subscription=(key or b"").decode(),
        kind=found[DELIVERY_HEADER].decode(),
        bookmark=found[BOOKMARK_HEADER].decode(),
        envelope=value or b"",
        deadline_ms=int(deadline) if deadline else None,
        deliveries=int(found.get(DELIVERIES_HEADER) or b"1"),
    )


#: One lease in a leases record: barrier (0/1), bookmark length, deadline (-1: none),
#: delivery count, envelope length; then the bookmark and the envelope.
_LEASE = struct.Struct(">BHqiI")
_LEASES_HEADERS: Headers = [(DELIVERY_HEADER, LEASES.encode())]


def encode_leases(
    leases: Iterable[tuple[bool, bytes, int | None, int, bytes]], handed: bool = False
) -> list[tuple[bytes, Headers]]:
    """The records (value, headers) of one subscription's leases, each lease ``(barrier,
    bookmark, deadline_ms, deliveries, envelope)``: one record, or more when they pass
    :data:`LEASES_RECORD_BYTES` together (``handed``: marked :data:`HANDED_HEADER`)."""
    headers = [*_LEASES_HEADERS, (HANDED_HEADER, b"1")] if handed else _LEASES_HEADERS
    records: list[tuple[bytes, Headers]] = []
    parts: list[bytes] = []
    size = 0
    for barrier, bookmark, deadline_ms, deliveries, envelope in leases:
        deadline = -1 if deadline_ms is None else deadline_ms
        head = _LEASE.pack(barrier, len(bookmark), deadline, deliveries, len(envelope))
        grown = len(head) + len(bookmark) + len(envelope)
        if parts and size + grown > LEASES_RECORD_BYTES:
            records.append((b"".join(parts), list(headers)))
            parts, size = [], 0
        parts += (head, bookmark, envelope)
        size += grown
    if parts:
        records.append((b"".join(parts), list(headers)))
    return records


def handed_over(headers: Headers | None) -> bool:
    """Whether a deliveries record was also handed over before its commit."""
    return any(name == HANDED_HEADER for name, _ in headers or ())


def decode_deliveries(
    key: bytes | None, value: bytes | None, headers: Headers | None
) -> list[Delivery]:
    """The deliveries of a deliveries record: the leases of a leases record, or the one
    delivery of another (KeyError, ValueError: it is not one)."""
    kind = next((v for name, v in headers or () if name == DELIVERY_HEADER), None)
    if kind != _LEASES_HEADERS[0][1]:
        return [decode_delivery(key, value, headers)]
    subscription = (key or b"").decode()
    raw = value or b""
    found: list[Delivery] = []
    at, end, head = 0, len(raw), _LEASE.size
    try:
        while at < end:
            barrier, size, deadline, deliveries, length = _LEASE.unpack_from(raw, at)
            at += head
            bookmark = raw[at : at + size].decode()
            envelope = raw[at + size : at + size + length]
            at += size + length
            found.append(
                Delivery(
                    subscription,
                    "barrier" if barrier else "lease",
                    bookmark,
                    envelope,
                    None if deadline < 0 else deadline,
                    deliveries,
                )
            )
    except struct.error as exc:
        raise ValueError(f"a queue's leases record is cut short: {exc}") from None
    if at != end:
        raise ValueError("a queue's leases record is cut short")
    return found
