"""Qualified identifiers (``[ORDERS]./Tick``, ``[nvfix].[ORDERS]./Tick``) in a view's
expressions, rewritten for the compiler, which reads plain field paths only.

A view of one topic reads its fields unqualified; a join reads each topic's fields under
a first step named ``[TOPIC]`` (so two topics' ``/x`` stay apart in the joined record).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from processor.expr import ast


def map_identifiers(node: Any, change: Callable[[ast.Identifier], ast.Node]) -> Any:
    """``node`` with every identifier replaced by ``change(identifier)`` (a new tree;
    nodes without identifiers are shared)."""
    if isinstance(node, ast.Identifier):
        return change(node)
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if isinstance(value, ast.Node):
            changes[item.name] = map_identifiers(value, change)
        elif isinstance(value, tuple) and value and isinstance(value[0], ast.Node):
            changes[item.name] = tuple(map_identifiers(v, change) for v in value)
    return dataclasses.replace(node, **changes) if changes else node


def joined_record_steps(topic: str, steps: tuple[ast.Step, ...]) -> tuple[ast.Step, ...]:
    """Where a topic's field sits in a joined record."""
    return (f"[{topic}]", *steps)


def unqualify(node: Any, joined: bool) -> Any:
    """``node`` with its qualified identifiers made plain: unqualified (``joined`` False)
    or under their topic's step (:func:`joined_record_steps`)."""

    def change(identifier: ast.Identifier) -> ast.Node:
        if not identifier.qualifiers:
            return identifier
        steps = (
            joined_record_steps(identifier.qualifiers[-1], identifier.steps)
            if joined
            else identifier.steps
        )
        return ast.Identifier(identifier.pos, identifier.path, steps, (), identifier.state)

    return map_identifiers(node, change)
