"""What every HTTP call shares: its context (the same authentication as gRPC's), the
failure-to-status table, and the JSON form of the values a request returns.

An HTTP call is authenticated by the very callable that authenticates gRPC calls
(``server/auth.py``): :class:`HttpCall` gives it what it reads of a gRPC call (the
``authorization`` header as metadata, the peer, the deadline), so a console behind
gRPC's logon takes the same Basic or Bearer credentials and gets the same
:class:`~processor.security.RequestContext` (principal, rights, deadline).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from processor import errors
from processor.changelog import Envelope
from processor.log import LogPosition
from processor.requests.changes import Change
from processor.requests.events import CLIENT_NAME_HEADER
from processor.requests.queries import Row, stats_fields
from processor.security import OPEN, RequestContext

#: A failure's kind (``SowError.failure``) -> its HTTP status.
HTTP_STATUS = {
    "unauthenticated": 401,
    "not-entitled": 403,
    "not-found": 404,
    "exhausted": 429,
    "unsupported": 501,
    "invalid": 400,
    "timeout": 504,
    "precondition": 412,
    "unavailable": 503,
    "internal": 500,
}


class HttpCall:
    """An HTTP request as the gRPC authentication reads a call (see the module doc)."""

    def __init__(self, headers: Any, peer: str, timeout_s: float | None) -> None:
        self._metadata = [
            (name.lower(), value)
            for name, value in headers.items()
            if name.lower() in ("authorization", CLIENT_NAME_HEADER)
        ]
        self._peer = peer
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # no client certificate over HTTP

    def abort(self, code: Any, details: str) -> None:
        """The authentication refused the call (it aborts gRPC calls with these)."""
        if getattr(code, "name", "") == "PERMISSION_DENIED":
            raise errors.NotEntitledError(details)
        raise errors.AuthenticationError(details)


#: Builds a call's RequestContext (gRPC's; a refusal raises through HttpCall.abort).
ContextOf = Callable[[HttpCall], RequestContext]


def open_context(call: HttpCall) -> RequestContext:
    """The call's context when security is off: anonymous, every right, its deadline."""
    remaining = call.time_remaining()
    if remaining is None:
        return OPEN
    return RequestContext(deadline=time.monotonic() + remaining)


def status_of(error: errors.SowError) -> int:
    return HTTP_STATUS.get(error.failure, 500)


def position_text(position: LogPosition) -> str:
    topic, partition, offset = position
    return f"{topic}/{partition}/{offset}"


def data_text(data: bytes) -> str:
    """A record's data as JSON text carries it: UTF-8 text as it is (JSON, XML, FIX in
    text form), anything else in Base64 (``b64:`` first)."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "b64:" + base64.b64encode(data).decode()


def record(envelope: Envelope) -> dict[str, Any]:
    """A SOW record in JSON form (the fields of gRPC's SowRecord)."""
    out: dict[str, Any] = {
        "sow_key": envelope.sow_key,
        "data": data_text(envelope.data),
        "topic": envelope.topic,
        "message_type": envelope.message_type,
        "position": f"{envelope.log_topic}/{envelope.log_partition}/{envelope.log_offset}",
        "publish_time_ms": envelope.publish_time_ms,
        "apply_time_ms": envelope.apply_time_ms,
    }
    if envelope.expiration_ms:
        out["expiration_ms"] = envelope.expiration_ms
    if envelope.correlation_id:
        out["correlation_id"] = envelope.correlation_id
    return out


def row(answered: Row) -> dict[str, Any]:
    """A query answer's row: its record, with a queue message's state."""
    out = record(answered.envelope)
    if answered.queue:
        state = answered.state
        out["queue_state"] = (
            {}
            if state is None
            else {
                "leased": state.holder is not None,
                "leased_to": state.holder or "",
                "lease_deadline_ms": state.deadline_ms or 0,
                "deliveries": state.deliveries,
                "cancels": state.cancels,
            }
        )
    return out


def change(out: Change) -> dict[str, Any]:
    """A subscription's change in JSON form (the fields of gRPC's Change)."""
    message: dict[str, Any] = {
        "kind": out.kind.value,
        "topic": out.topic,
        "sow_key": out.sow_key,
        "record": record(out.record),
        "changelog_position": position_text(out.position),
    }
    if out.oof_reason is not None:
        message["oof_reason"] = out.oof_reason
    if out.current is not None:
        message["current"] = record(out.current)
    if out.delta:
        message["delta"] = True
    return message


#: A query's counts as a group end's fields.
stats = stats_fields
