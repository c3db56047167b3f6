"""The AMPS clauses that are not expressions: a projection (``expr AS /target HINT ...``),
a grouping (identifiers) and an OrderBy (``identifier [ASC|DESC] [TEXT]``), parsed with
the expression parser (:mod:`processor.expr.parser`). Pure and thread-safe."""

from __future__ import annotations

from processor.errors import ParseError
from processor.expr import ast
from processor.expr.lexer import Kind
from processor.expr.parser import Parser, run

_HINTS = ("OPTIONAL", "SET_CURRENT")


def parse_projection(text: str) -> tuple[ast.Field, ...]:
    """Parse a projection: ``expr AS /target [HINT OPTIONAL|SET_CURRENT[, ...]], ...``.

    A bare identifier (no AS) copies to its own path: ``Field(pos, ident, ident, ())``
    (qualifiers and OF CURRENT/PREVIOUS are dropped from such a target); any other
    expression without AS is an error. The list may be wrapped in ``[...]`` (the AMPS
    option form ``projection=[...]``). Raises ParseError, and nothing else, on bad text.
    """
    return run(text, "projection", _projection, wrapper=True)


def parse_grouping(text: str) -> tuple[ast.Identifier, ...]:
    """Parse a grouping: comma-separated identifiers, optionally wrapped in ``[...]``.

    Qualified identifiers are allowed; OF CURRENT/PREVIOUS is not. Raises ParseError,
    and nothing else, on bad text.
    """
    return run(text, "grouping", _grouping, wrapper=True)


def parse_order_by(text: str) -> tuple[ast.OrderKey, ...]:
    """Parse an OrderBy: comma-separated ``identifier [ASC|DESC] [TEXT]`` (any case).

    ``TEXT`` may also precede the direction; each appears at most once per key. Raises
    ParseError, and nothing else, on bad text.
    """
    return run(text, "OrderBy", _order_by, wrapper=False)


def _projection(p: Parser) -> tuple[ast.Field, ...]:
    fields: list[ast.Field] = []
    while True:
        fields.append(_field(p))
        if not p.separator("HINT, ',' or end of projection"):
            return tuple(fields)


def _field(p: Parser) -> ast.Field:
    expr = p.expr().node
    token = p.lex.peek()
    if token.word == "AS":
        p.lex.next()
        target = p.ident_token("an identifier such as /target after AS")
        if target.qualifiers:
            message = "the target of AS is a path in the output and cannot be qualified"
            raise ParseError(message, text=p.text, position=target.pos, expected="/target")
        if p.lex.peek().word == "OF":
            note = " (OF CURRENT/PREVIOUS is not allowed on the target of AS)"
            raise p.error(p.lex.peek(), "HINT, ',' or end of projection", note)
        hints = _hints(p)
        return ast.Field(
            expr.pos, expr, ast.Identifier(target.pos, target.path, target.steps), hints
        )
    if token.kind is not Kind.EOF and not token.is_punct(","):
        raise p.error(token, "an operator, AS, ',' or end of projection")
    if isinstance(expr, ast.Identifier):
        plain = ast.Identifier(expr.pos, expr.path, expr.steps)
        return ast.Field(expr.pos, expr, expr if expr == plain else plain, ())
    message = f"a projection field needs AS /target: expected AS, found {token.describe()}"
    raise ParseError(message, text=p.text, position=token.pos, expected="AS /target")


def _hints(p: Parser) -> tuple[str, ...]:
    if p.lex.peek().word != "HINT":
        return ()
    p.lex.next()
    hints: list[str] = []
    while True:
        token = p.lex.next()
        if token.word not in _HINTS or token.word in hints:
            raise p.error(token, "a hint (OPTIONAL or SET_CURRENT), each at most once")
        hints.append(token.word)
        # A comma continues the hint list only before another hint; otherwise it
        # separates projection fields.
        following = p.lex.peek(1)
        if not (
            p.lex.peek().is_punct(",")
            and following.word in _HINTS
            and not p.lex.peek(2).is_punct("(")
        ):
            return tuple(hints)
        p.lex.next()


def _grouping(p: Parser) -> tuple[ast.Identifier, ...]:
    found: list[ast.Identifier] = []
    while True:
        found.append(p.identifier(p.ident_token(), allow_state=False))
        if not p.separator("',' or end of grouping"):
            return tuple(found)


def _order_by(p: Parser) -> tuple[ast.OrderKey, ...]:
    keys: list[ast.OrderKey] = []
    while True:
        field = p.identifier(p.ident_token(), allow_state=False)
        direction: str | None = None
        text = False
        while True:
            word = p.lex.peek().word
            if word in ("ASC", "DESC") and direction is None:
                direction = word
            elif word == "TEXT" and not text:
                text = True
            else:
                break
            p.lex.next()
        keys.append(ast.OrderKey(field.pos, field, direction == "DESC", text))
        if not p.separator("ASC, DESC, TEXT, ',' or end of OrderBy"):
            return tuple(keys)
