"""The tokenizer of AMPS expressions.

Tokens are produced on demand, because one character means different things by
position: in *operand* position ``/`` starts an identifier (``/a/b``) and ``[`` a
bracketed or qualified identifier (``[/Not Xpath]``, ``[ORDERS]./x``); in *operator*
position ``/`` is division. Operand position is the start of the text and any point after
a token that cannot end an operand (an operator, ``(``, ``,``, or a keyword such as
``AND``). Inside an identifier a ``/`` immediately followed by a step-name character
continues the path, so ``/6*/14`` is ``/6 * /14`` and ``/a /2`` is ``/a`` divided by 2.

Every malformed token raises :class:`~processor.errors.ParseError` at the position where
scanning stopped; no other exception leaves this module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from processor.errors import ParseError
from processor.expr.ast import Step

OPERAND_EXPECTED = "an operand (literal, identifier, function call or '(')"

#: Keywords after which the next token is in operand position; every other word
#: (NULL, TRUE, CURRENT, ASC, a function name, ...) ends an operand.
OPERAND_START_WORDS = frozenset(
    {"AND", "OR", "NOT", "IS", "IN", "LIKE", "BETWEEN", "BEGINS", "ENDS", "WITH", "MOD"}
    | {"AS", "HINT", "OF"}
)

_PUNCTUATION = ("==", "!=", "<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%")
_SINGLE = frozenset("(),[]")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
_DIGITS = frozenset("0123456789")
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_WORD_CHARS = _WORD_START | _DIGITS


class Kind(enum.Enum):
    """What a token is."""

    NUMBER = "number"
    STRING = "string"
    IDENT = "identifier"
    WORD = "word"  # keywords and function names
    PUNCT = "punctuation"
    EOF = "end"


@dataclass(frozen=True, slots=True)
class Token:
    """One token; ``pos``/``end`` are offsets into the whole source text.

    ``text`` is the source spelling (WORD tokens keep their case; compare ``word``).
    NUMBER tokens carry ``number``; STRING tokens ``string`` (after escape processing),
    ``pattern`` (the LIKE form: backslashes verbatim except before the delimiting quote)
    and ``raw``; IDENT tokens ``path`` (spelling without qualifiers), ``steps`` and
    ``qualifiers``.
    """

    kind: Kind
    pos: int
    end: int
    text: str
    number: int | float = 0
    string: str = ""
    pattern: str = ""
    raw: bool = False
    path: str = ""
    steps: tuple[Step, ...] = ()
    qualifiers: tuple[str, ...] = ()

    @property
    def word(self) -> str:
        """The upper-cased spelling of a WORD token ("" for other kinds)."""
        return self.text.upper() if self.kind is Kind.WORD else ""

    def is_punct(self, *texts: str) -> bool:
        """True if this is a PUNCT token spelled as one of ``texts``."""
        return self.kind is Kind.PUNCT and self.text in texts

    def describe(self) -> str:
        """How error messages name this token."""
        if self.kind is Kind.EOF:
            return "end of expression"
        shown = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        if self.kind in (Kind.WORD, Kind.PUNCT):
            return f"'{shown}'"
        return f"{self.kind.value} {shown}"


def is_step_char(ch: str) -> bool:
    """True if ``ch`` may appear in an unbracketed step name (``@`` only leads one)."""
    return len(ch) == 1 and (ch.isalnum() or ch in "_-.")


class Lexer:
    """Tokens of ``text[start:end]``, scanned lazily; positions refer to ``text``.

    ``peek(n)`` looks ``n`` tokens ahead without consuming; ``next()`` consumes one. After
    the end, EOF tokens (at ``end``) repeat forever. Not thread-safe (one per parse).
    """

    def __init__(self, text: str, start: int = 0, end: int | None = None) -> None:
        self._text = text
        self._end = len(text) if end is None else end
        self._pos = start
        self._buffer: list[Token] = []
        self._last: Token | None = None

    def peek(self, ahead: int = 0) -> Token:
        """The token ``ahead`` positions after the next one, without consuming it."""
        while len(self._buffer) <= ahead:
            token = self._scan()
            self._buffer.append(token)
            self._last = token
        return self._buffer[ahead]

    def next(self) -> Token:
        """Consume and return the next token."""
        token = self.peek()
        del self._buffer[0]
        return token

    # -- scanning ---------------------------------------------------------------------

    def _char(self, i: int) -> str:
        return self._text[i] if i < self._end else ""

    def _error(self, position: int, message: str, expected: str = "") -> ParseError:
        return ParseError(message, text=self._text, position=position, expected=expected)

    def _found(self, i: int) -> str:
        return repr(self._text[i]) if i < self._end else "end of expression"

    def _operand_position(self) -> bool:
        last = self._last
        if last is None:
            return True
        if last.kind is Kind.PUNCT:
            return last.text not in (")", "]")
        if last.kind is Kind.WORD:
            return last.word in OPERAND_START_WORDS
        return last.kind is Kind.EOF

    def _scan(self) -> Token:
        i = self._pos
        while i < self._end and self._text[i].isspace():
            i += 1
        token = self._token_at(i)
        self._pos = token.end
        return token

    def _token_at(self, i: int) -> Token:
        if i >= self._end:
            return Token(Kind.EOF, self._end, self._end, "")
        ch = self._text[i]
        operand = self._operand_position()
        if operand and ch in "/[":
            return self._identifier(i)
        if ch in "'\"":
            return self._string(i, i, raw=False)
        if ch in "rR" and self._char(i + 1) in ("'", '"'):
            return self._string(i, i + 1, raw=True)
        if ch in _DIGITS or (ch == "." and self._char(i + 1) in _DIGITS):
            return self._number(i)
        if ch in _WORD_START:
            j = i + 1
            while self._char(j) in _WORD_CHARS:
                j += 1
            return Token(Kind.WORD, i, j, self._text[i:j])
        if ch in _SINGLE:
            return Token(Kind.PUNCT, i, i + 1, ch)
        for punct in _PUNCTUATION:
            if self._text.startswith(punct, i, self._end):
                return Token(Kind.PUNCT, i, i + len(punct), punct)
        expected = OPERAND_EXPECTED if operand else "an operator"
        raise self._error(
            i, f"expected {expected}, found unsupported character {ch!r}", expected=expected
        )

    def _number(self, start: int) -> Token:
        i = start
        while self._char(i) in _DIGITS:
            i += 1
        is_float = False
        if self._char(i) == ".":
            is_float = True
            i += 1
            while self._char(i) in _DIGITS:
                i += 1
        if self._char(i) in ("e", "E"):
            j = i + 1
            if self._char(j) in ("+", "-"):
                j += 1
            if self._char(j) in _DIGITS:
                is_float = True
                i = j
                while self._char(i) in _DIGITS:
                    i += 1
        after = self._char(i)
        if after and (after.isalnum() or after in "_."):
            raise self._error(
                i,
                f"malformed number: expected a digit, operator or separator after "
                f"{self._text[start:i]!r}, found {after!r}",
                expected="a number",
            )
        text = self._text[start:i]
        if is_float:
            return Token(Kind.NUMBER, start, i, text, number=float(text))
        try:
            value = int(text)
        except ValueError as exc:  # Python refuses int() of more than ~4300 digits
            raise self._error(start, f"integer literal too long ({len(text)} digits)") from exc
        return Token(Kind.NUMBER, start, i, text, number=value)

    def _string(self, start: int, quote_at: int, *, raw: bool) -> Token:
        quote = self._text[quote_at]
        unterminated = (
            f"unterminated string literal: expected a closing {quote}, found end of expression"
        )
        i = quote_at + 1
        if raw:
            # Raw strings have no escapes: the first matching quote closes them.
            close = self._text.find(quote, i, self._end)
            if close < 0:
                raise self._error(start, unterminated, expected=quote)
            body = self._text[i:close]
            return Token(
                Kind.STRING,
                start,
                close + 1,
                self._text[start : close + 1],
                string=body,
                pattern=body,
                raw=True,
            )
        value: list[str] = []
        pattern: list[str] = []
        while True:
            if i >= self._end:
                raise self._error(start, unterminated, expected=quote)
            ch = self._text[i]
            if ch == quote:
                break
            if ch != "\\":
                value.append(ch)
                pattern.append(ch)
                i += 1
                continue
            if i + 1 >= self._end:
                raise self._error(start, unterminated, expected=quote)
            decoded, after = self._escape(i + 1)
            value.append(decoded)
            # LIKE patterns reach the regex engine with their backslashes (\1, \+, \.),
            # except that an escaped delimiting quote is just the quote.
            nxt = self._text[i + 1]
            pattern.append(quote if nxt == quote else self._text[i:after])
            i = after
        return Token(
            Kind.STRING,
            start,
            i + 1,
            self._text[start : i + 1],
            string="".join(value),
            pattern="".join(pattern),
        )

    def _escape(self, i: int) -> tuple[str, int]:
        """Decode the escape whose letter is at ``i``; return its value and the next offset."""
        ch = self._text[i]
        if ch in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[ch], i + 1
        if ch == "x":
            j = i + 1
            while j < min(i + 3, self._end) and self._text[j] in _HEX:
                j += 1
            if j == i + 1:
                return "x", j
            return chr(int(self._text[i + 1 : j], 16)), j
        if ch in _OCTAL:
            j = i
            while j < min(i + 3, self._end) and self._text[j] in _OCTAL:
                j += 1
            if int(self._text[i:j], 8) > 0o377:
                j -= 1  # a byte holds at most \377; the third digit is an ordinary char
            return chr(int(self._text[i:j], 8)), j
        return ch, i + 1

    def _identifier(self, start: int) -> Token:
        i = start
        qualifiers: list[str] = []
        while self._char(i) == "[" and self._char(i + 1) != "/":
            close = self._closing_bracket(i)
            name = self._text[i + 1 : close]
            if not name:
                raise self._error(
                    i + 1,
                    "expected a qualifier or '/field name' inside '[...]', found ']'",
                    expected="a qualifier or field name",
                )
            if len(qualifiers) == 2:
                raise self._error(
                    i,
                    "expected a field after [type].[topic]., found a third qualifier",
                    expected="'/path' or '[/name]'",
                )
            qualifiers.append(name)
            i = close + 1
            if self._char(i) != ".":
                raise self._error(
                    i,
                    f"expected '.' after the qualifier [{name}], found {self._found(i)}",
                    expected="'.'",
                )
            i += 1
            if self._char(i) not in ("/", "["):
                raise self._error(
                    i,
                    f"expected '/path' or '[/name]' after [{name}]., found {self._found(i)}",
                    expected="'/path' or '[/name]'",
                )
        path_start = i
        steps: list[Step] = []
        if self._char(i) == "[":
            close = self._closing_bracket(i)
            name = self._text[i + 2 : close]
            if not name:
                raise self._error(
                    i + 2, "expected a field name after '[/', found ']'", expected="a field name"
                )
            steps.append(name)
            i = close + 1
        else:
            i = self._step(i, steps)
        while True:
            ch = self._char(i)
            if ch == "[":
                i = self._subscript(i, steps)
            elif ch == "/" and (is_step_char(self._char(i + 1)) or self._char(i + 1) == "@"):
                i = self._step(i, steps)
            else:
                break
        return Token(
            Kind.IDENT,
            start,
            i,
            self._text[start:i],
            path=self._text[path_start:i],
            steps=tuple(steps),
            qualifiers=tuple(qualifiers),
        )

    def _closing_bracket(self, i: int) -> int:
        close = self._text.find("]", i + 1, self._end)
        if close < 0:
            raise self._error(
                i, "unterminated '[': expected ']', found end of expression", expected="']'"
            )
        return close

    def _step(self, i: int, steps: list[Step]) -> int:
        """Scan ``/name`` or ``/@name`` at ``i`` (a '/') into ``steps``."""
        j = i + 1
        if self._char(j) == "@":
            j += 1
        name_start = j
        while j < self._end and is_step_char(self._text[j]):
            j += 1
        if j == name_start:
            what = "an attribute name after '@'" if j > i + 1 else "a field name after '/'"
            raise self._error(j, f"expected {what}, found {self._found(j)}", expected=what)
        steps.append(self._text[i + 1 : j])
        return j

    def _subscript(self, i: int, steps: list[Step]) -> int:
        """Scan an array subscript ``[n]`` (zero-based; ``[-n]`` is kept) at ``i``."""
        j = i + 1
        if self._char(j) == "-":
            j += 1
        digits_start = j
        while self._char(j) in _DIGITS:
            j += 1
        expected = "an array index (digits) and ']'"
        if j == digits_start or self._char(j) != "]":
            raise self._error(j, f"expected {expected}, found {self._found(j)}", expected=expected)
        if j - digits_start > 18:
            raise self._error(digits_start, "array index too large", expected=expected)
        steps.append(int(self._text[i + 1 : j]))
        return j + 1
