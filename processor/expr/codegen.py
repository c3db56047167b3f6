"""The pieces generated expression code is made of: :class:`Code`, the runtime helpers
bound as its globals, and the functions that finish and execute it.

Naming in generated code: ``v<N>`` input values, ``_t<N>`` temporaries (walrus), ``_k<N>``
constants, ``_f_<NAME>_<N>`` built-in functions, ``_g<N>`` field getters, ``_<op>`` the
helpers of :data:`RUNTIME`, ``a<N>`` aggregate results.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from processor.errors import TooDeepError
from processor.expr import operators
from processor.expr.values import truth

BOOL = "bool"
BOOL3 = "bool3"
ANY = "any"


class _NullMark:
    """Stands for NULL inside a Python ``or`` chain (it is truthy, so the chain stops
    there as the AMPS table requires: ``NULL OR x`` is NULL)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


@dataclass(frozen=True, slots=True)
class Code:
    """One compiled node (see the module docstring)."""

    src: str
    kind: str = ANY
    refs: frozenset[int] = frozenset()
    deterministic: bool = True
    aggregates: bool = False
    const: bool = False
    value: Any = None
    #: Inputs whose NULL makes this value NULL.
    nulls: frozenset[int] = frozenset()
    #: Inputs whose NULL makes this node not TRUE in boolean position (a filter cannot
    #: match a record without them, so a scan may iterate one such input's column).
    strict: frozenset[int] = frozenset()

    @property
    def foldable(self) -> bool:
        """True when the node can be evaluated once at compile time."""
        return not (self.const or self.refs or self.aggregates) and self.deterministic


NULL_MARK = _NullMark()

#: Runtime helpers, bound as globals of the generated code under these names.
RUNTIME: dict[str, Any] = {
    "_eq": operators.eq,
    "_ne": operators.ne,
    "_lt": operators.lt,
    "_le": operators.le,
    "_gt": operators.gt,
    "_ge": operators.ge,
    "_between": operators.between,
    "_in": operators.in_list,
    "_in_lit": operators.in_literals,
    "_begins": operators.begins_with,
    "_ends": operators.ends_with,
    "_is_nan": operators.is_nan,
    "_not": operators.not_,
    "_truth": truth,
    "_add": operators.add,
    "_sub": operators.sub,
    "_mul": operators.mul,
    "_div": operators.div,
    "_mod": operators.mod,
    "_neg": operators.neg,
    "_pos": operators.pos,
    "_NULL": NULL_MARK,
}
HELPER = {"=": "_eq", "!=": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
PYOP = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
ARITHMETIC = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NUMERIC_CHECK = "{f}.__class__ is int or {u}.__class__ is float"
STRING_CHECK = "{f}.__class__ is str"
#: Integers this small convert to float exactly, so mixing them with floats cannot fail.
SMALL_INT = 1 << 53


def plain_number(value: Any) -> bool:
    """True for an int or a finite float (a constant the numeric fast paths accept)."""
    cls = value.__class__
    return cls is int or (cls is float and math.isfinite(value))


def join_kind(*kinds: str) -> str:
    """The kind of a value that may come from any of nodes of these kinds."""
    if all(kind == kinds[0] for kind in kinds):
        return kinds[0]
    if all(kind in (BOOL, BOOL3) for kind in kinds):
        return BOOL3
    return ANY


def predicate(code: Code) -> str:
    """Python source that is True exactly when the node's value is TRUE in boolean
    position (a filter matches)."""
    if code.kind == BOOL:
        return code.src
    if code.kind == BOOL3:
        return f"({code.src}) is True"
    return f"_truth({code.src}) is True"


def build(namespace: dict[str, Any], source: str, text: str) -> dict[str, Any]:
    """Execute generated source in ``namespace``; TooDeepError if Python cannot
    compile it (it limits the nesting of parentheses)."""
    try:
        exec(compile(source, f"<AMPS expression {text[:60]!r}>", "exec"), namespace)
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise TooDeepError(
            "the expression is nested too deeply to compile; simplify it", text=text
        ) from exc
    return namespace
