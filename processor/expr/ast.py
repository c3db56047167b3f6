"""The syntax tree of AMPS expressions: what the parser produces and the compiler consumes.

Every node is a frozen dataclass carrying ``pos``, the 0-based character offset in the
source text where the node starts, so later stages can report errors at a position.
Spelling variants are normalised by the parser: ``==`` becomes ``=``, ``<>`` becomes
``!=``, ``MOD`` becomes ``%``, keywords and function names are upper-cased.

The value model every stage shares (``Value``): NULL is ``None``; booleans ``bool``;
integers ``int``; floating point ``float`` (NaN included); strings ``str`` (a zero-length
string is NULL and never appears as a value); arrays ``list`` of values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from typing import Literal as TypingLiteral

Value = Any
#: One step of an identifier path: a field name, or a zero-based array subscript.
Step = str | int

ARITHMETIC_OPS = ("+", "-", "*", "/", "%")
COMPARISON_OPS = ("=", "!=", "<", "<=", ">", ">=")
LOGICAL_OPS = ("AND", "OR")


@dataclass(frozen=True, slots=True)
class Node:
    """Base of every node."""

    pos: int


@dataclass(frozen=True, slots=True)
class Literal(Node):
    """A constant: NULL (None), an integer, a float, or a string.

    String literals hold their value after escape processing (``'a\\tb'`` holds a TAB);
    the empty string literal ``''`` is NULL and is represented as ``Literal(pos, None)``.
    ``TRUE``/``FALSE`` (accepted as an extension) are ``Literal(pos, True/False)``.
    """

    value: Value


@dataclass(frozen=True, slots=True)
class Identifier(Node):
    """A field reference.

    ``path`` is the source spelling without qualifiers (``/a/b[0]``, ``[/Not Xpath]``);
    ``steps`` the parsed steps (``("a", "b", 0)``; a bracketed name is one step). A
    qualified identifier (``[ORDERS]./x``, ``[json].[ORDERS]./x``) keeps its qualifiers
    in ``qualifiers`` (outermost first: message type then topic, or just topic).
    ``state`` is ``"CURRENT"`` or ``"PREVIOUS"`` for the enrichment modifiers
    ``OF CURRENT`` / ``OF PREVIOUS``, else None.
    """

    path: str
    steps: tuple[Step, ...]
    qualifiers: tuple[str, ...] = ()
    state: str | None = None


@dataclass(frozen=True, slots=True)
class Unary(Node):
    """``-x``, ``+x`` or ``NOT x`` (``op`` is ``"-"``, ``"+"`` or ``"NOT"``)."""

    op: TypingLiteral["-", "+", "NOT"]
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary(Node):
    """An arithmetic (``+ - * / %``), comparison (``= != < <= > >=``) or logical
    (``AND``, ``OR``) operation; ``pos`` is the left operand's position."""

    op: str
    left: Node
    right: Node
    #: Position of the operator itself (for errors about the operator).
    op_pos: int = -1


@dataclass(frozen=True, slots=True)
class Between(Node):
    """``operand [NOT] BETWEEN low AND high`` (inclusive)."""

    operand: Node
    low: Node
    high: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In(Node):
    """``operand [NOT] IN (item, ...)``; items are arbitrary expressions."""

    operand: Node
    items: tuple[Node, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like(Node):
    """``operand [NOT] LIKE pattern``.

    ``pattern`` is the literal's text as the regular-expression engine must see it:
    backslash sequences kept verbatim (only an escaped quote of the delimiting kind is
    unescaped). ``raw`` is True for ``r'...'`` patterns, which match literally.
    """

    operand: Node
    pattern: str
    raw: bool = False
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Affix(Node):
    """``operand [NOT] BEGINS WITH (item, ...)`` or ``... ENDS WITH (...)``."""

    kind: TypingLiteral["BEGINS", "ENDS"]
    operand: Node
    items: tuple[Node, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull(Node):
    """``operand IS [NOT] NULL`` (also the ``operand NOT NULL`` spelling)."""

    operand: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNan(Node):
    """``operand IS [NOT] NAN``."""

    operand: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call; ``name`` upper-cased. ``IF``, ``COALESCE`` and the aggregate
    functions (``SUM``, ``COUNT``, ...) are calls too; the compiler decides where each
    is allowed. ``name_pos`` is the position of the name (same as ``pos``)."""

    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Field(Node):
    """A projection field: ``expr AS /target [HINT OPTIONAL | SET_CURRENT, ...]``.

    A bare identifier in a projection (no ``AS``) copies to the same path: the parser
    returns ``Field(pos, ident, ident, ())``.
    """

    expr: Node
    target: Identifier
    hints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OrderKey(Node):
    """One OrderBy item: ``identifier [ASC | DESC] [TEXT]``."""

    field: Identifier
    descending: bool = False
    text: bool = False
