"""The dead-letter topic: where a record that cannot be applied goes, with the reason.

A per-record failure never stops the processor: the record is written to the dead-letter
topic inside the batch's Kafka transaction (so it is dead-lettered exactly once, together
with the consumer offset that moves past it) and the batch goes on. A failure that is not
the record's own (the broker, the store) is raised instead, and the processor retries or
stops.

Dead-letter record: the original key, value and headers, plus headers
``sow.error.reason`` (a short code, see :mod:`processor.errors`), ``sow.error.message``
and ``sow.source.topic`` / ``sow.source.partition`` / ``sow.source.offset``, which find the
record in the input log. When the record does not fit the dead-letter topic with its value,
it is written without it (``sow.error.value-omitted`` = the value's size in bytes); when
even that does not fit, without its key and original headers too
(``sow.error.key-omitted``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from processor.engine.transaction import Produce
from processor.errors import (
    KeyGenerationError,
    MessageError,
    ProcessingError,
    RecordTooLargeError,
    RegexBudgetError,
    SowError,
)
from processor.log import Headers, Record

log = logging.getLogger(__name__)

REASON_HEADER = "sow.error.reason"
MESSAGE_HEADER = "sow.error.message"
VALUE_OMITTED_HEADER = "sow.error.value-omitted"
KEY_OMITTED_HEADER = "sow.error.key-omitted"
ERROR_HEADERS = (REASON_HEADER, MESSAGE_HEADER)
SOURCE_HEADERS = ("sow.source.topic", "sow.source.partition", "sow.source.offset")
#: Error messages are cut to this many characters in the header.
MESSAGE_LIMIT = 4000

ProduceError = Callable[[Exception], SowError | None]


def no_translation(exc: Exception) -> SowError | None:
    """A ``produce_error`` for producers that raise nothing of their own."""
    return None


class DeadLetters:
    """Writes rejected records to the dead-letter topic in the batch's transaction.

    ``produce`` is the produce of the processor's transactions
    (:func:`processor.engine.transaction.retrying`: it waits while the producer's queue is
    full); ``produce_error`` translates what else it raises (see
    :class:`processor.log.TransactionalLog`). Single-threaded, like the applier that owns
    it.
    """

    def __init__(
        self,
        produce: Produce,
        topic: str,
        produce_error: ProduceError = no_translation,
    ) -> None:
        self.produce = produce
        self.topic = topic
        self.produce_error = produce_error
        #: Records dead-lettered since start.
        self.count = 0

    def failure(self, exc: Exception) -> MessageError | None:
        """The record's own failure that ``exc`` means, or None when ``exc`` is not about
        one record (then the caller re-raises it)."""
        if isinstance(exc, MessageError):
            return exc
        if isinstance(exc, RegexBudgetError):  # a pattern too slow on this record's values
            return ProcessingError(str(exc))
        if isinstance(exc, SowError):
            return None  # a broker, store or programming state failure: not the record's
        translated = self.produce_error(exc)
        if translated is None:
            return ProcessingError(f"{type(exc).__name__}: {exc}")
        if isinstance(translated, MessageError):
            return translated
        raise translated from exc

    def send(self, record: Record, error: MessageError) -> None:
        """Dead-letter ``record`` for ``error``, within the current transaction."""
        reason: Headers = [
            (REASON_HEADER, error.reason_code.encode()),
            (MESSAGE_HEADER, str(error)[:MESSAGE_LIMIT].encode(errors="replace")),
            (SOURCE_HEADERS[0], record.topic().encode()),
            (SOURCE_HEADERS[1], str(record.partition()).encode()),
            (SOURCE_HEADERS[2], str(record.offset()).encode()),
        ]
        value, key = record.value(), record.key()
        original = list(record.headers() or [])
        omitted: Headers = []
        if value is not None:
            omitted.append((VALUE_OMITTED_HEADER, str(len(value)).encode()))
        attempts: list[tuple[bytes | None, bytes | None, Headers]] = [
            (value, key, original + reason),
            (None, key, original + reason + omitted),
        ]
        if key is not None:
            omitted.append((KEY_OMITTED_HEADER, str(len(key)).encode()))
        attempts.append((None, None, reason + omitted))
        for attempt_value, attempt_key, headers in attempts:
            try:
                self.produce(self.topic, attempt_value, attempt_key, -1, headers)
                break
            except Exception as exc:  # the producer's own errors, translated just below
                if not isinstance(self.produce_error(exc), RecordTooLargeError):
                    raise
        else:
            raise RecordTooLargeError(
                f"even the reason of a dead-lettered record does not fit the dead-letter "
                f"topic {self.topic}: {error}"
            )
        self.count += 1
        log.warning(
            "dead-lettered %s[%d]@%d (%s): %s",
            record.topic(),
            record.partition(),
            record.offset(),
            error.reason_code,
            error,
        )


def explain(
    value: bytes | None,
    decode: Callable[[bytes], Any],
    key_function: Callable[[Any], str] | None,
    topic: str,
    error: MessageError,
) -> MessageError:
    """Name the step behind an unexpected failure: when the message decodes but the
    topic's key function fails on it, the key function (a custom KeyGenerator, or a Key
    field value with no text form) is the culprit; otherwise ``error`` stands."""
    if value is None or key_function is None:
        return error
    try:
        message = decode(value)
    except Exception:  # blaming the key function needs a decodable message; else keep error
        return error
    try:
        key_function(message).encode()
    except Exception as again:  # a custom KeyGenerator is user code and may raise anything
        return KeyGenerationError(
            f"the key function of topic {topic} failed on this message: "
            f"{type(again).__name__}: {again}; fix the message's Key fields or the "
            "topic's KeyGenerator"
        )
    return error
