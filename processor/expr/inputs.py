"""What a compiled expression reads per record: message fields and message-context facts."""

from __future__ import annotations

from dataclasses import dataclass

from processor.expr.ast import Step, Value


@dataclass(frozen=True, slots=True)
class FieldInput:
    """A field of the message: ``path`` as written (first spelling), ``steps`` parsed."""

    path: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class ContextInput:
    """A per-record fact that the message does not hold, read by a message-context
    function: ``name`` is the function's name (``"SOW_KEY"``, ``"MESSAGE_SIZE"``, ...)."""

    name: str


Input = FieldInput | ContextInput

#: Message-context function name -> the MessageContext attribute it reads (spec 2.6).
#: SOW_KEY_HASH is the SowKey: AMPS documents the two as equal for generated keys.
CONTEXT_ATTRIBUTES: dict[str, str] = {
    "SOW_KEY": "sow_key",
    "SOW_KEY_HASH": "sow_key",
    "TOPIC_NAME": "topic",
    "CORRELATION_ID": "correlation_id",
    "MESSAGE_SIZE": "message_size",
    "LAST_UPDATED": "last_updated",
    "BOOKMARK": "bookmark",
}


@dataclass(frozen=True, slots=True)
class MessageContext:
    """Per-record facts the message itself does not hold; all optional (NULL when
    absent). ``last_updated`` is epoch seconds; ``message_size`` the payload bytes."""

    sow_key: str | None = None
    topic: str | None = None
    correlation_id: str | None = None
    message_size: int | None = None
    last_updated: float | None = None
    bookmark: str | None = None

    def value(self, name: str) -> Value:
        """The value of the ContextInput ``name`` (NULL for an unknown name or an absent
        or empty fact)."""
        attribute = CONTEXT_ATTRIBUTES.get(name.upper())
        if attribute is None:
            return None
        value = getattr(self, attribute)
        if value == "":
            return None
        return value
