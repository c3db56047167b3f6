"""Reading a command's headers: expiration, correlation id, duplicate detection and
delta_publish.

Only records that carry headers (or whose topic has a default expiration) come here; the
hot path never parses headers of a plain publish.
"""

from __future__ import annotations

import math

from processor.changelog.commands import (
    CORRELATION_HEADER,
    DELTA_HEADER,
    DELTA_NATIVE,
    DELTA_TEXT,
    EXPIRATION_HEADER,
    PUBLISHER_HEADER,
    SEQUENCE_HEADER,
)
from processor.engine.partition import PartitionState
from processor.errors import InvalidSequenceError, MessageError
from processor.log import Headers

#: (publisher, sequence) of a command sent with duplicate detection.
Sequenced = tuple[str, int]


def expiration_seconds(raw: bytes) -> float:
    """The seconds a ``sow.expiration`` header gives (0: the message never expires);
    MessageError when it is not a finite number."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise MessageError(
            f"header {EXPIRATION_HEADER}={raw[:32]!r} is not a finite number of "
            "seconds (0 means the message never expires)"
        )
    return seconds


def publish_options(
    headers: Headers | None, state: PartitionState, now_ms: int
) -> tuple[int | None, str | None, Sequenced | None]:
    """Expiration instant, correlation id and (publisher, sequence) of a publish.

    Raises MessageError for a malformed ``sow.expiration`` and InvalidSequenceError for
    malformed duplicate-detection headers.
    """
    default_s = state.topic.expiration_s
    expiration_ms = None if not default_s else now_ms + int(default_s * 1000)
    correlation_id = None
    publisher = sequence = None
    if headers:
        for name, raw in headers:
            if name == EXPIRATION_HEADER and default_s is not None and raw:
                seconds = expiration_seconds(raw)
                expiration_ms = None if seconds == 0 else now_ms + int(seconds * 1000)
            elif name == CORRELATION_HEADER and raw is not None:
                correlation_id = raw.decode(errors="replace")
            elif name == PUBLISHER_HEADER:
                publisher = raw
            elif name == SEQUENCE_HEADER:
                sequence = raw
    if publisher is None and sequence is None:
        return expiration_ms, correlation_id, None
    return expiration_ms, correlation_id, _sequenced(publisher, sequence)


def delta_form(headers: Headers | None) -> bytes | None:
    """``DELTA_NATIVE`` or ``DELTA_TEXT`` for a delta_publish, None for a plain publish.

    Raises MessageError for a ``sow.delta`` header with another value.
    """
    for name, raw in headers or ():
        if name == DELTA_HEADER:
            if raw in (DELTA_NATIVE, DELTA_TEXT):
                return raw
            raise MessageError(
                f"header {DELTA_HEADER}={raw!r} is not {DELTA_NATIVE.decode()!r} (the delta "
                f"is in the topic's message type) or {DELTA_TEXT.decode()!r} (JSON text)"
            )
    return None


def sequenced(headers: Headers | None) -> Sequenced | None:
    """The (publisher, sequence) of a command, or None when it has neither header."""
    publisher = sequence = None
    for name, raw in headers or ():
        if name == PUBLISHER_HEADER:
            publisher = raw
        elif name == SEQUENCE_HEADER:
            sequence = raw
    if publisher is None and sequence is None:
        return None
    return _sequenced(publisher, sequence)


def _sequenced(publisher: bytes | None, sequence: bytes | None) -> Sequenced:
    if not publisher or not sequence:
        raise InvalidSequenceError(
            f"duplicate detection needs both headers {PUBLISHER_HEADER} (the publisher's "
            f"name) and {SEQUENCE_HEADER} (its message number); this command has "
            f"{PUBLISHER_HEADER}={publisher!r} and {SEQUENCE_HEADER}={sequence!r}"
        )
    try:
        name = publisher.decode()
    except UnicodeDecodeError:
        raise InvalidSequenceError(
            f"header {PUBLISHER_HEADER}={publisher[:64]!r} is not UTF-8 text"
        ) from None
    if not sequence.isdigit():
        raise InvalidSequenceError(
            f"header {SEQUENCE_HEADER}={sequence[:32]!r} is not a decimal integer "
            "(the publisher's message number, counting from 1)"
        )
    return name, int(sequence)
