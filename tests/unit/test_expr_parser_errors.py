"""The AMPS expression parser's errors: what was expected, what arrived and where, and
the nesting caps that keep parsing (and the trees it returns) bounded."""

from __future__ import annotations

import pytest

from processor.errors import ExpressionError, ParseError
from processor.expr import ast
from processor.expr.parser import MAX_DEPTH, parse
from tests.unit.expr_helpers import A, lit, strip

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
