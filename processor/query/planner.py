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

Index plans compare values as text, as AMPS hash indexes do: ``/id = 5`` finds a record
whose ``/id`` is ``5`` or ``"5"``, not one whose ``/id`` is ``"05"``. Whatever the plan,
the whole filter is then evaluated on every examined record, so an index only narrows
which records are examined.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from processor.expr import ast
from processor.keys import checksum_key, key_text, parse_path
from processor.query.table import HashIndex, SowTable

#: An index plan is used only while the value combinations it looks up stay below this.
MAX_COMBINATIONS = 10_000


@dataclass(frozen=True, slots=True)
class Plan:
    """Which records to examine: ``candidates`` (SowKeys), or every record when None."""

    name: str
    candidates: list[bytes] | None


def conjuncts(node: ast.Node) -> list[ast.Node]:
    """The operands of a top-level chain of ANDs (the node itself when it is not one)."""
    if isinstance(node, ast.Binary) and node.op == "AND":
        return conjuncts(node.left) + conjuncts(node.right)
    return [node]


def _literal_text(node: ast.Node) -> str | None:
    """The index text of a literal usable in an index lookup, else None."""
    if not isinstance(node, ast.Literal):
        return None
    value = node.value
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    return key_text(value)


def _plain_field(node: ast.Node) -> tuple[str | int, ...] | None:
    if isinstance(node, ast.Identifier) and node.state is None:
        return node.steps
    return None


def exact_matches(node: ast.Node) -> dict[tuple[str | int, ...], set[str]]:
    """Fields a filter fixes to literal values (``=`` or ``IN`` in a top-level AND):
    field steps -> the value texts a matching record must have one of."""
    fixed: dict[tuple[str | int, ...], set[str]] = {}
    for part in conjuncts(node):
        steps: tuple[str | int, ...] | None = None
        texts: set[str] = set()
        if isinstance(part, ast.Binary) and part.op == "=":
            for field_side, value_side in ((part.left, part.right), (part.right, part.left)):
                steps = _plain_field(field_side)
                text = _literal_text(value_side)
                if steps is not None and text is not None:
                    texts = {text}
                    break
                steps = None
        elif isinstance(part, ast.In) and not part.negated:
            steps = _plain_field(part.operand)
            item_texts = [_literal_text(item) for item in part.items]
            if steps is not None and item_texts and all(t is not None for t in item_texts):
                texts = {t for t in item_texts if t is not None}
            else:
                steps = None
        if steps is not None:
            fixed[steps] = fixed[steps] & texts if steps in fixed else texts
    return fixed


def _combinations(
    fixed: dict[tuple[str | int, ...], set[str]], fields: Sequence[tuple[str | int, ...]]
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
    fixed = exact_matches(node)
    if fixed:
        topic = table.topic
        if topic.keys and topic.key_generator is None:
            key_steps = [tuple(parse_path(p)) for p in topic.keys]
            combos = _combinations(fixed, key_steps)
            if combos is not None:
                keys = (checksum_key(topic.domain, c).encode() for c in combos)
                found = [k for k in keys if k in table.envelopes]
                return Plan(f"key-index({', '.join(topic.keys)})", found)
        best: tuple[HashIndex, list[tuple[str, ...]]] | None = None
        for index in table.hash_indexes:
            combos = _combinations(fixed, [tuple(parse_path(p)) for p in index.paths])
            if combos is not None and (best is None or len(index.paths) > len(best[0].paths)):
                best = (index, combos)
        if best is not None:
            return Plan(best[0].name, best[0].lookup(best[1]))
    return Plan("memo-scan", None)
