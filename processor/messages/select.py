"""Select lists (spec 1.19): which fields of a message a subscriber or query receives.

A select list is written ``[-/,+/id,+/complaint]``: comma-separated directives, ``+PATH``
includes a field, ``-PATH`` excludes it, ``+/`` and ``-/`` stand for the whole message
(the brackets are optional). For each field of a message the *most specific* directive
on its path decides (``+/,-/details``: everything but ``/details``;
``-/event,+/event/description``: of ``/event`` only its description, the other fields
untouched); a field no directive covers is included; when a path is given twice the first
directive wins. A directive naming a field the message lacks creates nothing, and an
object whose every field was excluded is left out rather than sent empty.

A select list is parsed once (:func:`parse_select`) and applied to decoded messages
(:meth:`SelectList.project`), after filtering: it never changes what matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.errors import InvalidRequestError

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SelectList:
    """A parsed select list. Immutable and thread-safe."""

    text: str
    #: path -> True (include) or False (exclude); the root is the empty path.
    directives: Mapping[Path, bool]
    #: Every proper prefix of a directive's path: where a subtree needs a closer look.
    _inner: frozenset[Path] = field(default=frozenset(), repr=False)

    def includes(self, path: Path) -> bool:
        """Whether the field at ``path`` is included (the most specific directive)."""
        for end in range(len(path), -1, -1):
            decision = self.directives.get(path[:end])
            if decision is not None:
                return decision
        return True

    def project(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """The message with only the selected fields (a new dict; ``message`` is not
        changed)."""
        return self._project(message, ())

    def _project(self, message: Mapping[str, Any], path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in message.items():
            inner = (*path, name)
            included = self.includes(inner)
            if isinstance(value, dict) and inner in self._inner:
                projected = self._project(value, inner)
                if projected or (included and not value):
                    out[name] = projected
            elif included:
                out[name] = value
        return out


def parse_select(text: str) -> SelectList:
    """Parse a select list; raises InvalidRequestError naming the directive it cannot
    read and what a directive looks like."""
    body = text.strip()
    if body.startswith("["):
        if not body.endswith("]"):
            raise _bad(text, body, "it opens with '[' but does not end with ']'")
        body = body[1:-1]
    directives: dict[Path, bool] = {}
    for raw in body.split(","):
        directive = raw.strip()
        if not directive:
            raise _bad(text, raw, "it is empty (two commas in a row, or a trailing comma)")
        sign = directive[0]
        if sign not in "+-":
            raise _bad(text, directive, "it does not start with + (include) or - (exclude)")
        path_text = directive[1:].strip()
        if not path_text.startswith("/"):
            raise _bad(text, directive, "its field path does not start with /")
        path: Path = () if path_text == "/" else tuple(path_text[1:].split("/"))
        if any(not part.strip() for part in path):
            raise _bad(text, directive, "its field path has an empty step")
        directives.setdefault(tuple(part.strip() for part in path), sign == "+")
    inner = frozenset(p[:end] for p in directives for end in range(len(p)))
    return SelectList(text, directives, inner)


def _bad(text: str, directive: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"select list {text!r}: directive {directive.strip()!r} is not valid: {why}; write "
        "comma-separated directives such as [-/,+/id,+/price] (+/PATH includes a field, "
        "-/PATH excludes it, +/ and -/ mean the whole message)"
    )
