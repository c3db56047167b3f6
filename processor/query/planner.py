"""The query planner: which records of a SOW topic a filter must examine.

Plans, in the order they are preferred (the plan's name is reported in the group end):

* ``sow-keys``: the query names SowKeys; only those records are examined.
* ``key-index(/k, ...)``: the filter fixes every Key field of a topic whose SowKeys are
  generated, with ``=`` or ``IN`` over literals, in a top-level AND. The SowKeys are
  computed from the values, as the publisher computed them; no storage is needed.
* ``hash-index(/f, ...)``: likewise for a configured HashIndex (the one covering the most
  fields wins).
* ``memo-scan``: every record is examined, reading field values from memo indexes.
* ``all-records``: no filter; every record matches.

A configured hash index files values under a text that is equal whenever ``=`` says
the values are equal, so it finds exactly what a scan finds. The key index works from
the SowKey, the checksum of the Key values' text as published: ``/id = 5`` finds the
record published with ``5`` or ``"5"``, not one published with ``5.0`` (a different
SowKey, hence a different record, as in AMPS). Whatever the plan, the filter is then
checked on every examined record, so an index only narrows which records are examined.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from processor.expr import ast
from processor.expr.ast import Step, Value
from processor.expr.compiler import conjuncts
from processor.keys import checksum_key, key_text, parse_path
from processor.replica.table import HashIndex, SowTable, index_text

#: An index plan is used only while the value combinations it looks up stay below this.
MAX_COMBINATIONS = 10_000


#: A filter conjunct ``field IN (values)`` (``=`` is IN with one value).
Membership = tuple[tuple[Step, ...], tuple[Value, ...]]


@dataclass(frozen=True, slots=True)
class Plan:
    """Which records to examine: ``candidates`` (SowKeys), or every record when None.

    ``membership`` is set when the whole filter is a conjunction of ``field = literal`` /
    ``field IN (literals)`` tests: checking them (with the expression language's ``=``)
    on a record is then the same as evaluating the filter.
    """

    name: str
    candidates: list[bytes] | None
    membership: tuple[Membership, ...] | None = None


def _literal(node: ast.Node) -> Value:
    """The value of a literal usable in an index lookup (a string or a number), else None."""
    if not isinstance(node, ast.Literal):
        return None
    value = node.value
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    return value


def _plain_field(node: ast.Node) -> tuple[Step, ...] | None:
    if isinstance(node, ast.Identifier) and node.state is None:
        return node.steps
    return None


def membership_test(part: ast.Node) -> Membership | None:
    """``(field steps, literal values)`` when a filter conjunct is ``field = literal``,
    ``literal = field`` or ``field IN (literal, ...)``, else None."""
    if isinstance(part, ast.Binary) and part.op == "=":
        for field_side, value_side in ((part.left, part.right), (part.right, part.left)):
            steps = _plain_field(field_side)
            value = _literal(value_side)
            if steps is not None and value is not None:
                return steps, (value,)
    elif isinstance(part, ast.In) and not part.negated:
        steps = _plain_field(part.operand)
        values = tuple(_literal(item) for item in part.items)
        if steps is not None and values and all(v is not None for v in values):
            return steps, values
    return None


def needs_scan(node: ast.Node) -> bool:
    """True when no index can answer the filter (no top-level ``=``/``IN`` conjunct), so
    it will be a memo scan whatever the topic's indexes."""
    return not any(membership_test(part) for part in conjuncts(node))


def exact_matches(
    node: ast.Node, text_of: Callable[[Value], str | None]
) -> dict[tuple[Step, ...], set[str]]:
    """Fields a filter fixes to literal values (``=`` or ``IN`` in a top-level AND):
    field steps -> the texts (``text_of`` each literal) a matching record must have one
    of. Several conjuncts on one field intersect."""
    fixed: dict[tuple[Step, ...], set[str]] = {}
    for part in conjuncts(node):
        test = membership_test(part)
        if test is not None:
            steps, values = test
            texts = {t for t in map(text_of, values) if t is not None}
            fixed[steps] = fixed[steps] & texts if steps in fixed else texts
    return fixed


def _combinations(
    fixed: dict[tuple[Step, ...], set[str]], fields: Sequence[tuple[Step, ...]]
) -> list[tuple[str, ...]] | None:
    if not all(f in fixed for f in fields):
        return None
    count = 1
    for f in fields:
        count *= len(fixed[f])
    if count > MAX_COMBINATIONS:
        return None
    return list(itertools.product(*(sorted(fixed[f]) for f in fields)))


def plan(table: SowTable, node: ast.Node | None, sow_keys: Sequence[bytes] = ()) -> Plan:
    """Choose how to answer a filter (``node``, None for none) over one table."""
    if sow_keys:
        return Plan("sow-keys", [k for k in dict.fromkeys(sow_keys) if k in table.envelopes])
    if node is None:
        return Plan("all-records", None)
    tests = [membership_test(part) for part in conjuncts(node)]
    if not any(tests):
        return Plan("memo-scan", None)
    membership = None if None in tests else tuple(t for t in tests if t is not None)
    topic = table.topic
    if topic.keys and topic.key_generator is None and topic.pattern is None:
        # A generated SowKey is the checksum of the Key values' text (keys.key_text); a
        # Pattern topic's records are keyed by their own topics' names, so it has none.
        fixed = exact_matches(node, key_text)
        combos = _combinations(fixed, [tuple(parse_path(p)) for p in topic.keys])
        if combos is not None:
            keys = (checksum_key(topic.domain, c).encode() for c in combos)
            found = [k for k in keys if k in table.envelopes]
            return Plan(f"key-index({', '.join(topic.keys)})", found, membership)
    fixed = exact_matches(node, index_text)
    best: tuple[HashIndex, list[tuple[str, ...]]] | None = None
    for index in table.hash_indexes:
        combos = _combinations(fixed, [tuple(parse_path(p)) for p in index.paths])
        if combos is not None and (best is None or len(index.paths) > len(best[0].paths)):
            best = (index, combos)
    if best is not None:
        return Plan(best[0].name, best[0].lookup(best[1]), membership)
    return Plan("memo-scan", None)
