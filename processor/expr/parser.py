"""The parser of AMPS expressions: filters, value expressions, projections, groupings, OrderBy.

Grammar (spec 1.7), highest precedence first: primary (literal, identifier, call,
parenthesised expression); unary ``-``/``+``; ``* / % MOD``; ``+ -``; comparisons and
predicates (one non-associative level: ``a = b = c`` is an error); ``NOT``; ``AND``;
``OR``. Within one nesting level operators are resolved with an operator stack, so only
parentheses, calls and lists recurse. :data:`MAX_DEPTH` caps both that nesting and the
depth of the returned tree, so the parser and every recursive walk of its trees stay well
inside Python's default stack limit; :data:`MAX_LENGTH` caps the text, so that parsing
takes well under a second. Every syntax error raises
:class:`~processor.errors.ParseError` with the position where parsing stopped; no other
exception escapes, whatever the input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from processor.errors import ParseError
from processor.expr import ast
from processor.expr.lexer import OPERAND_EXPECTED, Kind, Lexer, Token

#: Deepest nesting of parentheses, calls and lists, and deepest syntax tree, accepted.
MAX_DEPTH = 200
#: Longest text accepted, in characters. Parsing takes about 10 microseconds per
#: character of dense syntax, so this bounds one parse to well under a second; without
#: it a filter the size of a gRPC request (megabytes) would hold a thread for minutes.
MAX_LENGTH = 65_536

_OR, _AND, _NOT, _PRED, _ADD, _MUL, _UNARY = 1, 2, 3, 4, 5, 6, 7
_PUNCT_OPS = {
    "=": ("=", _PRED), "==": ("=", _PRED), "!=": ("!=", _PRED), "<>": ("!=", _PRED),
    "<": ("<", _PRED), "<=": ("<=", _PRED), ">": (">", _PRED), ">=": (">=", _PRED),
    "+": ("+", _ADD), "-": ("-", _ADD), "*": ("*", _MUL), "/": ("/", _MUL), "%": ("%", _MUL),
}  # fmt: skip
_WORD_OPS = {"AND": ("AND", _AND), "OR": ("OR", _OR), "MOD": ("%", _MUL)}
_PREDICATE_WORDS = frozenset({"IS", "NOT", "BETWEEN", "IN", "LIKE", "BEGINS", "ENDS"})
_NEGATABLE = "BETWEEN, IN, LIKE, BEGINS WITH, ENDS WITH or NULL"
#: Words that never name a function or a value.
_RESERVED = frozenset(
    {"AND", "OR", "NOT", "IS", "IN", "LIKE", "BETWEEN", "BEGINS", "ENDS", "WITH", "MOD"}
    | {"AS", "HINT", "OF", "NULL", "NAN", "TRUE", "FALSE"}
)
_T = TypeVar("_T")


@dataclass(slots=True)
class _Pending:
    """An operator waiting for its right operand on the operator stack."""

    op: str
    prec: int
    pos: int
    prefix: bool


@dataclass(slots=True)
class _Operand:
    """A parsed operand and the depth of its tree; ``predicate`` marks an unparenthesised
    comparison or predicate, which may not be the operand of another one."""

    node: ast.Node
    depth: int = 1
    predicate: bool = False


class Parser:
    """One parse of ``text[start:end]``; positions in nodes and errors refer to ``text``."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text = text
        self.lex = Lexer(text, start, end)
        self._nesting = -1  # the nesting level of the innermost expr() call; 0 at the top

    # -- helpers ----------------------------------------------------------------------

    def error(self, token: Token, expected: str, note: str = "") -> ParseError:
        """A ParseError at ``token``: what was expected, what was found."""
        message = f"expected {expected}, found {token.describe()}{note}"
        return ParseError(message, text=self.text, position=token.pos, expected=expected)

    def expect_punct(self, text: str, expected: str) -> Token:
        token = self.lex.next()
        if not token.is_punct(text):
            raise self.error(token, expected)
        return token

    def separator(self, expected: str) -> bool:
        """Consume ',' (True) or the end (False) after a list item; else fail."""
        token = self.lex.next()
        if token.kind is Kind.EOF:
            return False
        if not token.is_punct(","):
            raise self.error(token, expected)
        return True

    def node(
        self, node: ast.Node, at: int, *children: _Operand, predicate: bool = False
    ) -> _Operand:
        """Wrap a node built over ``children``, refusing trees deeper than MAX_DEPTH
        (``at`` is the position of the operator that would make it too deep)."""
        depth = 1 + max((child.depth for child in children), default=0)
        if depth > MAX_DEPTH:
            message = (
                f"expression too deep: more than {MAX_DEPTH} nested operations"
                " (a long AND/OR chain can often be written with IN (...))"
            )
            raise ParseError(
                message, text=self.text, position=at, expected="a shallower expression"
            )
        return _Operand(node, depth, predicate)

    # -- expressions ------------------------------------------------------------------

    def expr(self, min_prec: int = _OR) -> _Operand:
        """Parse operators of precedence >= ``min_prec``; stop before anything else."""
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            token = self.lex.peek()
            message = f"expression nested too deeply (more than {MAX_DEPTH} levels)"
            raise ParseError(message, text=self.text, position=token.pos, expected="less nesting")
        ops: list[_Pending] = []
        operands: list[_Operand] = []
        while True:
            token = self.lex.peek()
            if token.word == "NOT" and min_prec <= _NOT and (not ops or ops[-1].prec <= _NOT):
                self.lex.next()
                ops.append(_Pending("NOT", _NOT, token.pos, prefix=True))
                continue
            if token.is_punct("-", "+"):
                self.lex.next()
                ops.append(_Pending(token.text, _UNARY, token.pos, prefix=True))
                continue
            operands.append(self.primary())
            if not self._operators(ops, operands, min_prec):
                break
        self._reduce(ops, operands, 0)
        self._nesting -= 1
        return operands[0]

    def _operators(self, ops: list[_Pending], operands: list[_Operand], min_prec: int) -> bool:
        """Consume postfix predicates, then one binary operator (True) or nothing (False)."""
        while True:
            token = self.lex.peek()
            if token.kind is Kind.PUNCT:
                found = _PUNCT_OPS.get(token.text)
            else:
                found = _WORD_OPS.get(token.word)
            if found is not None and found[1] >= min_prec:
                op, prec = found
                self._reduce(ops, operands, prec)
                if prec == _PRED:
                    self._check_chain(operands[-1], token)
                self.lex.next()
                ops.append(_Pending(op, prec, token.pos, prefix=False))
                return True
            if token.word not in _PREDICATE_WORDS or min_prec > _PRED:
                return False
            self._reduce(ops, operands, _PRED)
            self._check_chain(operands[-1], token)
            operands[-1] = self.predicate(operands[-1])

    def _check_chain(self, left: _Operand, token: Token) -> None:
        if left.predicate:
            note = " (comparisons do not chain: combine them with AND or use parentheses)"
            raise self.error(token, "AND, OR, ')' or end of expression", note)

    def _reduce(self, ops: list[_Pending], operands: list[_Operand], prec: int) -> None:
        """Apply stacked operators that bind at least as tightly as ``prec``."""
        while ops and ops[-1].prec >= prec:
            pending = ops.pop()
            if not pending.prefix:
                right = operands.pop()
                left = operands.pop()
                node = ast.Binary(left.node.pos, pending.op, left.node, right.node, pending.pos)
                at_pred = pending.prec == _PRED
                operands.append(self.node(node, pending.pos, left, right, predicate=at_pred))
                continue
            operand = operands.pop()
            value = operand.node.value if isinstance(operand.node, ast.Literal) else None
            if pending.op == "-" and isinstance(value, int | float) and not isinstance(value, bool):
                # -5 is the literal -5 (AMPS integer syntax has an optional leading '-').
                operands.append(_Operand(ast.Literal(pending.pos, -value)))
                continue
            unary = ast.Unary(pending.pos, _UNARY_OPS[pending.op], operand.node)
            operands.append(self.node(unary, pending.pos, operand))

    def predicate(self, left: _Operand) -> _Operand:
        """Parse the predicate whose first word is next, applied to ``left``."""
        operand = left.node
        pos = operand.pos
        token = self.lex.next()
        at = token.pos
        if token.word == "IS":
            token = self.lex.next()
            negated = token.word == "NOT"
            if negated:
                token = self.lex.next()
            if token.word == "NULL":
                return self.node(ast.IsNull(pos, operand, negated), at, left, predicate=True)
            if token.word == "NAN":
                return self.node(ast.IsNan(pos, operand, negated), at, left, predicate=True)
            expected = "NULL or NAN after IS NOT" if negated else "NOT, NULL or NAN after IS"
            raise self.error(token, expected)
        negated = token.word == "NOT"
        if negated:
            token = self.lex.next()
            if token.word == "NULL":
                return self.node(ast.IsNull(pos, operand, True), at, left, predicate=True)
        word = token.word
        if word == "BETWEEN":
            low = self.expr(_ADD)
            closing = self.lex.next()
            if closing.word != "AND":
                raise self.error(closing, "an arithmetic operator or the AND of BETWEEN ... AND")
            high = self.expr(_ADD)
            node: ast.Node = ast.Between(pos, operand, low.node, high.node, negated)
            return self.node(node, at, left, low, high, predicate=True)
        if word == "IN":
            items = self.items("IN")
            node = ast.In(pos, operand, tuple(item.node for item in items), negated)
            return self.node(node, at, left, *items, predicate=True)
        if word == "LIKE":
            pattern = self.lex.next()
            if pattern.kind is not Kind.STRING:
                raise self.error(pattern, "a string literal pattern after LIKE")
            node = ast.Like(pos, operand, pattern.pattern, pattern.raw, negated)
            return self.node(node, at, left, predicate=True)
        if word in ("BEGINS", "ENDS"):
            with_token = self.lex.next()
            if with_token.word != "WITH":
                raise self.error(with_token, f"WITH after {word}")
            kind: Literal["BEGINS", "ENDS"] = "BEGINS" if word == "BEGINS" else "ENDS"
            items = self.items(f"{word} WITH")
            node = ast.Affix(pos, kind, operand, tuple(item.node for item in items), negated)
            return self.node(node, at, left, *items, predicate=True)
        raise self.error(token, f"{_NEGATABLE} after NOT")

    def items(self, what: str) -> list[_Operand]:
        """Parse the parenthesised, non-empty item list of ``what`` (IN, BEGINS WITH...)."""
        self.expect_punct("(", f"'(' and a list of values after {what}")
        if self.lex.peek().is_punct(")"):
            raise self.error(self.lex.peek(), f"at least one value in the {what} list")
        found: list[_Operand] = []
        while True:
            found.append(self.expr())
            token = self.lex.next()
            if token.is_punct(")"):
                return found
            if not token.is_punct(","):
                raise self.error(token, f"an operator, ',' or ')' in the {what} list")

    def primary(self) -> _Operand:
        """Parse a literal, identifier, function call or parenthesised expression."""
        token = self.lex.next()
        kind = token.kind
        if kind is Kind.NUMBER:
            return _Operand(ast.Literal(token.pos, token.number))
        if kind is Kind.STRING:
            # The empty string is NULL in AMPS.
            return _Operand(ast.Literal(token.pos, token.string or None))
        if kind is Kind.IDENT:
            return _Operand(self.identifier(token, allow_state=True))
        if token.is_punct("("):
            inner = self.expr()
            closing = self.lex.next()
            if not closing.is_punct(")"):
                expected = f"an operator or ')' closing the '(' at position {token.pos}"
                raise self.error(closing, expected)
            return _Operand(inner.node, inner.depth)
        word = token.word
        if word == "NULL":
            return _Operand(ast.Literal(token.pos, None))
        if word in ("TRUE", "FALSE"):
            return _Operand(ast.Literal(token.pos, word == "TRUE"))
        if kind is Kind.WORD and word not in _RESERVED:
            if self.lex.peek().is_punct("("):
                return self.call(token)
            raise self.error(token, OPERAND_EXPECTED, _WORD_NOTE)
        raise self.error(token, OPERAND_EXPECTED, _NOTES.get(word, ""))

    def call(self, name: Token) -> _Operand:
        self.lex.next()  # the '('
        args: list[_Operand] = []
        if self.lex.peek().is_punct(")"):
            self.lex.next()
            return _Operand(ast.Call(name.pos, name.word, ()))
        while True:
            args.append(self.expr())
            token = self.lex.next()
            if token.is_punct(")"):
                node = ast.Call(name.pos, name.word, tuple(arg.node for arg in args))
                return self.node(node, name.pos, *args)
            if not token.is_punct(","):
                raise self.error(token, f"an operator, ',' or ')' in the arguments of {name.word}")

    def identifier(self, token: Token, *, allow_state: bool) -> ast.Identifier:
        """The Identifier of an IDENT token, with a following ``OF CURRENT|PREVIOUS``."""
        node = ast.Identifier(token.pos, token.path, token.steps, token.qualifiers)
        if self.lex.peek().word != "OF":
            return node
        of = self.lex.next()
        if not allow_state:
            note = " (OF CURRENT/PREVIOUS is not allowed here)"
            raise self.error(of, "',' or end of the list", note)
        state = self.lex.next()
        if state.word not in ("CURRENT", "PREVIOUS"):
            raise self.error(state, "CURRENT or PREVIOUS after OF")
        return ast.Identifier(node.pos, node.path, node.steps, node.qualifiers, state.word)

    def ident_token(self, expected: str = "an identifier such as /field") -> Token:
        token = self.lex.next()
        if token.kind is not Kind.IDENT:
            raise self.error(token, expected)
        return token


_WORD_NOTE = " (field names start with '/'; a function name must be followed by '(')"
_NOTES = {
    "NAN": " (NAN is only valid in IS [NOT] NAN; NAN_VALUE() gives NaN)",
    "NOT": " (to negate a condition here, put it in parentheses)",
    "AS": " (AS is only allowed in a projection)",
}
_UNARY_OPS: dict[str, Literal["-", "+", "NOT"]] = {"-": "-", "+": "+", "NOT": "NOT"}


# -- public entry points ----------------------------------------------------------------


def parse(text: str) -> ast.Node:
    """Parse one expression: a content filter or a value expression.

    Returns the syntax tree (positions are offsets into ``text``). Raises ParseError,
    and nothing else, for any text that is not exactly one expression: ``"empty
    expression"`` for empty or blank text, otherwise a message naming what was expected
    and what was found at ``position``. Pure and thread-safe.
    """
    return run(text, "expression", _expression, wrapper=False)


def run(text: str, what: str, body: Callable[[Parser], _T], *, wrapper: bool) -> _T:
    """Parse ``text`` as one ``what`` with ``body`` (``wrapper``: it may be wrapped in
    ``[...]``); every failure is a ParseError."""
    if len(text) > MAX_LENGTH:
        message = (
            f"{what} too long: {len(text):,} characters, above {MAX_LENGTH:,}; shorten it "
            "(split a long IN list over several queries, or use a key or index lookup)"
        )
        raise ParseError(message, text=text, position=-1, expected=f"a shorter {what}")
    lo, hi = _trim(text, 0, len(text))
    try:
        if wrapper and hi - lo >= 2 and text[lo] == "[" and text[hi - 1] == "]":
            return _unwrapped(text, lo, hi, what, body)
        return _body(text, lo, hi, what, body)
    except RecursionError as exc:
        # MAX_DEPTH keeps parses well inside the default stack limit; this only fires
        # when the caller is itself deep in the stack, and must still be a ParseError.
        message = "expression nested too deeply for the available stack"
        raise ParseError(message, text=text, position=0) from exc


def _unwrapped(text: str, lo: int, hi: int, what: str, body: Callable[[Parser], _T]) -> _T:
    """Read ``[...]`` as a wrapped list; failing that, as a list starting with a bracketed
    identifier (``[/a b], /c`` or ``[ORDERS].[/x]``). One ``[/...]`` spanning the text
    whose name holds ',' or '/' is a mistyped list, never a field name."""
    try:
        return _body(text, lo + 1, hi - 1, what, body)
    except ParseError as inner:
        single = text.startswith("/", lo + 1) and text.find("]", lo) == hi - 1
        if single and any(ch in text[lo + 2 : hi - 1] for ch in ",/"):
            raise
        try:
            return body(Parser(text, lo, hi))
        except ParseError:
            raise inner from None


def _body(text: str, lo: int, hi: int, what: str, body: Callable[[Parser], _T]) -> _T:
    lo, hi = _trim(text, lo, hi)
    if lo == hi:
        raise ParseError(f"empty {what}", text=text, position=hi, expected=what)
    return body(Parser(text, lo, hi))


def _trim(text: str, lo: int, hi: int) -> tuple[int, int]:
    while lo < hi and text[lo].isspace():
        lo += 1
    while hi > lo and text[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _expression(p: Parser) -> ast.Node:
    node = p.expr().node
    token = p.lex.peek()
    if token.kind is not Kind.EOF:
        raise p.error(token, "an operator or end of expression", _NOTES.get(token.word, ""))
    return node
