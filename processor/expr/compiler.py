"""Translate AMPS expression trees to Python source (one expression string per node).

Each node becomes a :class:`Code`: a Python expression over local variables ``v0``,
``v1``, ... (the values of the inputs, numbered in first-appearance order), plus what is
statically known about it: its ``kind`` (``bool``: always True/False; ``bool3``:
True/False/None; ``any``: any value), the inputs it reads, and whether it is a constant.

Why source code: a filter runs over millions of records per query, and one generated
comprehension with the comparisons inlined is an order of magnitude faster than walking
a tree of closures. Every inline fast path handles one value class (``int``/``float``
against a number, ``str`` against a string) and falls back to the general helper of
:mod:`processor.expr.operators` for anything else, so it cannot disagree with it.
Subtrees without inputs and without non-deterministic functions are evaluated once, at
compile time (constant folding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor.errors import ExpressionError
from processor.expr import ast, predicates
from processor.expr.aggregates import AGGREGATES
from processor.expr.codegen import (
    ANY,
    ARITHMETIC,
    BOOL,
    BOOL3,
    FLIP,
    HELPER,
    NAME,
    NULL_MARK,
    NUMERIC_CHECK,
    PYOP,
    RUNTIME,
    SMALL_INT,
    STRING_CHECK,
    Code,
    join_kind,
    plain_number,
)
from processor.expr.functions import UNSUPPORTED, lookup, suggestions
from processor.expr.inputs import ContextInput, FieldInput, Input
from processor.expr.regex import compile_regex
from processor.expr.values import truth

AggregateHook = Callable[[ast.Call, "Compiler"], Code]


def _float_safe(value: Any) -> bool:
    """True for a constant that mixes with any float without raising: a float, or an int
    within float range (a larger int raises OverflowError when converted)."""
    return plain_number(value) and (value.__class__ is float or -1e300 < value < 1e300)


def conjuncts(node: ast.Node) -> list[ast.Node]:
    """The operands of a top-level AND chain, left to right (``[node]`` if it is none)."""
    return _chain(node, "AND")


def _chain(node: ast.Node, op: str) -> list[ast.Node]:
    # Iterative, so that a long chain cannot exhaust the recursion limit.
    nodes: list[ast.Node] = []
    stack: list[ast.Node] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Binary) and item.op == op:
            stack.append(item.right)
            stack.append(item.left)
        else:
            nodes.append(item)
    return nodes


class Compiler:
    """Translates the nodes of one expression (or of one aggregated query) over one
    shared table of inputs. ``aggregate`` compiles aggregate calls; without it they are
    rejected (filters and value expressions). ``fast=False`` generates calls to the
    general helpers only (no inline fast paths): the reference the fast code is tested
    against."""

    def __init__(
        self, text: str, aggregate: AggregateHook | None = None, *, fast: bool = True
    ) -> None:
        self.text = text
        self.aggregate = aggregate
        self.fast = fast
        self.namespace: dict[str, Any] = dict(RUNTIME)
        self.inputs: list[Input] = []
        self._index: dict[tuple[str, Any], int] = {}
        self._counter = 0
        self._dispatch: dict[type[ast.Node], Callable[[Any], Code]] = {
            ast.Literal: self._literal,
            ast.Identifier: self._identifier,
            ast.Unary: self._unary,
            ast.Binary: self._binary,
            ast.Call: self._call,
            ast.Between: lambda n: predicates.between(self, n),
            ast.In: lambda n: predicates.in_(self, n),
            ast.Like: lambda n: predicates.like(self, n),
            ast.Affix: lambda n: predicates.affix(self, n),
            ast.IsNull: lambda n: predicates.is_null(self, n),
            ast.IsNan: lambda n: predicates.is_nan(self, n),
        }

    # --- bookkeeping -----------------------------------------------------------------------

    def error(self, message: str, node: ast.Node | None = None) -> ExpressionError:
        """An ExpressionError about ``node`` (its position in the text)."""
        return ExpressionError(message, text=self.text, position=-1 if node is None else node.pos)

    def input(self, item: Input) -> int:
        """The index of an input, registering it on first use."""
        # Two spellings of one path (``/a`` and ``/ a``) are one input.
        key = ("field", item.steps) if isinstance(item, FieldInput) else ("context", item.name)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.inputs)
            self.inputs.append(item)
        return index

    def _name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def global_(self, value: Any, prefix: str = "_k") -> str:
        """Bind a value as a global of the generated code; returns its name."""
        name = self._name(prefix)
        self.namespace[name] = value
        return name

    def constant(self, value: Any) -> Code:
        """A constant node."""
        cls = value.__class__
        if value is None or cls is bool or cls is str or plain_number(value):
            try:
                src = repr(value)
            except ValueError:  # an integer too long for repr()
                src = self.global_(value)
        else:
            src = self.global_(value)
        kind = BOOL if cls is bool else BOOL3 if value is None else ANY
        return Code(src, kind, const=True, value=value)

    def bind(self, code: Code) -> tuple[str, str]:
        """(first use, later uses) of a value needed more than once: simple names and
        constants are repeated; anything else is evaluated once into a temporary."""
        if NAME.match(code.src):
            return code.src, code.src
        if code.const:  # parenthesised: `(10).__class__`, `(-5).__class__`
            return f"({code.src})", f"({code.src})"
        temp = self._name("_t")
        return f"({temp} := {code.src})", temp

    def make(
        self,
        src: str,
        kind: str,
        *parts: Code,
        deterministic: bool = True,
        nulls: frozenset[int] = frozenset(),
        strict: frozenset[int] = frozenset(),
    ) -> Code:
        """The node ``src`` built from ``parts`` (whose inputs, determinism and use of
        aggregates it inherits); evaluated now when it reads nothing that varies."""
        code = Code(
            src,
            kind,
            frozenset().union(*(p.refs for p in parts)),
            deterministic and all(p.deterministic for p in parts),
            any(p.aggregates for p in parts),
            nulls=nulls,
            strict=strict,
        )
        if code.foldable:
            try:
                value = eval(src, self.namespace)
            except Exception:
                # Keep the code: evaluating it per record gives the same answer and
                # the helpers are total, so this only guards the compiler itself.
                return code
            if value is NULL_MARK:
                value = None
            return self.constant(value)
        return code

    def as_bool(self, code: Code) -> Code:
        """A node in boolean position: its truth value (spec section 9 item 33)."""
        if code.kind != ANY:
            return code
        if code.const:
            return self.constant(truth(code.value))
        return Code(
            f"_truth({code.src})",
            BOOL3,
            code.refs,
            code.deterministic,
            code.aggregates,
            strict=code.strict,
        )

    # --- nodes -------------------------------------------------------------------------------

    def emit(self, node: ast.Node) -> Code:
        """Compile one node."""
        handler = self._dispatch.get(type(node))
        if handler is None:
            raise self.error(f"{type(node).__name__} is not an expression here", node)
        return handler(node)

    def _literal(self, node: ast.Literal) -> Code:
        return self.constant(node.value)

    def _identifier(self, node: ast.Identifier) -> Code:
        if node.state is not None:
            raise self.error(
                f"'{node.path} OF {node.state}' is only allowed in SOW enrichment", node
            )
        if node.qualifiers:
            raise self.error(
                f"the qualified identifier {node.path!r} ([{'].['.join(node.qualifiers)}]) "
                "is only allowed in view definitions with a Join",
                node,
            )
        index = self.input(FieldInput(node.path, node.steps))
        own = frozenset((index,))
        return Code(f"v{index}", ANY, own, nulls=own, strict=own)

    def _unary(self, node: ast.Unary) -> Code:
        operand = self.emit(node.operand)
        if node.op == "NOT":
            value = self.as_bool(operand)
            if value.kind == BOOL:
                return self.make(f"(not {value.src})", BOOL, value)
            return self.make(f"_not({value.src})", BOOL3, value)
        helper = "_neg" if node.op == "-" else "_pos"
        return self.make(
            f"{helper}({operand.src})", ANY, operand, nulls=operand.nulls, strict=operand.nulls
        )

    def _binary(self, node: ast.Binary) -> Code:
        if node.op in ("AND", "OR"):
            return self._logical(node)
        left = self.emit(node.left)
        right = self.emit(node.right)
        if node.op in HELPER:
            return self._comparison(node.op, left, right)
        if node.op in ARITHMETIC:
            return self._arithmetic(node.op, left, right)
        raise self.error(f"unknown operator {node.op!r}", node)

    def _logical(self, node: ast.Binary) -> Code:
        # A chain of one operator is flattened, so long OR lists do not nest deeply.
        nodes = _chain(node, node.op)
        operands = [self.as_bool(self.emit(item)) for item in nodes]
        kind = BOOL if all(o.kind == BOOL for o in operands) else BOOL3
        if node.op == "AND":
            # Python's `and` over True/False/None is the AMPS AND table read left to
            # right: FALSE, x -> FALSE; NULL, x -> NULL; TRUE, x -> x.
            return self.make(
                "(" + " and ".join(o.src for o in operands) + ")",
                kind,
                *operands,
                strict=frozenset().union(*(o.strict for o in operands)),
            )
        # OR is TRUE only if an operand is: NULL in an input every operand needs is not.
        strict = frozenset.intersection(*(o.strict for o in operands))
        if all(o.kind == BOOL for o in operands[:-1]):
            return self.make(
                "(" + " or ".join(o.src for o in operands) + ")", kind, *operands, strict=strict
            )
        # OR: TRUE, x -> TRUE; FALSE, x -> x; NULL, x -> NULL (not Python's `None or x`).
        parts = []
        for operand in operands[:-1]:
            if operand.kind == BOOL:
                parts.append(operand.src)
            else:
                temp = self._name("_t")
                parts.append(f"(_NULL if ({temp} := {operand.src}) is None else {temp})")
        parts.append(operands[-1].src)
        result = self._name("_t")
        src = f"(None if ({result} := ({' or '.join(parts)})) is _NULL else {result})"
        return self.make(src, BOOL3, *operands, strict=strict)

    def _comparison(self, op: str, left: Code, right: Code) -> Code:
        if (left.const and left.value is None) or (right.const and right.value is None):
            return self.constant(False)  # a comparison with NULL is FALSE (spec 9 item 1)
        if not self.fast or (left.const and right.const):
            return self.make(
                f"{HELPER[op]}({left.src}, {right.src})",
                BOOL,
                left,
                right,
                strict=left.nulls | right.nulls,
            )
        if left.const and not right.const:
            op, left, right = FLIP[op], right, left
        helper, pyop = HELPER[op], PYOP[op]
        if right.const:
            value = right.value
            src = right.src
            if value.__class__ is bool:
                value = int(value)
                src = repr(value)
            first, use = self.bind(left)
            slow = f"{helper}({use}, {src})"
            if plain_number(value):
                check = NUMERIC_CHECK.format(f=first, u=use)
            elif value.__class__ is str:
                check = STRING_CHECK.format(f=first)
            else:
                return self.make(f"{helper}({first}, {src})", BOOL, left, right, strict=left.nulls)
            return self.make(
                f"({use} {pyop} {src} if {check} else {slow})", BOOL, left, right, strict=left.nulls
            )
        a_first, a = self.bind(left)
        b_first, b = self.bind(right)
        check = (
            f"{a_first}.__class__ is {b_first}.__class__ and ({a}.__class__ is int "
            f"or {a}.__class__ is float or {a}.__class__ is str)"
        )
        src = f"({a} {pyop} {b} if {check} else {helper}({a}, {b}))"
        return self.make(src, BOOL, left, right, strict=left.nulls | right.nulls)

    def _arithmetic(self, op: str, left: Code, right: Code) -> Code:
        helper = ARITHMETIC[op]
        src = f"{helper}({left.src}, {right.src})"
        if self.fast and op in "+-*" and not (left.const and right.const):
            a_first, a = self.bind(left)
            b_first, b = self.bind(right)
            check = ""
            if right.const and right.value.__class__ is int and abs(right.value) < SMALL_INT:
                check = NUMERIC_CHECK.format(f=a_first, u=a)
            elif left.const and left.value.__class__ is int and abs(left.value) < SMALL_INT:
                check = NUMERIC_CHECK.format(f=b_first, u=b)
            elif right.const and _float_safe(right.value):
                check = f"{a_first}.__class__ is float"
            elif left.const and _float_safe(left.value):
                check = f"{b_first}.__class__ is float"
            elif not (left.const or right.const):
                # int with int and float with float never raise; an int mixed with a float
                # raises only beyond float range, which the bounds rule out. Both operands
                # are evaluated first (the tuple), so each appears once in the source.
                number = "({x}.__class__ is int or {x}.__class__ is float)"
                check = (
                    f"({a_first}, {b_first}) and {number.format(x=a)} and "
                    f"{number.format(x=b)} and ({a}.__class__ is {b}.__class__ or "
                    f"(-1e300 < {a} < 1e300 and -1e300 < {b} < 1e300))"
                )
            if check:
                src = f"({a} {op} {b} if {check} else {helper}({a}, {b}))"
        nulls = left.nulls | right.nulls
        return self.make(src, ANY, left, right, nulls=nulls, strict=nulls)

    def _call(self, node: ast.Call) -> Code:
        name = node.name.upper()
        if name in AGGREGATES:
            if self.aggregate is None:
                raise self.error(
                    f"aggregate function {name}() is only allowed in the projection of an "
                    "aggregated query or a view, not in a filter or a value expression",
                    node,
                )
            return self.aggregate(node, self)
        spec = lookup(name)
        if spec is None:
            if name in UNSUPPORTED:
                raise self.error(
                    f"function {name}() is not supported here: {UNSUPPORTED[name]}", node
                )
            close = suggestions(name)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise self.error(f"unknown function {name}(){hint}", node)
        count = len(node.args)
        if count < spec.min_args or (spec.max_args is not None and count > spec.max_args):
            raise self.error(
                f"{name}() takes {spec.arity()} argument{'s' if spec.arity() != '1' else ''}, "
                f"got {count}",
                node,
            )
        if spec.context is not None:
            index = self.input(ContextInput(name))
            own = frozenset((index,))
            return Code(f"v{index}", ANY, own, nulls=own, strict=own)
        args = [self.emit(arg) for arg in node.args]
        if name == "IF":
            return self._if(args)
        if name == "REGEXP_REPLACE" and args[1].const and args[1].value.__class__ is str:
            compile_regex(
                args[1].value,
                what="REGEXP_REPLACE pattern",
                text=self.text,
                position=node.args[1].pos,
            )
        function = self.global_(spec.call, f"_f_{name}_")
        src = f"{function}({', '.join(arg.src for arg in args)})"
        # A NULL required argument makes the result NULL (see functions.FunctionSpec).
        nulls = frozenset().union(*(arg.nulls for arg in args[: spec.nullable_from]))
        return self.make(
            src, ANY, *args, deterministic=spec.deterministic, nulls=nulls, strict=nulls
        )

    def _if(self, args: list[Code]) -> Code:
        # Only the chosen branch is evaluated (AMPS 5.3.4 and later); a condition that is
        # not TRUE (FALSE, NULL, NaN) selects the second value.
        condition = self.as_bool(args[0])
        when_true, when_false = args[1], args[2]
        if condition.const:
            return when_true if condition.value is True else when_false
        test = condition.src if condition.kind == BOOL else f"{condition.src} is True"
        src = f"({when_true.src} if {test} else {when_false.src})"
        return self.make(
            src, join_kind(when_true.kind, when_false.kind), condition, when_true, when_false
        )
