"""Field-level operations on decoded messages: delta_publish merge and delta subscriptions'
changed fields (spec 3.3, 3.10; section 9 items 21 and 31).

A decoded json or avro message is a tree of dicts (objects, Avro records and maps) whose
leaves are any other value. A *path* is a sequence of keys from the root.

* :func:`merge` (delta_publish): every field the delta gives replaces the stored one;
  nested objects merge leaf path by leaf path; any other value the delta gives (arrays,
  strings, numbers, null) replaces the stored value whole, so an array is never merged
  element by element. Fields the delta does not give stay as stored: a delta cannot
  remove a field.
* :func:`changed` (delta subscriptions): the fields of ``new`` whose value differs from
  ``old`` (leaf paths; an array that differs in any way is given whole). A field present
  in ``old`` and absent from ``new`` (removed by a full republish) cannot be represented:
  :func:`removed` tells, and a delta subscriber is then sent the whole record.

Both are pure functions: they never modify their arguments and share no mutable state
with their result, so they are safe on any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Decides whether a field value of a delta counts as given (see :func:`merge`).
Given = Callable[[Any], bool]


def merge(stored: Mapping[str, Any], delta: Mapping[str, Any], given: Given | None = None) -> Any:
    """The record ``stored`` with the fields of ``delta`` merged in (see the module doc).

    ``given(value)`` (None: every field) says whether a field of the delta is given;
    fields it rejects are left as stored (the avro codec passes ``lambda v: v is not
    None``, so a null in an Avro delta means "not given"). A given field the stored record
    lacks is added.
    """
    out = dict(stored)
    for name, value in delta.items():
        if given is not None and not given(value):
            continue
        if isinstance(value, dict):
            current = out.get(name)
            if isinstance(current, dict):
                out[name] = merge(current, value, given)
            else:
                out[name] = _copy(value) if given is None else prune(value, given)
        elif isinstance(value, list):
            out[name] = _copy(value)
        else:
            out[name] = value
    return out


def prune(delta: Mapping[str, Any], given: Given) -> dict[str, Any]:
    """The given fields of a delta alone (nested objects pruned the same way): what a
    delta with no stored record becomes."""
    out: dict[str, Any] = {}
    for name, value in delta.items():
        if given(value):
            out[name] = prune(value, given) if isinstance(value, dict) else _copy(value)
    return out


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``new`` that differ from ``old`` (see the module doc); empty when
    nothing ``new`` has changed."""
    out: dict[str, Any] = {}
    for name, value in new.items():
        if name not in old:
            out[name] = _copy(value)
            continue
        before = old[name]
        if isinstance(value, dict) and isinstance(before, dict):
            inner = changed(before, value)
            if inner:
                out[name] = inner
        elif not _same(before, value):
            out[name] = _copy(value)
    return out


def removed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a field (at any depth) of ``old`` is absent from ``new``."""
    for name, before in old.items():
        if name not in new:
            return True
        after = new[name]
        if isinstance(before, dict) and isinstance(after, dict) and removed(before, after):
            return True
    return False


def overlay(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with the leaf paths of ``extra`` added (used to put the key fields into a
    delta: ``extra`` wins where both have a leaf)."""
    out: dict[str, Any] = merge(base, extra)
    return out


def pick(message: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """A message holding only the value at ``path`` (nested as in ``message``), or None
    when the message has no such field."""
    value: Any = message
    for name in path:
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    picked: dict[str, Any] = {path[-1]: _copy(value)}
    for name in reversed(path[:-1]):
        picked = {name: picked}
    return picked


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (``1`` and ``True`` or ``1`` and ``1.0`` differ)."""
    return type(a) is type(b) and bool(a == b)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value  # immutable (str, number, bool, None, bytes, Decimal, ...)
