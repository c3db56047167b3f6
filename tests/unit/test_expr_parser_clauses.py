"""The parsers of the other expression-valued options: projections (``AS``, ``HINT``),
groupings and OrderBy keys, their trees and their errors.

Trees are compared with positions zeroed (``strip``) except in the tests about positions.
"""

from __future__ import annotations

import pytest

from processor.errors import ParseError
from processor.expr import ast
from processor.expr.clauses import parse_grouping, parse_order_by, parse_projection
from tests.unit.expr_helpers import A, B, X, binary, call, idf, lit, strip


def field(expr: ast.Node, target: ast.Identifier, *hints: str) -> ast.Field:
    return ast.Field(0, expr, target, hints)


PROJECTIONS = [
    ("/a", (field(A, A),)),
    ("/price * /qty AS /total", (field(binary("*", idf("/price"), idf("/qty")), idf("/total")),)),
    (
        "SUM(/detail/qty) AS /detail/qty",
        (field(call("SUM", idf("/detail/qty")), idf("/detail/qty")),),
    ),
    (
        "[MAX(/price) AS /max,/tickerId as /ticker]",
        (field(call("MAX", idf("/price")), idf("/max")), field(idf("/tickerId"), idf("/ticker"))),
    ),
    (
        " [ /a , F(/b, 1) AS /c ] ",
        (field(A, A), field(call("F", B, lit(1)), idf("/c"))),
    ),
    (
        "IF(/x IN ('a','e'), /x, NULL) AS /x HINT OPTIONAL",
        (field(call("IF", ast.In(0, X, (lit("a"), lit("e"))), X, lit(None)), X, "OPTIONAL"),),
    ),
    ("/a AS /b HINT SET_CURRENT,OPTIONAL", (field(A, B, "SET_CURRENT", "OPTIONAL"),)),
    (
        "/a AS /b hint optional, /x, 1 AS /c",
        (field(A, B, "OPTIONAL"), field(X, X), field(lit(1), idf("/c"))),
    ),
    (
        "/a AS /b HINT OPTIONAL, SET_CURRENT, /x",
        (field(A, B, "OPTIONAL", "SET_CURRENT"), field(X, X)),
    ),
    ("[ORDERS]./a", (field(idf("/a", qualifiers=("ORDERS",)), A),)),
    (
        "[ORDERS].[/a b]",
        (field(idf("[/a b]", "a b", qualifiers=("ORDERS",)), idf("[/a b]", "a b")),),
    ),
    (
        "[ORDERS].[/x], [ORDERS]./y",
        (
            field(idf("[/x]", "x", qualifiers=("ORDERS",)), idf("[/x]", "x")),
            field(idf("/y", qualifiers=("ORDERS",)), idf("/y")),
        ),
    ),
    (
        "[/Not Xpath Name]",
        (
            field(
                idf("[/Not Xpath Name]", "Not Xpath Name"),
                idf("[/Not Xpath Name]", "Not Xpath Name"),
            ),
        ),
    ),
    (
        "[[/a b], /c]",
        (field(idf("[/a b]", "a b"), idf("[/a b]", "a b")), field(idf("/c"), idf("/c"))),
    ),
    ("/x OF PREVIOUS AS /y", (field(idf("/x", state="PREVIOUS"), idf("/y")),)),
    ("/x OF CURRENT", (field(idf("/x", state="CURRENT"), X),)),
    ("/a = 1 AS /flag", (field(binary("=", A, lit(1)), idf("/flag")),)),
]


@pytest.mark.parametrize(("text", "expected"), PROJECTIONS)
def test_projection(text: str, expected: tuple[ast.Field, ...]) -> None:
    assert strip(parse_projection(text)) == expected


def test_projection_positions() -> None:
    (first, second) = parse_projection("[/a, SUM(/b) AS /c]")
    assert (first.pos, first.expr.pos, first.target.pos) == (1, 1, 1)
    assert (second.pos, second.target.pos) == (5, 16)


PROJECTION_ERRORS = [
    ("", 0, "empty projection"),
    ("[ ]", 2, "empty projection"),
    ("SUM(/x)", 7, "a projection field needs AS /target"),
    ("/a, 1 + 2, /c", 9, "a projection field needs AS /target"),
    ("/a AS b", 6, "expected an identifier such as /target after AS"),
    ("/a AS [T]./b", 6, "cannot be qualified"),
    ("/a AS /b OF CURRENT", 9, "not allowed on the target of AS"),
    ("/a AS /b HINT FAST", 14, "expected a hint (OPTIONAL or SET_CURRENT)"),
    ("/a AS /b HINT OPTIONAL, OPTIONAL", 24, "each at most once"),
    ("/a AS /b /c", 9, "HINT, ',' or end of projection"),
    ("/a foo", 3, "expected an operator, AS, ',' or end of projection"),
    ("/a,", 3, "found end of expression"),
    ("[/a /b]", 5, "expected an operand (literal, identifier, function call or '('), found 'b'"),
    ("[/a AS /b, SUM(/x) /s]", 20, "expected an operand"),
    ("[/a, /b", 0, "unterminated '['"),
]


@pytest.mark.parametrize(("text", "position", "message"), PROJECTION_ERRORS)
def test_projection_error(text: str, position: int, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_projection(text)
    assert caught.value.position == position, caught.value
    assert message in caught.value.reason


GROUPINGS = [
    ("/tickerId", (idf("/tickerId"),)),
    ("[/tickerId]", (idf("/tickerId"),)),
    ("[/a, /b/c]", (A, idf("/b/c"))),
    ("/a,[ORDERS]./b", (A, idf("/b", qualifiers=("ORDERS",)))),
    ("[/a b]", (idf("[/a b]", "a b"),)),
    ("[[/a b]]", (idf("[/a b]", "a b"),)),
    ("[ORDERS].[/a b], /c", (idf("[/a b]", "a b", qualifiers=("ORDERS",)), idf("/c"))),
]


@pytest.mark.parametrize(("text", "expected"), GROUPINGS)
def test_grouping(text: str, expected: tuple[ast.Identifier, ...]) -> None:
    assert strip(parse_grouping(text)) == expected


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 0, "empty grouping"),
        ("[]", 1, "empty grouping"),
        ("/a, SUM(/b)", 4, "expected an identifier such as /field, found 'SUM'"),
        ("/a /b", 3, "expected ',' or end of grouping, found '/'"),
        ("/a,,/b", 3, "expected an identifier"),
        ("/a OF CURRENT", 3, "OF CURRENT/PREVIOUS is not allowed here"),
        ("[/a /b]", 4, "expected ',' or end of grouping"),
    ],
)
def test_grouping_error(text: str, position: int, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_grouping(text)
    assert caught.value.position == position, caught.value
    assert message in caught.value.reason


def key(ident: ast.Identifier, *, descending: bool = False, text: bool = False) -> ast.OrderKey:
    return ast.OrderKey(0, ident, descending, text)


ORDER_BYS = [
    ("/id", (key(idf("/id")),)),
    (
        "/orderDate DESC, /customerName ASC",
        (key(idf("/orderDate"), descending=True), key(idf("/customerName"))),
    ),
    (
        "/orderId TEXT, /updateTimestamp desc",
        (key(idf("/orderId"), text=True), key(idf("/updateTimestamp"), descending=True)),
    ),
    ("/a desc text", (key(A, descending=True, text=True),)),
    ("/a TEXT DESC", (key(A, descending=True, text=True),)),
    ("[/a b] asc,/c", (key(idf("[/a b]", "a b")), key(idf("/c")))),
]


@pytest.mark.parametrize(("text", "expected"), ORDER_BYS)
def test_order_by(text: str, expected: tuple[ast.OrderKey, ...]) -> None:
    assert strip(parse_order_by(text)) == expected


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 0, "empty OrderBy"),
        ("/a UP", 3, "expected ASC, DESC, TEXT, ',' or end of OrderBy, found 'UP'"),
        ("/a DESC ASC", 8, "expected ASC, DESC, TEXT, ',' or end of OrderBy"),
        ("/a TEXT TEXT", 8, "expected ASC, DESC, TEXT"),
        ("DESC", 0, "expected an identifier"),
        ("[/a]", 4, None),
    ],
)
def test_order_by_error(text: str, position: int, message: str | None) -> None:
    if message is None:  # OrderBy takes no [...] wrapper: [/a] is a bracketed name
        assert strip(parse_order_by(text)) == (key(idf("[/a]", "a")),)
        return
    with pytest.raises(ParseError) as caught:
        parse_order_by(text)
    assert caught.value.position == position, caught.value
    assert message in caught.value.reason
