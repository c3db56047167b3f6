"""Spark filter push-down for the sow data source.

* ``partition = n`` and ``partition IN (...)`` prune Kafka partitions before planning;
  they are exact, so Spark does not evaluate them again.
* Comparisons of a message column with a literal (``=``, ``<``, ``<=``, ``>``, ``>=``,
  ``IN``) on string, integer, floating-point and boolean columns become AMPS filter terms
  ANDed to the ``filter`` option and evaluated in the reader, so fewer rows reach the JVM.
  AMPS and Spark SQL do not compare mixed types alike, so these stay with Spark as well:
  the reader only pre-selects.
Every other filter stays with Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from processor.spark.columns import message_fields
from processor.spark.options import ReadOptions

_OPERATORS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_NUMERIC = (IntegerType, LongType, ShortType, FloatType, DoubleType)


@dataclass(frozen=True, slots=True)
class Pushed:
    """The read after push-down and the filters Spark must still evaluate."""

    options: ReadOptions
    partitions: list[int] | None
    remaining: list[Filter]


def _literal(value: Any, kind: Any) -> str | None:
    """The AMPS literal for a Spark literal compared with a column of type ``kind``."""
    if isinstance(kind, StringType) and isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(kind, BooleanType) and isinstance(value, bool):
        return "true" if value else "false"
    if (
        isinstance(kind, _NUMERIC)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return repr(value)
    return None


def _amps_term(item: Filter, types: dict[str, Any]) -> str | None:
    path: tuple[str, ...] = getattr(item, "attribute", ())
    if len(path) != 1 or path[0] not in types:
        return None
    name, kind = path[0], types[path[0]]
    if not name.isidentifier():
        return None
    operator = _OPERATORS.get(type(item))
    if operator is not None:
        literal = _literal(getattr(item, "value", None), kind)
        return None if literal is None else f"/{name} {operator} {literal}"
    if isinstance(item, In):
        literals = [_literal(v, kind) for v in item.value]
        if not literals or any(v is None for v in literals):
            return None
        return f"/{name} IN ({', '.join(str(v) for v in literals)})"
    return None


def _partitions(item: Filter) -> set[int] | None:
    if getattr(item, "attribute", ()) != ("partition",):
        return None
    if isinstance(item, EqualTo) and isinstance(item.value, int):
        return {item.value}
    if isinstance(item, In) and all(isinstance(v, int) for v in item.value):
        return set(item.value)
    return None


def push(options: ReadOptions, schema: StructType, filters: Sequence[Filter]) -> Pushed:
    """Apply what maps to the read; return it with the filters Spark keeps."""
    types = {f.name: f.dataType for f in message_fields(schema)}
    partitions: set[int] | None = None
    remaining: list[Filter] = []
    terms: list[str] = []
    for item in filters:
        chosen = _partitions(item) if "partition" in schema.fieldNames() else None
        if chosen is not None:
            partitions = chosen if partitions is None else partitions & chosen
            continue
        remaining.append(item)
        term = _amps_term(item, types)
        if term is not None:
            terms.append(term)
    if terms:
        clauses = ([f"({options.filter})"] if options.filter else []) + terms
        options = replace(options, filter=" AND ".join(clauses))
    return Pushed(options, None if partitions is None else sorted(partitions), remaining)
