"""SOW Preprocessing and Enrichment: ``<expr> AS /target`` fields merged into a message
(spec 1.16; seed 002 "Message Enrichment").

A :class:`Construction` is the compiled list of a topic's ``<Field>`` elements. Applied to
a decoded message it returns a new message: the original with every target path set to
its field's value (nested targets create objects); fields the list does not mention are
kept. Without ``HINT SET_CURRENT`` every value is computed against the message as it came
in, then all are merged; a ``SET_CURRENT`` field is written at once, so the fields after
it see its value. ``HINT OPTIONAL`` leaves the target alone when the value is NULL; else a
NULL value writes a null.

* Preprocessing (``enrichment=False``) runs before the SowKey is computed and sees only
  the message: ``OF CURRENT``/``OF PREVIOUS`` and qualified identifiers are refused.
* Enrichment (``enrichment=True``) runs after: ``/x OF CURRENT`` is the incoming
  message's field (as plain ``/x``), ``/x OF PREVIOUS`` the field of the record the SOW
  holds for the same SowKey (NULL when there is none), and ``SOW_KEY()`` the record's key.

Compiling raises ParseError/ExpressionError naming the field; applying raises
ExpressionError when a value cannot be written (a target under a non-object value).
Compiled constructions are immutable and thread-safe.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from processor.errors import ExpressionError
from processor.expr import ast, clauses
from processor.expr.expression import Expression, compile_node
from processor.expr.inputs import MessageContext

#: The root step under which an enrichment expression reads the previous record.
PREVIOUS_ROOT = "\x00previous"


@dataclasses.dataclass(frozen=True, slots=True)
class ConstructedField:
    """One compiled field: where it writes, its hints, and its source text."""

    text: str
    target: tuple[ast.Step, ...]
    expression: Expression
    optional: bool
    set_current: bool


class Construction:
    """A compiled Preprocessing or Enrichment list (see the module doc)."""

    __slots__ = ("enrichment", "fields", "reads_previous")

    def __init__(self, fields: Sequence[ConstructedField], enrichment: bool) -> None:
        self.fields = tuple(fields)
        self.enrichment = enrichment
        self.reads_previous = any(PREVIOUS_ROOT in _roots(f.expression.node) for f in self.fields)

    def __repr__(self) -> str:
        kind = "Enrichment" if self.enrichment else "Preprocessing"
        return f"{kind}({', '.join(f.text for f in self.fields)})"

    def apply(
        self,
        message: Mapping[str, Any],
        previous: Mapping[str, Any] | None = None,
        context: MessageContext | None = None,
    ) -> dict[str, Any]:
        """The message with every field's value written to its target (module doc).

        ``previous`` is the stored record (enrichment only). Never modifies ``message``.
        """
        out: dict[str, Any] = _copy_objects(message)
        seen: dict[str, Any] = dict(message)
        if self.reads_previous:
            seen[PREVIOUS_ROOT] = previous
        pending: list[tuple[ConstructedField, Any]] = []
        for field in self.fields:
            value = field.expression(seen, context)
            if field.set_current:
                _write(out, field, value)
                _write_view(seen, field, value)
            else:
                pending.append((field, value))
        for field, value in pending:
            _write(out, field, value)
        return out


def compile_construction(texts: Sequence[str], *, enrichment: bool) -> Construction:
    """Compile ``<Field>`` texts (each ``expr AS /target [HINT ...]``, or several
    separated by commas). Raises ParseError/ExpressionError saying which field is wrong."""
    kind = "Enrichment" if enrichment else "Preprocessing"
    compiled: list[ConstructedField] = []
    for text in texts:
        for field in clauses.parse_projection(text):
            if field.expr is field.target or field.expr == field.target:
                raise ExpressionError(
                    f"a {kind} field needs 'expression AS /target'; {text!r} names a field "
                    "without building one",
                    text=text,
                    position=field.pos,
                )
            node = _resolve(field.expr, text, enrichment)
            compiled.append(
                ConstructedField(
                    text=text,
                    target=field.target.steps,
                    expression=compile_node(node, text),
                    optional="OPTIONAL" in field.hints,
                    set_current="SET_CURRENT" in field.hints,
                )
            )
    if not compiled:
        raise ExpressionError(f"{kind} needs at least one <Field>", text="")
    for built in compiled:
        if any(isinstance(step, int) for step in built.target):
            raise ExpressionError(
                f"the target of {built.text!r} has an array subscript; a {kind} field "
                "writes a field path such as /a/b",
                text=built.text,
            )
    return Construction(compiled, enrichment)


def _resolve(node: ast.Node, text: str, enrichment: bool) -> ast.Node:
    """The expression with ``OF CURRENT`` read from the message and ``OF PREVIOUS`` from
    :data:`PREVIOUS_ROOT`; refuses what the construction's kind does not allow."""
    if isinstance(node, ast.Identifier):
        if node.qualifiers:
            raise ExpressionError(
                f"{node.path!r} is qualified ([{'].['.join(node.qualifiers)}]); a SOW "
                "Preprocessing or Enrichment field reads only the published message",
                text=text,
                position=node.pos,
            )
        if node.state is None:
            return node
        if not enrichment:
            raise ExpressionError(
                f"'{node.path} OF {node.state}' is only allowed in Enrichment: Preprocessing "
                "runs before the SowKey is known, so there is no previous record",
                text=text,
                position=node.pos,
            )
        if node.state == "CURRENT":
            return ast.Identifier(node.pos, node.path, node.steps)
        return ast.Identifier(node.pos, node.path, (PREVIOUS_ROOT, *node.steps))
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if isinstance(value, ast.Node):
            changes[item.name] = _resolve(value, text, enrichment)
        elif isinstance(value, tuple) and value and isinstance(value[0], ast.Node):
            changes[item.name] = tuple(_resolve(v, text, enrichment) for v in value)
    return dataclasses.replace(node, **changes) if changes else node


def _roots(node: ast.Node) -> set[ast.Step]:
    """The first steps of every identifier in an expression."""
    if isinstance(node, ast.Identifier):
        return {node.steps[0]} if node.steps else set()
    found: set[ast.Step] = set()
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if isinstance(value, ast.Node):
            found |= _roots(value)
        elif isinstance(value, tuple):
            for part in value:
                if isinstance(part, ast.Node):
                    found |= _roots(part)
    return found


def _copy_objects(message: Mapping[str, Any]) -> dict[str, Any]:
    """A copy whose nested objects are copies too (lists and leaves are shared: they are
    replaced whole, never changed in place)."""
    return {k: _copy_objects(v) if isinstance(v, dict) else v for k, v in message.items()}


def _write(message: dict[str, Any], field: ConstructedField, value: Any) -> None:
    """Set the field's target path to ``value`` (OPTIONAL and NULL: leave it alone)."""
    if value is None and field.optional:
        return
    if isinstance(value, float) and math.isnan(value):
        value = None  # NaN has no form in most message types; AMPS writes it empty
    node = message
    for step in field.target[:-1]:
        child = node.get(str(step))
        if child is None:
            child = node[str(step)] = {}
        elif not isinstance(child, dict):
            raise ExpressionError(
                f"{field.text!r} writes below /{step}, which holds a "
                f"{type(child).__name__}, not an object",
                text=field.text,
            )
        node = child
    node[str(field.target[-1])] = value


def _write_view(seen: dict[str, Any], field: ConstructedField, value: Any) -> None:
    """SET_CURRENT: make the value visible to the fields after it (copying the objects on
    the path, so the caller's message is never changed)."""
    if value is None and field.optional:
        return
    node = seen
    for step in field.target[:-1]:
        child = node.get(str(step))
        child = dict(child) if isinstance(child, dict) else {}
        node[str(step)] = child
        node = child
    node[str(field.target[-1])] = value
