"""What one record contributes to a view: its group and its input values.

The values are those of the aggregation's inputs (:attr:`Aggregation.inputs`): fields
of the message, and message-context facts (``SOW_KEY()``, ``LAST_UPDATED()``...) read
from the record's context. A record the view's filter rejects contributes nothing.

Values travel from the underlying topic's partition to the view's partition and are
kept in the view's state as JSON (:func:`encode_values`), which holds every value an
expression produces: NULL, bool, int, float (NaN and the infinities included, as
``NaN``/``Infinity``), str, arrays and objects; bytes are tagged (``{"$bytes": hex}``)
and any other value (a BSON date, an ObjectId) travels as its text. Plain values (str,
64-bit int, finite float, bool, NULL) go through orjson; the rest through the standard
library, marked ``J``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import orjson

from processor.expr import Aggregation, Expression, FieldInput, MessageContext
from processor.expr.values import extract

#: A group: the text forms of its grouping values.
GroupKey = tuple[Any, ...]
#: A record's values of the aggregation's inputs.
Values = tuple[Any, ...]
#: One member's change in a view partition: view SowKey, member, values (None: retract),
#: and the log topic, offset and timestamp of what caused it (a change made directly in
#: the transaction of the underlying change: the view's input topic, -1, the apply time).
Change = tuple[bytes, bytes, Values | None, str, int, int]


def contribution(
    aggregation: Aggregation,
    filter: Expression | None,
    message: Mapping[str, Any],
    context: MessageContext | None = None,
) -> tuple[GroupKey, Values] | None:
    """The group and input values of one record (None: the filter rejects it)."""
    if filter is not None and not filter.matches(message, context, overrun="view"):
        return None
    values = tuple(
        extract(message, item.steps)
        if isinstance(item, FieldInput)
        else (None if context is None else context.value(item.name))
        for item in aggregation.inputs
    )
    return aggregation.group_key(values), values


def _tagged(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"$bytes": bytes(value).hex()}
    return str(value)


def _untag(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$bytes" in obj:
        return bytes.fromhex(obj["$bytes"])
    return obj


def _plain(value: Any) -> bool:
    """Whether orjson writes ``value`` as :func:`encode_values` must (it writes NaN and
    the infinities as null, and refuses bytes)."""
    kind = value.__class__
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if kind is float:
        return math.isfinite(value)
    return False


def encode_values(sequence: int, values: Values) -> bytes:
    """A member's update sequence and input values, as kept and sent: JSON by orjson
    when it writes them as they are, else ``J`` and the standard library's JSON."""
    if all(map(_plain, values)):
        return orjson.dumps([sequence, *values])
    return b"J" + json.dumps([sequence, *values], default=_tagged, separators=(",", ":")).encode()


def decode_values(raw: bytes) -> tuple[int, Values]:
    """The inverse of :func:`encode_values`."""
    if raw[:1] == b"J":
        sequence, *values = json.loads(raw[1:], object_hook=_untag)
    else:
        sequence, *values = orjson.loads(raw)
    return int(sequence), tuple(values)
