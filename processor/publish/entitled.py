"""Write entitlements at the gateway: a principal writes only topics it may write, and
only messages its *write filter* matches (docs/security.md).

A publish is checked on the message as published (a delta_publish on the fields it
gives: the merged record is the processor's to make, after the log); a message outside
the filter is refused with NotEntitledError, alone in its batch. A sow_delete deletes
only records the write filter matches: by SowKeys it becomes a delete by filter,
``SOW_KEY() IN (...) AND (write filter)``, which the processor evaluates on the stored
records; by filter, the write filter is AND-ed into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from processor.errors import NotEntitledError
from processor.expr import Expression, MessageContext
from processor.expr import compile as compile_expression
from processor.security import RequestContext
from processor.security.reads import topic_name

#: Compiled write filters kept at most (one per distinct filter text).
MAX_COMPILED = 1024


class WriteFilters:
    """The write filters in use, compiled once each. Thread-safe (a race compiles twice)."""

    def __init__(self) -> None:
        self._compiled: dict[str, Expression] = {}

    def _expression(self, text: str) -> Expression:
        expression = self._compiled.get(text)
        if expression is None:
            if len(self._compiled) >= MAX_COMPILED:
                self._compiled = {}
            expression = self._compiled[text] = compile_expression(text)
        return expression

    def checker(self, context: RequestContext, topic: str) -> Callable[[Any, str], None] | None:
        """What each message published to ``topic`` by ``context``'s principal must pass:
        None when every message may be written; raises NotEntitledError when none may."""
        if not context.rights.restricted:
            return None
        name = topic_name(topic)
        text = context.rights.write_filter(name)
        if text is None:
            return None
        expression = self._expression(text)
        principal = context.principal

        def check(message: Any, sow_key: str) -> None:
            if not expression.matches(message, MessageContext(sow_key=sow_key, topic=name)):
                raise NotEntitledError(
                    f"principal {principal.name!r} may write to {name!r} only messages its "
                    f"write filter {text!r} matches; this one does not (nothing was written)"
                )

        return check


def delete_filter(context: RequestContext, topic: str, text: str) -> str:
    """A delete-by-filter's filter with the caller's write filter AND-ed in (raises
    NotEntitledError when it may not write ``topic``)."""
    if not context.rights.restricted:
        return text
    allowed = context.rights.write_filter(topic_name(topic))
    return text if allowed is None else f"({text}) AND ({allowed})"


def keys_filter(sow_keys: Sequence[str]) -> str:
    """The filter selecting records by SowKey (a delete by keys under a write filter)."""
    quoted = ", ".join("'" + k.replace("\\", "\\\\").replace("'", "\\'") + "'" for k in sow_keys)
    return f"SOW_KEY() IN ({quoted})"
