"""A queue partition's subscription filters: each filter text compiled once, over a
message's envelope (a subscribe or an acknowledgement by filter names one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor import changelog
from processor.errors import ExpressionError, MessageError
from processor.expr import Expression
from processor.expr import compile as compile_expression
from processor.queues.model import MessageFilter, QueueMessage

_NO_FILTER: MessageFilter = lambda _message: True  # noqa: E731


class Filters:
    """The filters of one queue partition, by text (at most ``LIMIT`` kept)."""

    LIMIT = 1024

    def __init__(self, decode: Callable[[bytes], Any]) -> None:
        """``decode``: the queue's message type's decoder of a message's data."""
        self._decode = decode
        self._known: dict[str, MessageFilter] = {}

    def __call__(self, text: str) -> MessageFilter:
        """The filter of ``text`` (blank: every message). MessageError: it is not one, so
        the command carrying it is dead-lettered."""
        if not text.strip():
            return _NO_FILTER
        found = self._known.get(text)
        if found is None:
            try:
                expression = compile_expression(text)
            except ExpressionError as exc:
                raise MessageError(f"queue command filter {text!r}: {exc}") from None
            decode = self._decode

            def matches(message: QueueMessage, expression: Expression = expression) -> bool:
                decoded = changelog.decode(message.data)
                return expression.matches(decode(decoded.data), decoded.context(), overrun="queue")

            if len(self._known) >= self.LIMIT:
                self._known.clear()
            found = self._known[text] = matches
        return found
