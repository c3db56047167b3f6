"""The order in which a view joins its topics (seed 002 SOW/View ``Join``).

A view's ``Join`` elements are AND-ed: several between the same two topics join on several
fields; a chain (``[A]./b = [B]./id``, ``[B]./c = [C]./id``) or a star (``[A]./b = [B]./id``,
``[A]./c = [C]./id``) joins three or more topics. :func:`join_plan` orders them:

* topic 0 is the left-hand topic of the first Join, the preserved one (AMPS: the
  left-hand topic is preserved, like ``A LEFT OUTER JOIN B``); topic 1 the first Join's
  other topic; each later topic the first one that a Join relates to a topic already
  placed;
* step ``k`` (1 to n-1) joins the rows of topics 0..k-1 with topic ``k``'s records, on
  every Join between topic ``k`` and an earlier topic (its ``pairs``), left outer: a row
  without a matching record of topic ``k`` is kept, with NULL for topic ``k``'s fields
  (so ``A LEFT JOIN B LEFT JOIN C``).
"""

from __future__ import annotations

from dataclasses import dataclass

from processor.errors import JoinPlanError
from processor.topology.model import JoinSpec


@dataclass(frozen=True, slots=True)
class JoinPair:
    """One Join of a step: an earlier topic's field equals the step's topic's field."""

    left: int
    left_field: str
    right_field: str


@dataclass(frozen=True, slots=True)
class JoinStep:
    """Step ``number`` joins topic ``number`` (1-based; topic 0 is never joined to)."""

    number: int
    pairs: tuple[JoinPair, ...]


@dataclass(frozen=True, slots=True)
class JoinPlan:
    """A view's topics in join order (their names as configured) and its steps."""

    topics: tuple[str, ...]
    steps: tuple[JoinStep, ...]


def join_plan(joins: tuple[JoinSpec, ...]) -> JoinPlan:
    """The plan of ``joins`` (see the module doc); raises JoinPlanError when a Join
    relates two topics not connected to the first Join's topics by the others (its
    ``join``: the first such Join's text)."""
    if not joins:
        return JoinPlan((), ())
    first = joins[0]
    order = [first.left.name, first.right.name]
    pairs: dict[int, list[JoinPair]] = {1: [JoinPair(0, first.left_field, first.right_field)]}
    pending = list(joins[1:])
    while pending:
        placed = [join for join in pending if join.left.name in order or join.right.name in order]
        if not placed:
            texts = "; ".join(join.text for join in pending)
            raise JoinPlanError(
                f"{texts}: relates no topic joined by the Joins before it "
                f"({', '.join(order)}); every topic must be joined to the others",
                pending[0].text,
            )
        for join in placed:
            pending.remove(join)
            sides = [(join.left.name, join.left_field), (join.right.name, join.right_field)]
            for name, _ in sides:
                if name not in order:
                    order.append(name)
            (a, a_field), (b, b_field) = sorted(
                ((order.index(name), path) for name, path in sides), key=lambda side: side[0]
            )
            pairs.setdefault(b, []).append(JoinPair(a, a_field, b_field))
    steps = tuple(JoinStep(k, tuple(pairs[k])) for k in range(1, len(order)))
    return JoinPlan(tuple(order), steps)
