"""Aggregated queries (spec 3.17, 2.7): ``projection=[...]`` grouped by ``grouping=[...]``.

Records are grouped by the string form of their grouping values. Each group has an
:class:`Accumulator`; a projection field is an aggregate, a grouping field, or any
expression of those; identifiers outside aggregate functions take their value from the
**last** record added to the group (AMPS, non-ANSI).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from processor.errors import ExpressionError
from processor.expr import ast, clauses
from processor.expr.aggregates import AGGREGATES, EXACT_CAPABLE, Aggregate
from processor.expr.codegen import Code, build
from processor.expr.compiler import Compiler
from processor.expr.inputs import FieldInput, Input
from processor.expr.values import first, isnan, text_of


@dataclass(frozen=True, slots=True)
class _Slot:
    """One aggregate call: its accumulator factory and the constant extra arguments."""

    name: str
    factory: Callable[..., Aggregate]
    extra: tuple[Any, ...]


class Aggregation:
    """A compiled aggregated query over one topic.

    ``inputs`` are every value the grouping and the projection need from a record, in
    the order :meth:`group_key` and :meth:`Accumulator.add` expect them. Immutable and
    thread-safe; accumulators are not."""

    __slots__ = (
        "_args",
        "_fields",
        "_group_positions",
        "_optional",
        "_slots",
        "_targets",
        "fields",
        "grouping",
        "inputs",
        "source",
    )

    def __init__(
        self,
        fields: tuple[ast.Field, ...],
        grouping: tuple[ast.Identifier, ...],
        projection_text: str,
        grouping_text: str,
    ) -> None:
        self.fields = fields
        self.grouping = grouping
        self._slots: list[_Slot] = []
        arguments: list[Code] = []
        compiler = Compiler(grouping_text, aggregate=self._aggregate_hook(arguments))
        group_indices = [compiler.input(FieldInput(g.path, g.steps)) for g in grouping]
        for identifier in grouping:
            compiler.emit(identifier)  # rejects qualified and OF CURRENT identifiers
        compiler.text = projection_text
        values: list[Code] = []
        targets: list[tuple[str, ...]] = []
        for field in fields:
            target = field.target
            if (
                target.qualifiers
                or target.state
                or not target.steps
                or not all(isinstance(step, str) for step in target.steps)
            ):
                raise compiler.error(
                    f"projection target {target.path!r} must be a plain field path "
                    "(names only, no subscripts or qualifiers)",
                    target,
                )
            targets.append(tuple(str(step) for step in target.steps))
            values.append(compiler.emit(field.expr))
        used = sorted(set(group_indices).union(*(c.refs for c in (*values, *arguments))))
        position = {index: n for n, index in enumerate(used)}
        self.inputs: tuple[Input, ...] = tuple(compiler.inputs[i] for i in used)
        self._group_positions = tuple(position[i] for i in group_indices)
        self._targets = tuple(targets)
        self._optional = tuple("OPTIONAL" in field.hints for field in fields)
        params = "".join(f"v{i}, " for i in used)
        slots = "".join(f"a{n}, " for n in range(len(self._slots)))
        self.source = (
            f"def _args({params}):\n    return ({''.join(a.src + ', ' for a in arguments)})\n"
            f"def _fields({params}{slots}):\n"
            f"    return ({''.join(v.src + ', ' for v in values)})\n"
        )
        namespace = build(compiler.namespace, self.source, projection_text)
        self._args: Callable[..., tuple[Any, ...]] = namespace["_args"]
        self._fields: Callable[..., tuple[Any, ...]] = namespace["_fields"]

    def _aggregate_hook(self, arguments: list[Code]) -> Callable[[ast.Call, Compiler], Code]:
        def nested(node: ast.Call, compiler: Compiler) -> Code:
            raise compiler.error(
                f"aggregate function {node.name}() cannot be nested inside "
                "another aggregate function",
                node,
            )

        def aggregate(node: ast.Call, compiler: Compiler) -> Code:
            name = node.name.upper()
            factory, low, high = AGGREGATES[name]
            if not low <= len(node.args) <= high:
                expected = str(low) if low == high else f"{low} to {high}"
                raise compiler.error(
                    f"{name}() takes {expected} argument{'s' if high > 1 else ''}, "
                    f"got {len(node.args)}",
                    node,
                )
            compiler.aggregate = nested
            try:
                argument = compiler.emit(node.args[0])
                extra_codes = [compiler.emit(arg) for arg in node.args[1:]]
            finally:
                compiler.aggregate = aggregate
            if not argument.deterministic:
                raise compiler.error(
                    f"non-deterministic functions are not allowed inside {name}()", node
                )
            extra = []
            for arg, code in zip(node.args[1:], extra_codes, strict=True):
                if not code.const:
                    raise compiler.error(f"the {name}() delimiter must be a constant", arg)
                extra.append("" if code.value is None else text_of(code.value))
            slot = len(self._slots)
            self._slots.append(_Slot(name, factory, tuple(extra)))
            arguments.append(argument)
            return Code(f"a{slot}", aggregates=True)

        return aggregate

    def group_key(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """The group of a record given its values of :attr:`inputs`: the string forms of
        its grouping values (NULL is its own group)."""
        return tuple(text_of(values[i]) for i in self._group_positions)

    def accumulator(self, exact: bool = False) -> Accumulator:
        """A new, empty accumulator for one group; ``exact`` (views, which retract
        records): float sums kept exact, so the result depends only on the records
        present (:mod:`processor.expr.aggregates`)."""
        return Accumulator(self, exact)


class Accumulator:
    """The running aggregates of one group. Not thread-safe."""

    __slots__ = ("_aggregation", "_last", "_states")

    def __init__(self, aggregation: Aggregation, exact: bool = False) -> None:
        self._aggregation = aggregation
        self._states = [
            slot.factory(*slot.extra, exact=True)
            if exact and slot.name in EXACT_CAPABLE
            else slot.factory(*slot.extra)
            for slot in aggregation._slots
        ]
        self._last: Sequence[Any] | None = None

    def add(self, values: Sequence[Any]) -> None:
        """Add one record, given its values of :attr:`Aggregation.inputs`; records must
        come in processing order (the last one supplies non-aggregated fields)."""
        arguments = self._aggregation._args(*values)
        for state, value in zip(self._states, arguments, strict=True):
            state.add(value)
        self._last = values

    def remove(self, values: Sequence[Any], last: Sequence[Any] | None) -> None:
        """Retract a record added before (its same values of :attr:`Aggregation.inputs`);
        ``last`` is now the latest record still in the group, which supplies the
        non-aggregated fields (None when the group is empty)."""
        arguments = self._aggregation._args(*values)
        for state, value in zip(self._states, arguments, strict=True):
            state.remove(value)
        self._last = last

    def result(self) -> dict[str, Any]:
        """The group's output message: nested objects built from the target paths
        (``/a/b`` -> ``{"a": {"b": v}}``). A NULL value is written as None, or left out
        with ``HINT OPTIONAL``; NaN is written as None (JSON has no NaN); an array value
        projects as its first element."""
        aggregation = self._aggregation
        last = self._last if self._last is not None else (None,) * len(aggregation.inputs)
        values = aggregation._fields(*last, *(state.result() for state in self._states))
        message: dict[str, Any] = {}
        for target, optional, raw in zip(
            aggregation._targets, aggregation._optional, values, strict=True
        ):
            value = first(raw)
            if value is None and optional:
                continue
            if isnan(value):
                value = None
            node = message
            for step in target[:-1]:
                child = node.get(step)
                if not isinstance(child, dict):
                    child = node[step] = {}
                node = child
            node[target[-1]] = value
        return message


def compile_aggregation(projection: str, grouping: str) -> Aggregation:
    """Parse and compile an aggregated query's projection and grouping (ParseError /
    ExpressionError: empty lists, nested aggregates, a non-constant GROUP_CONCAT
    delimiter, a non-deterministic function inside an aggregate, ...)."""
    if not projection.strip():
        raise ExpressionError(
            "an aggregated query needs a projection (projection=[...])", text=projection
        )
    if not grouping.strip():
        raise ExpressionError(
            "an aggregated query needs a grouping (grouping=[...])", text=grouping
        )
    fields = clauses.parse_projection(projection)
    groups = clauses.parse_grouping(grouping)
    if not fields:
        raise ExpressionError("the projection lists no field", text=projection)
    if not groups:
        raise ExpressionError("the grouping lists no field", text=grouping)
    return Aggregation(fields, groups, projection, grouping)
