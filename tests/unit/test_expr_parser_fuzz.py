"""Fuzzing the AMPS expression parsers: arbitrary text and token soup raise nothing but
ParseError (with a position inside the text), and random valid trees printed back as
text parse to the same tree."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import ParseError
from processor.expr import ast
from processor.expr.clauses import parse_grouping, parse_order_by, parse_projection
from processor.expr.parser import parse
from tests.unit.expr_helpers import strip


def unparse(node: ast.Node) -> str:
    """Print a tree back as fully parenthesised source text."""
    match node:
        case ast.Literal(value=None):
            return "NULL"
        case ast.Literal(value=bool() as flag):
            return "TRUE" if flag else "FALSE"
        case ast.Literal(value=str() as text):
            return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
        case ast.Literal(value=value):
            return repr(value)
        case ast.Identifier():
            prefix = "".join(f"[{q}]." for q in node.qualifiers)
            suffix = f" OF {node.state}" if node.state else ""
            return prefix + node.path + suffix
        case ast.Unary():
            return f"({node.op} {unparse(node.operand)})"
        case ast.Binary():
            return f"({unparse(node.left)} {node.op} {unparse(node.right)})"
        case ast.Between():
            neg = "NOT " if node.negated else ""
            parts = (unparse(node.operand), unparse(node.low), unparse(node.high))
            return f"({parts[0]} {neg}BETWEEN {parts[1]} AND {parts[2]})"
        case ast.In():
            neg = "NOT " if node.negated else ""
            return f"({unparse(node.operand)} {neg}IN ({_list(node.items)}))"
        case ast.Like():
            neg = "NOT " if node.negated else ""
            pattern = f"r'{node.pattern}'" if node.raw else f"'{node.pattern}'"
            return f"({unparse(node.operand)} {neg}LIKE {pattern})"
        case ast.Affix():
            neg = "NOT " if node.negated else ""
            return f"({unparse(node.operand)} {neg}{node.kind} WITH ({_list(node.items)}))"
        case ast.IsNull():
            return f"({unparse(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
        case ast.IsNan():
            return f"({unparse(node.operand)} IS {'NOT ' if node.negated else ''}NAN)"
        case ast.Call():
            return f"{node.name}({_list(node.args)})"
        case ast.Field():
            hints = f" HINT {', '.join(node.hints)}" if node.hints else ""
            return f"{unparse(node.expr)} AS {unparse(node.target)}{hints}"
    raise AssertionError(f"cannot unparse {node!r}")


def _list(nodes: tuple[ast.Node, ...]) -> str:
    return ", ".join(unparse(item) for item in nodes)


TOKENS = [
    "/a", "/b/c", "/", "/6", "*", "/14", "[", "]", "[/x y]", "[T].", ".", "(", ")", ",",
    "=", "==", "!=", "<>", "<", "<=", ">", ">=", "+", "-", "%", "MOD", "AND", "OR", "NOT",
    "IS", "NULL", "NAN", "BETWEEN", "IN", "LIKE", "BEGINS", "ENDS", "WITH", "AS", "HINT",
    "OPTIONAL", "SET_CURRENT", "OF", "CURRENT", "ASC", "DESC", "TEXT", "IF", "F", "TRUE",
    "1", "2.5", "1e3", ".5", "'s'", '"d"', "r'x'", "''", "'\\", "'", "\\", "@", "[0]", " ",
    "  ", "\t", "#", "!", "é", "x",
]  # fmt: skip
PARSERS = (parse, parse_projection, parse_grouping, parse_order_by)


def _check_only_parse_errors(text: str) -> None:
    for parser in PARSERS:
        try:
            result: object = parser(text)
        except ParseError as exc:
            result = exc
        if isinstance(result, ParseError):
            assert 0 <= result.position <= len(text), (text, result.position)
            assert result.reason
        else:
            assert isinstance(result, ast.Node | tuple)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_arbitrary_text(text: str) -> None:
    _check_only_parse_errors(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=25), st.sampled_from(["", " "]))
def test_fuzz_token_soup(tokens: list[str], glue: str) -> None:
    _check_only_parse_errors(glue.join(tokens))


# Valid trees, in the parser's normal form (``-`` of a number literal is folded).

_STEP = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=5)
_NAME = st.one_of(_STEP, _STEP.map(lambda s: "@" + s))
_INDEX = st.integers(0, 99)


@st.composite
def identifiers(draw: st.DrawFn) -> ast.Identifier:
    """Random identifiers: path spelling and steps agree, optional qualifiers and state."""
    first: str
    if draw(st.booleans()):
        first = draw(st.text(string.ascii_letters + " /,.&", min_size=1, max_size=8))
        path = f"[/{first}]"
    else:
        first = draw(_NAME)
        path = f"/{first}"
    steps: list[ast.Step] = [first]
    for step in draw(st.lists(st.one_of(_NAME, _INDEX), max_size=4)):
        path += f"[{step}]" if isinstance(step, int) else f"/{step}"
        steps.append(step)
    qualifier = st.text(string.ascii_letters + "_ ", min_size=1, max_size=6)
    qualifiers = tuple(draw(st.lists(qualifier, max_size=2)))
    state = draw(st.sampled_from([None, None, "CURRENT", "PREVIOUS"]))
    return ast.Identifier(0, path, tuple(steps), qualifiers, state)


_LITERALS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(min_size=1, max_size=8),
    st.sampled_from([None, True, False]),
).map(lambda value: ast.Literal(0, value))
_PATTERN = st.lists(
    st.one_of(
        st.sampled_from(list("ab.*+?()[]^$| ")),
        st.sampled_from(list("1d.+x(")).map(lambda c: "\\" + c),
    ),
    max_size=6,
).map("".join)
_RAW_PATTERN = st.text(string.ascii_letters + "+*.\\()", max_size=6)
_FUNCTIONS = st.sampled_from(["IF", "COALESCE", "SUM", "F_1", "UPPER"])


def _compound(children: st.SearchStrategy[ast.Node]) -> st.SearchStrategy[ast.Node]:
    items = st.lists(children, min_size=1, max_size=3).map(tuple)
    ops = st.sampled_from(ast.ARITHMETIC_OPS + ast.COMPARISON_OPS + ast.LOGICAL_OPS)
    negated = st.booleans()
    return st.one_of(
        st.builds(
            lambda op, x: ast.Unary(0, op, x), st.sampled_from(["-", "+", "NOT"]), children
        ).filter(
            lambda u: (
                not (
                    u.op == "-"
                    and isinstance(u.operand, ast.Literal)
                    and type(u.operand.value) in (int, float)
                )
            )
        ),
        st.builds(lambda op, a, b: ast.Binary(0, op, a, b, 0), ops, children, children),
        st.builds(
            lambda a, b, c, n: ast.Between(0, a, b, c, n), children, children, children, negated
        ),
        st.builds(lambda a, i, n: ast.In(0, a, i, n), children, items, negated),
        st.builds(lambda a, p, n: ast.Like(0, a, p, False, n), children, _PATTERN, negated),
        st.builds(lambda a, p, n: ast.Like(0, a, p, True, n), children, _RAW_PATTERN, negated),
        st.builds(
            lambda k, a, i, n: ast.Affix(0, k, a, i, n),
            st.sampled_from(["BEGINS", "ENDS"]),
            children,
            items,
            negated,
        ),
        st.builds(lambda a, n: ast.IsNull(0, a, n), children, negated),
        st.builds(lambda a, n: ast.IsNan(0, a, n), children, negated),
        st.builds(
            lambda f, a: ast.Call(0, f, tuple(a)), _FUNCTIONS, st.lists(children, max_size=3)
        ),
    )


TREES = st.recursive(st.one_of(_LITERALS, identifiers()), _compound, max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TREES)
def test_fuzz_round_trip(tree: ast.Node) -> None:
    text = unparse(tree)
    parsed = parse(text)
    assert strip(parsed) == strip(tree), text
    assert strip(parse(unparse(parsed))) == strip(tree)


@st.composite
def projections(draw: st.DrawFn) -> tuple[ast.Field, ...]:
    """Random projection lists (targets carry no qualifiers or state)."""
    hint_lists = st.sampled_from([(), ("OPTIONAL",), ("SET_CURRENT", "OPTIONAL")])
    fields = []
    for _ in range(draw(st.integers(1, 3))):
        target = draw(identifiers())
        plain = ast.Identifier(0, target.path, target.steps)
        fields.append(ast.Field(0, draw(TREES), plain, draw(hint_lists)))
    return tuple(fields)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(projections(), st.booleans())
def test_fuzz_projection_round_trip(fields: tuple[ast.Field, ...], wrapped: bool) -> None:
    text = ", ".join(unparse(f) for f in fields)
    if wrapped:
        text = f"[{text}]"
    assert strip(parse_projection(text)) == strip(fields), text
