"""The headers a publish carries into the log: its options (expiration, correlation id),
duplicate detection (publisher and sequence) and, for a Pattern topic, the topic it was
published to (:data:`~processor.changelog.commands.TOPIC_HEADER`). Each function checks
what it encodes and raises InvalidRequestError saying what is wrong."""

from __future__ import annotations

from processor.changelog.commands import (
    CORRELATION_HEADER,
    EXPIRATION_HEADER,
    PUBLISHER_HEADER,
    SEQUENCE_HEADER,
)
from processor.errors import InvalidRequestError
from processor.log import Headers
from processor.publish.requests import MAX_PUBLISHER_LENGTH, PublishFields


def option_headers(expiration: float, correlation_id: str) -> Headers:
    """The expiration and correlation id headers, for the options given."""
    headers: Headers = []
    if expiration:
        headers.append((EXPIRATION_HEADER, str(max(expiration, 0)).encode()))
    if correlation_id:
        headers.append((CORRELATION_HEADER, correlation_id.encode()))
    return headers


def command_headers(command: PublishFields) -> Headers:
    """The option headers of a publish."""
    headers = option_headers(command.expiration, command.correlation_id)
    if command.sequence or command.publisher:
        headers += sequence_headers(command.publisher, command.sequence)
    return headers


def sequence_headers(publisher: str, sequence: int) -> Headers:
    """The duplicate-detection headers of a publish (both or neither)."""
    if not publisher or sequence <= 0:
        raise InvalidRequestError(
            "duplicate detection needs both a publisher name and a sequence number above 0 "
            f"(got publisher={publisher!r}, sequence={sequence})"
        )
    if len(publisher) > MAX_PUBLISHER_LENGTH:
        raise InvalidRequestError(
            f"the publisher name is {len(publisher)} characters; use at most {MAX_PUBLISHER_LENGTH}"
        )
    return [(PUBLISHER_HEADER, publisher.encode()), (SEQUENCE_HEADER, str(sequence).encode())]
