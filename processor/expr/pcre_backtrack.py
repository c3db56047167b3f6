"""The PCRE constructs that need backtracking, for :mod:`processor.expr.pcre`.

RE2 cannot run backreferences, lookaround, atomic groups, possessive quantifiers,
recursion, conditional and branch-reset groups, ``\\G``, ``\\K`` and the verbs
``(*FAIL)`` ``(*PRUNE)`` ``(*SKIP)``. When the translator for RE2 meets one it notes it
(:attr:`processor.expr.pcre.Translation.needs`), and
:func:`processor.expr.regex.compile_regex` translates the pattern again for the
backtracking engine (the ``regex`` package, run with a time budget
by :mod:`processor.expr.backtrack`): this module reads those constructs and writes them
in that engine's syntax. Numbered references are made absolute (``\\g{-1}``, ``(?+1)``)
and every name reference is spelled ``(?P=name)`` / ``(?&name)``, the forms it knows.

:func:`finish` turns the translator's output into the backtracking engine's syntax: the
engine runs with its ASCII flag (``\\w``, ``\\d``, ``\\b``, POSIX classes and ``(?i)`` are
ASCII, as in AMPS), so Unicode properties are scoped ``(?u:...)``.
"""

from __future__ import annotations

import re
from typing import NoReturn, Protocol


class _Flags(Protocol):
    @property
    def caseless(self) -> bool: ...


class Translator(Protocol):
    """What this module needs of :class:`processor.expr.pcre.Translator`."""

    pattern: str
    out: list[str]
    groups: int

    @property
    def flags(self) -> _Flags: ...

    def backtrack(self, construct: str, offset: int) -> None: ...

    def reopen(self, opener: str) -> None: ...

    def fail(self, problem: str, offset: int, advice: str) -> NoReturn: ...

    def refuse(self, construct: str, offset: int, advice: str) -> NoReturn: ...


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CALL = re.compile(rf"\(\?(R|[0-9]+|[+-][0-9]+|&{_NAME}|P>{_NAME}|P={_NAME})\)")
_CONDITION = re.compile(rf"\(\?\((?:([+-]?[0-9]+)|<({_NAME})>|'({_NAME})'|(DEFINE)|({_NAME}))\)")
_VERBS = ("(*FAIL)", "(*F)", "(*PRUNE)", "(*SKIP)")
_REFERENCE = re.compile(
    rf"\\g(?:\{{(-?[0-9]+)\}}|(-?[0-9]+)|\{{({_NAME})\}}|<([+-]?[0-9]+|{_NAME})>|'([+-]?[0-9]+|{_NAME})')"
    rf"|\\k(?:<({_NAME})>|'({_NAME})'|\{{({_NAME})\}})"
)
_OPENERS = {"=": "lookahead", "!": "negative lookahead", ">": "atomic group", "|": "branch reset"}


def verb(tr: Translator, index: int) -> int:
    """A ``(*VERB)`` at ``index``: the ones the engine knows, else refused."""
    known = next((verb for verb in _VERBS if tr.pattern.startswith(verb, index)), None)
    if known is None:
        end = tr.pattern.find(")", index)
        tr.refuse(
            f"the verb or option '{tr.pattern[index : end + 1 if end > 0 else index + 3]}'",
            index,
            "remove it ((*FAIL), (*PRUNE) and (*SKIP) are the verbs supported)",
        )
    tr.backtrack(f"the control verb '{known}'", index)
    tr.out.append(known)
    return index + len(known)


def group(tr: Translator, index: int, head: str) -> int | None:
    """A ``(?`` form at ``index`` that needs backtracking (``head``: the two characters
    after ``(?``): the index after what was read, or None when it is no such form."""
    first, pattern = head[:1], tr.pattern
    if first in _OPENERS or head in ("<=", "<!"):
        opener = pattern[index : index + (4 if first == "<" else 3)]
        name = _OPENERS.get(first, "lookbehind assertion")
        tr.backtrack(f"the {name} {opener!r}", index)
        tr.reopen(opener)
        return index + len(opener)
    if first == "(":
        return _conditional(tr, index)
    call = _CALL.match(pattern, index)
    if call is None:
        return None
    target = call.group(1)
    tr.backtrack(f"the {'backreference' if target[:2] == 'P=' else 'subroutine call'}", index)
    if target[:1] in "+-":
        target = str(_absolute(tr, int(target), index))
    elif target[:2] == "P>":
        target = "&" + target[2:]
    item = f"(?{target})"
    tr.out.append(_caseless(tr, item) if target[:2] == "P=" else item)
    return call.end()


def _conditional(tr: Translator, index: int) -> int:
    """``(?(condition)yes|no)``: a group number, a name, DEFINE or an assertion."""
    pattern = tr.pattern
    tr.backtrack("the conditional group '(?('", index)
    if pattern.startswith(("(?(?=", "(?(?!", "(?(?<=", "(?(?<!"), index):
        tr.reopen("(?")  # the assertion that follows is read as a group of its own
        return index + 2
    condition = _CONDITION.match(pattern, index)
    if condition is None or (condition.group(5) or "").startswith("R"):
        tr.refuse(
            f"the condition {pattern[index : index + 6]!r}",
            index,
            "use a group number, a group name, DEFINE or an assertion",
        )
    number, names = condition.group(1), condition.group(2, 3, 4, 5)
    if number is not None:
        target = str(_absolute(tr, int(number), index) if number[0] in "+-" else int(number))
    else:
        target = next(name for name in names if name)
    tr.reopen(f"(?({target})")
    return condition.end()


def escape(tr: Translator, index: int, letter: str) -> int | None:
    """A backslash sequence at ``index`` that needs backtracking: a backreference (``\\1``,
    ``\\g{-1}``, ``\\k<n>``...), a subroutine call (``\\g<n>``), ``\\G``, ``\\K``; the index
    after it, or None when it is no such sequence."""
    pattern = tr.pattern
    if letter in "GK":
        tr.backtrack(f"'\\{letter}'", index)
        tr.out.append("\\" + letter)
        return index + 2
    if letter.isdigit() and letter != "0":
        digits = re.match(r"[0-9]+", pattern[index + 1 :])
        assert digits is not None
        number = int(digits.group(0))
        if number >= 10 and letter not in "89" and number > tr.groups:
            return None  # an octal escape such as \101 (PCRE's rule)
        tr.backtrack(f"the backreference '\\{number}'", index)
        tr.out.append(_caseless(tr, f"(?:\\{number})"))
        return index + 1 + len(digits.group(0))
    if letter not in "gk":
        return None
    found = _REFERENCE.match(pattern, index)
    if found is None:
        tr.fail(
            f"the reference '{pattern[index : index + 4]}' is invalid",
            index,
            "write \\g{N}, \\g{-N}, \\k<name> or \\g<name>",
        )
    tr.backtrack(f"the reference '{found.group(0)}'", index)
    numbered, named, called = found.group(1) or found.group(2), found.group(3), None
    named = named or found.group(6) or found.group(7) or found.group(8)
    called = found.group(4) or found.group(5)
    if numbered is not None:
        number = _absolute(tr, int(numbered), index) if numbered[0] == "-" else int(numbered)
        tr.out.append(_caseless(tr, f"(?:\\{number})"))
    elif named is not None:
        tr.out.append(_caseless(tr, f"(?P={named})"))
    else:
        assert called is not None
        if called[0] in "+-" or called.isdigit():
            target = _absolute(tr, int(called), index) if called[0] in "+-" else int(called)
            tr.out.append(f"(?{target})")
        else:
            tr.out.append(f"(?&{called})")
    return found.end()


def _absolute(tr: Translator, relative: int, index: int) -> int:
    """The group a relative reference (``-1``: the last group opened, ``+1``: the next)
    names."""
    number = tr.groups + relative + (1 if relative < 0 else 0)
    if relative == 0 or number < 1:
        tr.fail(f"the relative reference {relative:+d} names no group", index, "fix the number")
    return number


def _caseless(tr: Translator, item: str) -> str:
    """A reference that compares caselessly under ``(?i)`` (ASCII letters only)."""
    return f"(?i:{item})" if tr.flags.caseless else item


_CODE = re.compile(r"\\x\{([0-9a-f]+)\}")


def finish(source: str, end: str) -> str:
    """The translator's output (RE2 syntax plus the constructs above) in the backtracking
    engine's syntax; ``end`` marks PCRE's ``$``, which is the engine's own ``$``."""
    source = _CODE.sub(lambda found: f"\\U{int(found.group(1), 16):08x}", source)
    return source.replace(end, "$")


def properties(items: list[str], found: list[str], negate: bool) -> str:
    """A class whose members include Unicode properties (``found``), for the engine run
    with its ASCII flag: the properties are scoped ``(?u:...)``, which a class cannot hold,
    so the class becomes an alternation (negated: a lookahead and one character)."""
    parts = [f"[{''.join(items)}]"] if items else []
    parts += [f"(?u:{item})" for item in found]
    either = "|".join(parts)
    return f"(?:(?!{either})(?s:.))" if negate else f"(?:{either})"
