"""The AMPS expression parser: trees for every construct, error positions, and fuzzing.

Trees are compared with positions zeroed (``strip``) except in the tests about positions.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import ExpressionError, ParseError
from processor.expr import ast
from processor.expr.parser import (
    MAX_DEPTH,
    parse,
    parse_grouping,
    parse_order_by,
    parse_projection,
)

# -- helpers ------------------------------------------------------------------------------


def strip(node: object) -> object:
    """``node`` with every ``pos``/``op_pos`` set to 0, recursively (tuples too)."""
    if isinstance(node, tuple):
        return tuple(strip(item) for item in node)
    if not isinstance(node, ast.Node):
        return node
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(node):
        if field.name in ("pos", "op_pos"):
            changes[field.name] = 0
        else:
            changes[field.name] = strip(getattr(node, field.name))
    return dataclasses.replace(node, **changes)


def idf(
    path: str, *steps: ast.Step, qualifiers: tuple[str, ...] = (), state: str | None = None
) -> ast.Identifier:
    """An Identifier; ``steps`` default to the names between the slashes of ``path``."""
    if not steps:
        steps = tuple(path.split("/")[1:])
    return ast.Identifier(0, path, steps, qualifiers, state)


def lit(value: object) -> ast.Literal:
    return ast.Literal(0, value)


def binary(op: str, left: ast.Node, right: ast.Node) -> ast.Binary:
    return ast.Binary(0, op, left, right, 0)


def unary(op: str, operand: ast.Node) -> ast.Unary:
    return ast.Unary(0, op, operand)  # type: ignore[arg-type]


def call(name: str, *args: ast.Node) -> ast.Call:
    return ast.Call(0, name, args)


A, B, X = idf("/a"), idf("/b"), idf("/x")


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


# -- trees --------------------------------------------------------------------------------

IDENTIFIERS = [
    ("/a/b/c", idf("/a/b/c")),
    ("/Order/Symbol", idf("/Order/Symbol")),
    ("/Order/@update", idf("/Order/@update")),
    ("/@attr", idf("/@attr")),
    ("/55", idf("/55")),
    ("/data[0]", idf("/data[0]", "data", 0)),
    ("/outer/compound/C/C1[0]", idf("/outer/compound/C/C1[0]", "outer", "compound", "C", "C1", 0)),
    ("/a[0]/b", idf("/a[0]/b", "a", 0, "b")),
    ("/a[1][2]", idf("/a[1][2]", "a", 1, 2)),
    ("/a[-1]", idf("/a[-1]", "a", -1)),
    ("/a-b", idf("/a-b")),
    ("/a.b_c", idf("/a.b_c")),
    ("/ünïcode", idf("/ünïcode")),
    ("[/Not Xpath Name]", idf("[/Not Xpath Name]", "Not Xpath Name")),
    ("[/a/b]", idf("[/a/b]", "a/b")),
    ("[/a b]/c[0]", idf("[/a b]/c[0]", "a b", "c", 0)),
    ("[ORDERS]./Tick", idf("/Tick", qualifiers=("ORDERS",))),
    ("[Orders].[/CustomerID]", idf("[/CustomerID]", "CustomerID", qualifiers=("Orders",))),
    ("[nvfix].[ORDERS]./ClientId", idf("/ClientId", qualifiers=("nvfix", "ORDERS"))),
    (
        "[nvfix].[ORDERS].[/Client Id]",
        idf("[/Client Id]", "Client Id", qualifiers=("nvfix", "ORDERS")),
    ),
    ("/x OF CURRENT", idf("/x", state="CURRENT")),
    ("/x of previous", idf("/x", state="PREVIOUS")),
]

LITERALS = [
    ("'text'", lit("text")),
    ('"text"', lit("text")),
    ("''", lit(None)),
    ('""', lit(None)),
    ("r'a\\b'", lit("a\\b")),
    ('R"C++"', lit("C++")),
    ("r''", lit(None)),
    (r"'\a\b\t\n\f\r'", lit("\a\b\t\n\f\r")),
    (r"'\x41\x4a\x4'", lit("AJ\x04")),
    (r"'\xZ'", lit("xZ")),
    (r"'\101\0\7'", lit("A\x00\x07")),
    (r"'\777'", lit("?7")),
    (r"'it\'s'", lit("it's")),
    (r'"say \"hi\""', lit('say "hi"')),
    (r"'back\\slash'", lit("back\\slash")),
    (r"'\q\1'", lit("q\x01")),
    ("'a\"b'", lit('a"b')),
    ("42", lit(42)),
    ("18446744073709551610", lit(18446744073709551610)),
    ("123456789012345678901234567890", lit(123456789012345678901234567890)),
    ("98.6", lit(98.6)),
    ("-273.0", lit(-273.0)),
    ("31.4e-1", lit(3.14)),
    ("6.022E23", lit(6.022e23)),
    ("2.998e8", lit(2.998e8)),
    ("1e+3", lit(1000.0)),
    (".5", lit(0.5)),
    ("5.", lit(5.0)),
    ("-5", lit(-5)),
    ("- 5", lit(-5)),
    ("-(5)", lit(-5)),
    ("- -5", lit(5)),
    ("NULL", lit(None)),
    ("null", lit(None)),
    ("TRUE", lit(True)),
    ("false", lit(False)),
]

OPERATORS = [
    ("/a = 1", binary("=", A, lit(1))),
    ("/a == 1", binary("=", A, lit(1))),
    ("/a != 1", binary("!=", A, lit(1))),
    ("/a <> 1", binary("!=", A, lit(1))),
    ("/a<1", binary("<", A, lit(1))),
    ("/a <= 1", binary("<=", A, lit(1))),
    ("/a > 1", binary(">", A, lit(1))),
    ("/a >= 1", binary(">=", A, lit(1))),
    ("/a == NULL", binary("=", A, lit(None))),
    ("'2.000' <> '2.0'", binary("!=", lit("2.000"), lit("2.0"))),
    ("10 < 'Crank It Up'", binary("<", lit(10), lit("Crank It Up"))),
    ("10 < ''", binary("<", lit(10), lit(None))),
    ("1 / 5", binary("/", lit(1), lit(5))),
    ("1.0/5", binary("/", lit(1.0), lit(5))),
    ("-5 % 3", binary("%", lit(-5), lit(3))),
    ("5 % -3", binary("%", lit(5), lit(-3))),
    ("5 MOD 3", binary("%", lit(5), lit(3))),
    ("5 mod 3", binary("%", lit(5), lit(3))),
    ("/6*/14", binary("*", idf("/6"), idf("/14"))),
    ("/a/b", idf("/a/b")),
    ("/a / /b", binary("/", A, B)),
    ("/a / 2", binary("/", A, lit(2))),
    ("/a /2", binary("/", A, lit(2))),
    ("/a - /b", binary("-", A, B)),
    ("/a -1", binary("-", A, lit(1))),
    ("(/a)/2", binary("/", A, lit(2))),
    ("F(/a)/2", binary("/", call("F", A), lit(2))),
    ("1 + 2 * 3", binary("+", lit(1), binary("*", lit(2), lit(3)))),
    ("(1 + 2) * 3", binary("*", binary("+", lit(1), lit(2)), lit(3))),
    ("1 - 2 - 3", binary("-", binary("-", lit(1), lit(2)), lit(3))),
    ("8 / 4 / 2", binary("/", binary("/", lit(8), lit(4)), lit(2))),
    ("-/a * 2", binary("*", unary("-", A), lit(2))),
    ("- /a", unary("-", A)),
    ("+/a", unary("+", A)),
    ("+5", unary("+", lit(5))),
    ("- - /a", unary("-", unary("-", A))),
    ("/a + 1 = /b * 2", binary("=", binary("+", A, lit(1)), binary("*", B, lit(2)))),
    ("/a = 1 AND /b = 2", binary("AND", binary("=", A, lit(1)), binary("=", B, lit(2)))),
    ("/a = 1 and /b = 2", binary("AND", binary("=", A, lit(1)), binary("=", B, lit(2)))),
    ("/a OR /b AND /x", binary("OR", A, binary("AND", B, X))),
    ("/a AND /b OR /x", binary("OR", binary("AND", A, B), X)),
    ("/a OR /b OR /x", binary("OR", binary("OR", A, B), X)),
    ("NOT /a AND /b", binary("AND", unary("NOT", A), B)),
    ("/a AND NOT /b", binary("AND", A, unary("NOT", B))),
    ("NOT NOT /a", unary("NOT", unary("NOT", A))),
    ("NOT /a = 1", unary("NOT", binary("=", A, lit(1)))),
    ("NOT (/data = 'x')", unary("NOT", binary("=", idf("/data"), lit("x")))),
    ("NOT /x IS NULL", unary("NOT", ast.IsNull(0, X))),
    ("(/a = 1) = (/b = 2)", binary("=", binary("=", A, lit(1)), binary("=", B, lit(2)))),
    ("- (/a + 1) * 2", binary("*", unary("-", binary("+", A, lit(1))), lit(2))),
]

PREDICATES = [
    ("/x IS NULL", ast.IsNull(0, X)),
    ("/x is not null", ast.IsNull(0, X, negated=True)),
    ("/x NOT NULL", ast.IsNull(0, X, negated=True)),
    ("/x IS NAN", ast.IsNan(0, X)),
    ("/x IS NOT NAN", ast.IsNan(0, X, negated=True)),
    ("'' IS NULL", ast.IsNull(0, lit(None))),
    ("/a + 1 IS NULL", ast.IsNull(0, binary("+", A, lit(1)))),
    ("/x BETWEEN 1 AND 2", ast.Between(0, X, lit(1), lit(2))),
    ("/x NOT BETWEEN 1 AND 2", ast.Between(0, X, lit(1), lit(2), negated=True)),
    (
        "(/price * /qty) BETWEEN 0 AND 100000",
        ast.Between(0, binary("*", idf("/price"), idf("/qty")), lit(0), lit(100000)),
    ),
    (
        "/x BETWEEN /a - 1 AND /b * 2 AND /y = 1",
        binary(
            "AND",
            ast.Between(0, X, binary("-", A, lit(1)), binary("*", B, lit(2))),
            binary("=", idf("/y"), lit(1)),
        ),
    ),
    ("/x BETWEEN -1 AND -2", ast.Between(0, X, lit(-1), lit(-2))),
    ("/x IN (1, 'a', NULL)", ast.In(0, X, (lit(1), lit("a"), lit(None)))),
    ("/x NOT IN (1)", ast.In(0, X, (lit(1),), negated=True)),
    ("1 IN (/array)", ast.In(0, lit(1), (idf("/array"),))),
    (
        "/21964 IN (/14*5, /6*/14, 1000, 2000)",
        ast.In(
            0,
            idf("/21964"),
            (
                binary("*", idf("/14"), lit(5)),
                binary("*", idf("/6"), idf("/14")),
                lit(1000),
                lit(2000),
            ),
        ),
    ),
    (
        "/x IN (/a = 1 OR /b, F(1, 2))",
        ast.In(0, X, (binary("OR", binary("=", A, lit(1)), B), call("F", lit(1), lit(2)))),
    ),
    ("NOT /data IN ('a')", unary("NOT", ast.In(0, idf("/data"), (lit("a"),)))),
    ("/data LIKE 'z'", ast.Like(0, idf("/data"), "z")),
    ("/other[1] LIKE '4'", ast.Like(0, idf("/other[1]", "other", 1), "4")),
    ("/c LIKE '(?i)^us$'", ast.Like(0, idf("/c"), "(?i)^us$")),
    (r"/c LIKE '(.)\1'", ast.Like(0, idf("/c"), r"(.)\1")),
    (r"/c LIKE 'C\+\+'", ast.Like(0, idf("/c"), r"C\+\+")),
    (r"/c LIKE '^90\..*'", ast.Like(0, idf("/c"), r"^90\..*")),
    (r"/c LIKE 'it\'s\\'", ast.Like(0, idf("/c"), r"it's\\")),
    (r'/c LIKE "it\'s\""', ast.Like(0, idf("/c"), r"it\'s" + '"')),
    (r"/c LIKE '\x41\101'", ast.Like(0, idf("/c"), r"\x41\101")),
    ("/Language LIKE r'C++'", ast.Like(0, idf("/Language"), "C++", raw=True)),
    (r"/c LIKE R'a\'", ast.Like(0, idf("/c"), "a\\", raw=True)),
    ("/c NOT LIKE 'x'", ast.Like(0, idf("/c"), "x", negated=True)),
    ("/c LIKE ''", ast.Like(0, idf("/c"), "")),
    ("/n BEGINS WITH ('North')", ast.Affix(0, "BEGINS", idf("/n"), (lit("North"),))),
    (
        "/n BEGINS WITH('North', 'South')",
        ast.Affix(0, "BEGINS", idf("/n"), (lit("North"), lit("South"))),
    ),
    ("/n ends with ('x')", ast.Affix(0, "ENDS", idf("/n"), (lit("x"),))),
    (
        "/path NOT BEGINS WITH ('/public/dropbox')",
        ast.Affix(0, "BEGINS", idf("/path"), (lit("/public/dropbox"),), negated=True),
    ),
    ("/n NOT ENDS WITH (/m)", ast.Affix(0, "ENDS", idf("/n"), (idf("/m"),), negated=True)),
]

CALLS = [
    ("NOW()", call("NOW")),
    ("upper(/a)", call("UPPER", A)),
    ("IF(/x, 1, NULL)", call("IF", X, lit(1), lit(None))),
    ("SUM(IF(/x > 1, 1, 0))", call("SUM", call("IF", binary(">", X, lit(1)), lit(1), lit(0)))),
    ("INSTR(/f,'x') != 0", binary("!=", call("INSTR", idf("/f"), lit("x")), lit(0))),
    ("STREQUAL_I(/f, 'x') != 0", binary("!=", call("STREQUAL_I", idf("/f"), lit("x")), lit(0))),
    (
        "COALESCE(/x OF CURRENT, /x OF PREVIOUS, 'd')",
        call("COALESCE", idf("/x", state="CURRENT"), idf("/x", state="PREVIOUS"), lit("d")),
    ),
    ("IF(/suffix NOT NULL, 1, 2)", call("IF", ast.IsNull(0, idf("/suffix"), True), lit(1), lit(2))),
    ("IF(NOT /a, -1, +1)", call("IF", unary("NOT", A), lit(-1), unary("+", lit(1)))),
    ("F ( /a )", call("F", A)),
    ("LOG10(100)", call("LOG10", lit(100))),
]


@pytest.mark.parametrize(
    ("text", "expected"), IDENTIFIERS + LITERALS + OPERATORS + PREDICATES + CALLS
)
def test_tree(text: str, expected: ast.Node) -> None:
    assert strip(parse(text)) == expected


def test_positions() -> None:
    node = parse("/a + F(/b) >= -2 AND NOT /x IS NULL")
    assert node == ast.Binary(
        0,
        "AND",
        ast.Binary(
            0,
            ">=",
            ast.Binary(
                0,
                "+",
                ast.Identifier(0, "/a", ("a",)),
                ast.Call(5, "F", (ast.Identifier(7, "/b", ("b",)),)),
                3,
            ),
            ast.Literal(14, -2),
            11,
        ),
        ast.Unary(21, "NOT", ast.IsNull(25, ast.Identifier(25, "/x", ("x",)))),
        17,
    )


def test_positions_of_predicates_and_qualified_identifiers() -> None:
    node = parse("  [T]./a BETWEEN r'x' AND (1)")
    assert isinstance(node, ast.Between)
    assert (node.pos, node.operand.pos, node.low.pos, node.high.pos) == (2, 2, 17, 27)


# -- errors -------------------------------------------------------------------------------

ERRORS = [
    ("", 0, "empty expression"),
    ("   ", 3, "empty expression"),
    ("/a = = 1", 5, "expected an operand (literal, identifier, function call or '('), found '='"),
    ("/a IN 1", 6, "expected '(' and a list of values after IN, found number 1"),
    ("/a IN ()", 7, "at least one value in the IN list"),
    ("/a IN (1 2)", 9, "expected an operator, ',' or ')' in the IN list, found number 2"),
    ("/a = 'abc", 5, "unterminated string literal"),
    ("/a = 'abc\\'", 5, "unterminated string literal"),
    ("r'abc", 0, "unterminated string literal"),
    (
        "(/a = 1",
        7,
        "expected an operator or ')' closing the '(' at position 0, found end of expression",
    ),
    ("F(/a, 1", 7, "expected an operator, ',' or ')' in the arguments of F"),
    ("F(/a,)", 5, "expected an operand"),
    ("/a LIKE /x", 8, "expected a string literal pattern after LIKE, found identifier /x"),
    ("/a LIKE 1", 8, "expected a string literal pattern after LIKE"),
    ("/a = 1 /b", 8, "expected an operand (literal, identifier, function call or '('), found 'b'"),
    ("/a /b", 4, "found 'b'"),
    ("/a = 1 2", 7, "expected an operator or end of expression, found number 2"),
    ("/a = 1)", 6, "expected an operator or end of expression, found ')'"),
    ("/a # 1", 3, "found unsupported character '#'"),
    (
        "# 1",
        0,
        "expected an operand (literal, identifier, function call or '('), found unsupported",
    ),
    ("/a = 1 = 2", 7, "comparisons do not chain"),
    ("/a IS NULL IS NULL", 11, "comparisons do not chain"),
    ("/a BETWEEN 1 AND 2 = 1", 19, "comparisons do not chain"),
    ("NOT /a = 1 = 2", 11, "comparisons do not chain"),
    ("/a = NOT /b", 5, "found 'NOT' (to negate a condition here, put it in parentheses)"),
    ("- NOT /b", 2, "found 'NOT'"),
    ("/a BETWEEN 1 OR 2", 13, "expected an arithmetic operator or the AND of BETWEEN ... AND"),
    ("/a BETWEEN NOT 1 AND 2", 11, "found 'NOT'"),
    ("/a IS 1", 6, "expected NOT, NULL or NAN after IS, found number 1"),
    ("/a IS NOT 1", 10, "expected NULL or NAN after IS NOT"),
    ("/a NOT 1", 7, "expected BETWEEN, IN, LIKE, BEGINS WITH, ENDS WITH or NULL after NOT"),
    ("/a BEGINS ('x')", 10, "expected WITH after BEGINS"),
    ("/a ENDS WITH 'x'", 13, "expected '(' and a list of values after ENDS WITH"),
    ("/a = NAN", 5, "NAN is only valid in IS [NOT] NAN"),
    ("/a = b", 5, "field names start with '/'"),
    ("/a AND", 6, "found end of expression"),
    ("/a AS /b", 3, "AS is only allowed in a projection"),
    ("/x OF NOW", 6, "expected CURRENT or PREVIOUS after OF"),
    ("(/x) OF CURRENT", 5, "expected an operator or end of expression, found 'OF'"),
    ("/", 1, "expected a field name after '/'"),
    ("/a = /", 6, "expected a field name after '/'"),
    ("/@", 2, "expected an attribute name after '@'"),
    ("/a[x]", 3, "expected an array index (digits) and ']'"),
    ("/a[0", 4, "expected an array index (digits) and ']'"),
    ("[/abc", 0, "unterminated '['"),
    ("[/]", 2, "expected a field name after '[/'"),
    ("[]./a", 1, "expected a qualifier"),
    ("[T]/a", 3, "expected '.' after the qualifier [T]"),
    ("[T].a", 4, "expected '/path' or '[/name]' after [T]."),
    ("[a].[b].[c]./x", 8, "third qualifier"),
    ("1.2.3", 3, "malformed number"),
    ("12abc", 2, "malformed number"),
    ("1e5e", 3, "malformed number"),
    ("9" * 5000, 0, "integer literal too long"),
    ("/a = 1 ]", 7, "found ']'"),
    ("/a [0]", 3, "found '['"),
    ("IN (1)", 0, "expected an operand"),
    ("/a = 1 AND AND /b = 2", 11, "found 'AND'"),
    ("/a ! 1", 3, "unsupported character '!'"),
    ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), MAX_DEPTH + 1, "nested too deeply"),
]


@pytest.mark.parametrize(("text", "position", "message"), ERRORS)
def test_error(text: str, position: int, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.position == position, caught.value
    assert message in caught.value.reason
    assert caught.value.text == text
    assert isinstance(caught.value, ExpressionError)


def test_error_message_points_at_the_position() -> None:
    with pytest.raises(ParseError) as caught:
        parse("/a = = 1")
    assert caught.value.expected.startswith("an operand")
    assert str(caught.value).endswith("  /a = = 1\n       ^")


def test_nesting_up_to_the_cap_parses() -> None:
    deep = "(" * MAX_DEPTH + "/a" + ")" * MAX_DEPTH
    assert strip(parse(deep)) == A
    # A call or list is a level of the tree too, above its leaf: at most MAX_DEPTH - 1.
    calls = "F(" * (MAX_DEPTH - 1) + "1" + ")" * (MAX_DEPTH - 1)
    assert isinstance(parse(calls), ast.Call)
    lists = "/a IN (" * (MAX_DEPTH - 1) + "1" + ")" * (MAX_DEPTH - 1)
    assert isinstance(parse(lists), ast.In)


def test_long_flat_chains_parse_without_recursion() -> None:
    chain = " OR ".join(f"/a = {i}" for i in range(MAX_DEPTH - 1))
    node = parse(chain)
    assert isinstance(node, ast.Binary)
    assert node.op == "OR"
    assert strip(parse("- " * 5001 + "5")) == lit(-5)
    assert strip(parse(" + ".join(["1"] * 150))) is not None


@pytest.mark.parametrize(
    "text",
    [
        " OR ".join(["/a"] * (MAX_DEPTH + 2)),
        "NOT " * 5000 + "/a",
        "- " * 5000 + "/a",
        "F(" * (MAX_DEPTH - 1) + "-/a" + ")" * (MAX_DEPTH - 1) + " + 1",
    ],
)
def test_trees_deeper_than_the_cap_are_refused(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert "expression too deep" in caught.value.reason
    assert 0 <= caught.value.position < len(text)


# -- projections, groupings, OrderBy ------------------------------------------------------


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


# -- fuzzing ------------------------------------------------------------------------------

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
