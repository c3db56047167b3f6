"""AMPS expressions: parse, compile and evaluate filters, value expressions, aggregated
projections and OrderBy keys over decoded messages.

The value model (see :mod:`processor.expr.ast`): NULL is None; bool; int; float (NaN
included); str (never empty: a zero-length string is NULL); list (an array).

* :func:`compile` turns a filter or value expression into an :class:`Expression`;
  :meth:`Expression.scan` is the SOW query hot path.
* :func:`compile_aggregation` turns ``projection``/``grouping`` into an
  :class:`Aggregation`, whose :class:`Accumulator` computes one group's output message.
* :func:`extract` / :func:`field_getter` read a field path from a message;
  :func:`order_key` sorts values in OrderBy order; :func:`text_of` is the string form.
"""

from __future__ import annotations

from processor.expr.aggregation import Accumulator, Aggregation, compile_aggregation
from processor.expr.ast import Step, Value
from processor.expr.expression import Expression, compile, compile_node, evaluate
from processor.expr.inputs import ContextInput, FieldInput, Input, MessageContext
from processor.expr.values import extract, field_getter, order_key, text_of

__all__ = [
    "Accumulator",
    "Aggregation",
    "ContextInput",
    "Expression",
    "FieldInput",
    "Input",
    "MessageContext",
    "Step",
    "Value",
    "compile",
    "compile_aggregation",
    "compile_node",
    "evaluate",
    "extract",
    "field_getter",
    "order_key",
    "text_of",
]
