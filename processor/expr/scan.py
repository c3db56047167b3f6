"""How :meth:`Expression.scan` runs a filter over memo-index columns.

Two strategies, both generated as Python comprehensions:

* **per key**: for every key, look up each input's column (``dict.get``) and test the
  filter. Right when the keys are few (the planner narrowed them), but each lookup in a
  large dict is a random memory access, several times the cost of iterating one.
* **driven**: when a conjunct of a top-level AND reads one input and cannot be TRUE when
  that input is NULL (``/price > 990``, ``/symbol IN (...)``), iterate that input's column
  sequentially (a key absent from it is NULL, so it cannot match), test the conjunct,
  then test the other conjuncts on the survivors only, and finally keep the survivors
  that are among the keys, in the keys' order.

The strategy is chosen per call from the column sizes and the conjunct's pass rate on a
sample of its column; both return the same keys in the same order.

* **aligned**: when the caller guarantees that every column holds every key, in the keys'
  order (the query service's memo indexes over a whole topic do), the columns' values are
  zipped with the keys: no lookups at all, every input read sequentially.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from processor.expr.codegen import Code, predicate

#: Entries of a column tested to estimate a conjunct's pass rate.
SAMPLE = 256
#: Cost of a random lookup in a large dict, in sequential column items.
RANDOM_LOOKUP = 6
#: Conjuncts that get a driver, at most (the first ones that can drive). Each driver's
#: ``_rest`` inlines every other conjunct, so the generated source grows with drivers
#: times conjuncts: a filter of 100 drivable conjuncts took a second to compile.
MAX_DRIVERS = 8


@dataclass(frozen=True, slots=True)
class Driver:
    """A conjunct that can drive a scan: ``first`` filters (key, value) pairs of the
    column at ``position``; ``rest`` (None when there is no other conjunct) filters the
    surviving keys by the other conjuncts, reading ``rest_inputs`` columns per key."""

    position: int
    first: Callable[[Iterable[tuple[Any, Any]]], list[Any]]
    rest: Callable[[list[Any], Sequence[Mapping[Any, Any]]], list[Any]] | None
    rest_inputs: int


def per_key_source(refs: list[int], test: str) -> str:
    """``_scan(keys, columns)``: the per-key strategy."""
    if not refs:
        return f"def _scan(keys, columns):\n    return list(keys) if {test} else []\n"
    params = ", ".join(f"v{i}" for i in refs)
    getters = "".join(f"    g{j} = columns[{j}].get\n" for j in range(len(refs)))
    maps = "".join(f", map(g{j}, keys)" for j in range(len(refs)))
    return (
        f"def _scan(keys, columns):\n{getters}"
        f"    return [k for k, {params} in zip(keys{maps}) if {test}]\n"
    )


def aligned_source(refs: list[int], test: str) -> str:
    """``_scan_aligned(keys, columns)``: the aligned strategy."""
    if not refs:
        return f"def _scan_aligned(keys, columns):\n    return list(keys) if {test} else []\n"
    params = ", ".join(f"v{i}" for i in refs)
    values = "".join(f", columns[{j}].values()" for j in range(len(refs)))
    return (
        f"def _scan_aligned(keys, columns):\n"
        f"    return [k for k, {params} in zip(keys{values}) if {test}]\n"
    )


def driver_sources(
    conjuncts: list[Code],
    refs: list[int],
) -> tuple[str, list[tuple[int, int, int]]]:
    """Source of ``_first_<j>``/``_rest_<j>`` for the first :data:`MAX_DRIVERS` conjuncts
    ``j`` that can drive, and (j, column position, inputs the other conjuncts read) for
    each."""
    position = {index: n for n, index in enumerate(refs)}
    chunks: list[str] = []
    drivers: list[tuple[int, int, int]] = []
    for j, conjunct in enumerate(conjuncts):
        if len(drivers) == MAX_DRIVERS:
            break
        if len(conjunct.refs) != 1 or not conjunct.refs <= conjunct.strict:
            continue
        (driving,) = conjunct.refs
        if driving not in position:
            continue
        chunks.append(
            f"def _first_{j}(items):\n"
            f"    return [k for k, v{driving} in items if {predicate(conjunct)}]\n"
        )
        others = [c for n, c in enumerate(conjuncts) if n != j]
        needed = []
        if others:
            needed = sorted(frozenset().union(*(c.refs for c in others)))
            if not all(i in position for i in needed):
                chunks.pop()
                continue
            getters = "".join(f"    g{i} = columns[{position[i]}].get\n" for i in needed)
            loops = "".join(f" for v{i} in [g{i}(k)]" for i in needed)
            test = " and ".join(f"({predicate(c)})" for c in others)
            chunks.append(
                f"def _rest_{j}(hits, columns):\n{getters}"
                f"    return [k for k in hits{loops} if {test}]\n"
            )
        drivers.append((j, position[driving], len(needed)))
    return "".join(chunks), drivers


def choose(
    drivers: Sequence[Driver],
    keys: Collection[Any],
    inputs: int,
    columns: Sequence[Mapping[Any, Any]],
) -> Driver | None:
    """The driver with the lowest estimated cost, or None when looking up every key is
    cheaper (few keys against large columns)."""
    best: Driver | None = None
    best_cost = float(len(keys) * RANDOM_LOOKUP * inputs)
    for driver in drivers:
        column = columns[driver.position]
        size = len(column)
        if size >= best_cost:
            continue
        sampled = min(size, SAMPLE)
        passed = len(driver.first(itertools.islice(column.items(), sampled)))
        hits = size * (passed + 1) / (sampled + 1)
        cost = size + hits * RANDOM_LOOKUP * driver.rest_inputs + len(keys)
        if cost < best_cost:
            best, best_cost = driver, cost
    return best


def driven(
    driver: Driver,
    keys: Collection[Any],
    columns: Sequence[Mapping[Any, Any]],
) -> list[Any]:
    """The keys that match, by the driven strategy (see the module docstring)."""
    hits = driver.first(columns[driver.position].items())
    if hits and driver.rest is not None:
        hits = driver.rest(hits, columns)
    if not hits:
        return hits
    return list(filter(set(hits).__contains__, keys))
