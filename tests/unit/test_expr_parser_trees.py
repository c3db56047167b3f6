"""The AMPS expression parser: the tree of every construct (identifiers, literals,
operators and precedence, predicates, calls) and the positions nodes carry.

Trees are compared with positions zeroed (``strip``) except in the tests about positions.
"""

from __future__ import annotations

import pytest

from processor.expr import ast
from processor.expr.parser import parse
from tests.unit.expr_helpers import A, B, X, binary, call, idf, lit, strip, unary

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
