"""SOW queries, independent of any transport (AMPS ``sow`` command semantics).

A query is validated and compiled completely before anything runs, so a bad filter, a
``skip_n`` without ``top_n``, an unknown topic or a BatchSize above 10000 fail with a
typed error and no effect. Then, under the replica's lock (one consistent state):

1. for each topic (a literal topic, or every topic a pattern matches, in configuration
   order) the planner picks the records to examine (:mod:`processor.query.planner`) and
   the filter is evaluated over their memo-indexed field values;
2. an aggregated query groups the matches and computes its projection per group;
3. ``OrderBy`` sorts (mixed-type order, NULLs last ascending and first descending; ties
   and queries without OrderBy but with ``top_n``/``skip_n`` fall back to SowKey order),
   ``skip_n`` skips and ``top_n`` limits;
4. the chosen records' envelopes are copied out; they are decoded and batched after the
   lock is released.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from processor import changelog
from processor.errors import CatchingUpError, InvalidRequestError, PositionTimeoutError
from processor.expr import (
    Aggregation,
    ContextInput,
    Expression,
    FieldInput,
    compile_aggregation,
    extract,
    field_getter,
    order_key,
)
from processor.expr import compile as compile_expression
from processor.expr.ast import OrderKey
from processor.expr.clauses import parse_order_by
from processor.expr.operators import in_list
from processor.keys import checksum_key
from processor.log import LogPosition
from processor.messages.base import jsonable
from processor.query.planner import Plan, needs_scan, plan
from processor.replica.replica import Replica
from processor.replica.table import SowTable
from processor.security import OPEN, RequestContext
from processor.security.reads import read_restriction
from processor.topology.model import SowTopic, Topology
from processor.topology.topics import (
    is_pattern,
    resolve_topics,
    restricted,
    topic_restriction,
)

MAX_BATCH_SIZE = 10000
DEFAULT_BATCH_SIZE = 10
DEFAULT_TIMEOUT_S = 30.0
#: Index plans with at most this many candidates filter them from decoded messages.
FEW_CANDIDATES = 256


@dataclass(frozen=True, slots=True)
class SowQuery:
    """A ``sow`` command.

    ``topic`` is a SOW topic or a regular expression over topic names. ``filter`` is an
    AMPS expression; ``order_by`` is ``/field [ASC|DESC] [TEXT], ...``; ``projection``
    and ``grouping`` (both or neither) make it an aggregated query.
    """

    topic: str
    sow_keys: tuple[str, ...] = ()
    query_id: str = ""
    batch_size: int = 0
    min_position: tuple[LogPosition, ...] = ()
    timeout_s: float = 0.0
    filter: str = ""
    top_n: int = 0
    skip_n: int = 0
    order_by: str = ""
    grouping: str = ""
    projection: str = ""
    #: While the replica is catching up: wait for it (up to ``timeout_s``) rather than
    #: fail with CatchingUpError.
    wait_for_catch_up: bool = False


@dataclass(frozen=True, slots=True)
class QueryStats:
    """Counts reported in the group end: records examined (``topic_matches``), records
    that passed topic, keys and filter (``matches``), records sent, time spent in the
    query, and the plan each topic ran."""

    topic_matches: int
    matches: int
    records_returned: int
    elapsed_us: int
    plan: str = ""


@dataclass(slots=True)
class QueryResult:
    """A query's records, batched, and the position vector of the state it read.

    ``aggregated`` results are JSON messages computed by the query, not stored records.
    """

    query_id: str
    topic: str
    snapshot: list[LogPosition]
    batches: list[list[changelog.Envelope]] = field(default_factory=list)
    stats: QueryStats | None = None
    aggregated: bool = False


@dataclass(frozen=True, slots=True)
class PreparedQuery:
    """A validated, compiled query."""

    query: SowQuery
    topics: list[SowTopic]
    filter: Expression | None
    order: tuple[OrderKey, ...]
    aggregation: Aggregation | None
    sow_keys: tuple[bytes, ...]
    batch_size: int
    #: The caller's entitlement filter, compiled on its own (its text is the same for
    #: every query of the caller, so it is compiled once): a record must pass it too.
    entitlement: Expression | None = None


@dataclass(slots=True)
class _Selection:
    """What a query chose under the lock: envelopes (or aggregated rows) and counts."""

    def stats(self, returned: int, started: float, plan_prefix: str = "") -> QueryStats:
        """The query's counts once ``returned`` records are sent; ``started``: the
        ``perf_counter`` the query began at."""
        return QueryStats(
            topic_matches=self.examined,
            matches=self.matches,
            records_returned=returned,
            elapsed_us=int((time.perf_counter() - started) * 1e6),
            plan=plan_prefix + "; ".join(self.plans),
        )

    rows: list[tuple[str, bytes]] = field(default_factory=list)
    aggregated: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    examined: int = 0
    matches: int = 0
    plans: list[str] = field(default_factory=list)


class QueryEngine:
    """Runs SOW queries against the read replica. Thread-safe."""

    def __init__(self, topology: Topology, replica: Replica) -> None:
        self.topology = topology
        self.replica = replica

    def prepare(self, query: SowQuery, context: RequestContext = OPEN) -> PreparedQuery:
        """Check and compile a query before anything runs; raise a typed error naming the
        problem (InvalidRequestError and its ExpressionError branch, UnknownTopicError,
        NotEntitledError). The caller's entitlement filter (``context``) is AND-ed into
        the query's filter."""
        topics = resolve_topics(self.topology, query.topic)
        if query.batch_size < 0 or query.batch_size > MAX_BATCH_SIZE:
            raise InvalidRequestError(
                f"BatchSize {query.batch_size} is out of range: use 1 to {MAX_BATCH_SIZE} "
                f"(0 means the default, {DEFAULT_BATCH_SIZE})"
            )
        if query.top_n < 0 or query.skip_n < 0:
            raise InvalidRequestError(
                f"top_n and skip_n must not be negative (got top_n={query.top_n}, "
                f"skip_n={query.skip_n})"
            )
        if query.skip_n and not query.top_n:
            raise InvalidRequestError(
                f"skip_n ({query.skip_n}) requires top_n: page k of size n is "
                "top_n=n, skip_n=n*(k-1)"
            )
        expression = compile_expression(query.filter) if query.filter.strip() else None
        restriction = topic_restriction(self.topology, query.topic)
        if restriction is not None:  # a Pattern topic stores the topic with others
            expression = compile_expression(restricted(query.filter, restriction))
        entitled = read_restriction(context.rights, self.topology, query.topic)
        order = parse_order_by(query.order_by) if query.order_by.strip() else ()
        aggregation = None
        if query.projection.strip() or query.grouping.strip():
            if not (query.projection.strip() and query.grouping.strip()):
                raise InvalidRequestError(
                    "an aggregated query needs both projection and grouping "
                    f"(got projection={query.projection!r}, grouping={query.grouping!r})"
                )
            if len(topics) > 1 or (
                is_pattern(query.topic) and query.topic not in self.topology.topics
            ):
                raise InvalidRequestError(
                    f"an aggregated query reads one literal topic; {query.topic!r} is a "
                    "regular expression"
                )
            aggregation = compile_aggregation(query.projection, query.grouping)
        return PreparedQuery(
            query=query,
            topics=topics,
            filter=expression,
            order=order,
            aggregation=aggregation,
            sow_keys=tuple(k.encode() for k in query.sow_keys),
            batch_size=query.batch_size or DEFAULT_BATCH_SIZE,
            entitlement=None if entitled is None else compile_expression(entitled),
        )

    def run(self, query: SowQuery, context: RequestContext = OPEN) -> QueryResult:
        """Validate, check the replica has caught up (or wait for it when the query asks,
        or names a ``min_position``, which is asking to wait), wait for ``min_position``,
        select under the lock, and batch."""
        prepared = self.prepare(query, context)
        if not self.replica.caught_up():
            timeout = query.timeout_s or DEFAULT_TIMEOUT_S
            if not (query.wait_for_catch_up or query.min_position):
                raise CatchingUpError(
                    f"{self.replica.catch_up_status()}; retry shortly, or set "
                    "wait_for_catch_up to wait for it"
                )
            if not self.replica.wait_caught_up(timeout):
                raise CatchingUpError(
                    f"not caught up within {timeout:g}s: {self.replica.catch_up_status()}"
                )
        if query.min_position:
            timeout = query.timeout_s or DEFAULT_TIMEOUT_S
            if not self.replica.wait_for(query.min_position, timeout):
                raise PositionTimeoutError(
                    f"the SOW did not reach log positions {list(query.min_position)} within "
                    f"{timeout:g}s; the processor may be behind or stopped"
                )
        started = time.perf_counter()
        fields = memo_fields(prepared)
        if fields:
            for topic in prepared.topics:
                self.replica.build_memo_indexes(topic, fields)
        selection, vector = self.replica.read(
            prepared.topics, lambda tables: select(prepared, tables)
        )
        return query_result(query, prepared, selection, vector, started)


def query_result(
    query: SowQuery,
    prepared: PreparedQuery,
    selection: _Selection,
    vector: list[LogPosition],
    started: float,
    plan_prefix: str = "",
) -> QueryResult:
    """A selection as the query's result: decoded envelopes (or aggregated rows) in
    batches, with the stats; ``started`` is the ``perf_counter`` the query began at."""
    if prepared.aggregation is not None:
        envelopes = _aggregated_envelopes(prepared.topics[0], selection.aggregated)
    else:
        envelopes = [changelog.decode(envelope) for _, envelope in selection.rows]
    size = prepared.batch_size
    result = QueryResult(query.query_id, query.topic, vector)
    result.aggregated = prepared.aggregation is not None
    result.batches = batched(envelopes, size)
    result.stats = selection.stats(len(envelopes), started, plan_prefix)
    return result


def batched(envelopes: list[changelog.Envelope], size: int) -> list[list[changelog.Envelope]]:
    """Records in batches of ``size`` (the last may be shorter)."""
    return [envelopes[i : i + size] for i in range(0, len(envelopes), size)]


def memo_fields(prepared: PreparedQuery) -> list[FieldInput]:
    """The fields whose memo indexes the query will certainly read: OrderBy and
    aggregation fields, and the filter's fields when no index can answer it."""
    if prepared.aggregation is not None:
        # OrderBy then sorts the aggregated results, not stored records.
        fields = [i for i in prepared.aggregation.inputs if isinstance(i, FieldInput)]
    else:
        fields = [FieldInput(key.field.path, key.field.steps) for key in prepared.order]
    expression = prepared.filter
    if expression is not None and not prepared.sow_keys and needs_scan(expression.node):
        fields += [i for i in expression.inputs if isinstance(i, FieldInput)]
    if prepared.entitlement is not None:
        fields += [i for i in prepared.entitlement.inputs if isinstance(i, FieldInput)]
    return fields


def _matches(prepared: PreparedQuery, table: SowTable, selection: _Selection) -> list[bytes]:
    """The SowKeys of one table that pass keys and filter; counts what was examined."""
    expression = prepared.filter
    chosen = plan(table, None if expression is None else expression.node, prepared.sow_keys)
    candidates: Sequence[bytes] | dict[bytes, bytes]
    candidates = table.envelopes if chosen.candidates is None else chosen.candidates
    selection.examined += len(candidates)
    name = chosen.name
    if expression is None:
        matched = list(candidates)
    elif chosen.candidates is not None and len(candidates) <= FEW_CANDIDATES:
        matched = _check_few(expression, chosen, table)
    else:
        columns = [table.column(i, candidates) for i in expression.inputs]
        # Over a whole table every column holds every record in record order.
        matched = expression.scan(candidates, columns, aligned=chosen.candidates is None)
    entitlement = prepared.entitlement
    if entitlement is not None:  # what the caller may see, of what its query chose
        if len(matched) <= FEW_CANDIDATES:
            matched = _passing(entitlement, matched, table)
        else:
            columns = [table.column(i, matched) for i in entitlement.inputs]
            matched = entitlement.scan(matched, columns, aligned=False)
    selection.matches += len(matched)
    selection.plans.append(name if len(prepared.topics) == 1 else f"{table.topic.name}: {name}")
    return matched


def _check_few(expression: Expression, chosen: Plan, table: SowTable) -> list[bytes]:
    """Filter a few candidates from their decoded messages: cheaper than building memo
    indexes or generating scan code for a filter that an index answered."""
    assert chosen.candidates is not None
    if chosen.membership is not None:
        tests = [(field_getter(steps), values) for steps, values in chosen.membership]
        return [
            sow_key
            for sow_key, message in table.messages(chosen.candidates)
            if all(in_list(get(message), values) for get, values in tests)
        ]
    return _passing(expression, list(chosen.candidates), table)


def _passing(expression: Expression, sow_keys: list[bytes], table: SowTable) -> list[bytes]:
    """The records among ``sow_keys`` that ``expression`` matches, from their messages."""
    needs_context = any(isinstance(i, ContextInput) for i in expression.inputs)
    return [
        sow_key
        for sow_key, message in table.messages(sow_keys)
        if expression.matches(message, table.context(sow_key) if needs_context else None)
    ]


def _order(
    rows: list[Any],
    prepared: PreparedQuery,
    value_of: Callable[[Any, OrderKey], Any],
    tie: Callable[[Any], Any],
) -> list[Any]:
    """Sort rows by OrderBy (``value_of(row, key)`` is a row's value for one OrderKey),
    ties (and everything, without OrderBy but with top_n or skip_n) in ``tie`` order;
    then skip_n and top_n."""
    query = prepared.query
    if prepared.order or query.top_n or query.skip_n:
        rows.sort(key=tie)
        for key in reversed(prepared.order):
            rows.sort(
                key=lambda row: order_key(value_of(row, key), key.text), reverse=key.descending
            )
    if query.top_n:
        return rows[query.skip_n : query.skip_n + query.top_n]
    return rows


def select(prepared: PreparedQuery, tables: list[SowTable]) -> _Selection:
    """Choose a query's results from the tables (called under the replica's lock)."""
    selection = _Selection()
    aggregation = prepared.aggregation
    if aggregation is not None:
        table = tables[0]
        matched = _matches(prepared, table, selection)
        columns = [table.column(i, matched) for i in aggregation.inputs]
        groups: dict[tuple[Any, ...], Any] = {}
        for sow_key in matched:
            values = [column.get(sow_key) for column in columns]
            group = aggregation.group_key(values)
            accumulator = groups.get(group)
            if accumulator is None:
                accumulator = groups[group] = aggregation.accumulator()
            accumulator.add(values)
        rows = [(aggregate_key(table.topic, group), acc.result()) for group, acc in groups.items()]
        selection.aggregated = _order(
            rows, prepared, lambda row, key: extract(row[1], key.field.steps), lambda r: r[0]
        )
        return selection
    # (topic's place in the configuration, SowKey, table): ties keep topics in
    # configuration order and SowKey order within a topic.
    keyed: list[tuple[int, bytes, SowTable]] = []
    for place, table in enumerate(tables):
        keyed.extend((place, sow_key, table) for sow_key in _matches(prepared, table, selection))
    memos = {
        (place, key): table.memo_index(key.field.steps, key.field.path).values
        for place, table in enumerate(tables)
        for key in prepared.order
    }
    keyed = _order(
        keyed,
        prepared,
        lambda row, key: memos[(row[0], key)].get(row[1]),
        lambda row: (row[0], row[1]),
    )
    selection.rows = [(table.topic.name, table.envelopes[sow_key]) for _, sow_key, table in keyed]
    return selection


def aggregate_key(topic: SowTopic, group: tuple[Any, ...]) -> str:
    """The SowKey of an aggregated row: its group's values in the topic's key domain."""
    return checksum_key(f"{topic.domain}/aggregate", group)


def aggregated_envelope(
    topic: SowTopic, sow_key: str, message: dict[str, Any], now_ms: int
) -> changelog.Envelope:
    """An aggregated row as a record: a JSON message computed now, at no log position
    (values JSON lacks, such as a binary field's bytes, as :func:`jsonable` writes them)."""
    return changelog.Envelope(
        topic=topic.name,
        message_type="json",
        log_topic="",
        log_partition=0,
        log_offset=-1,
        sow_key=sow_key,
        data=orjson.dumps(message, default=jsonable),
        publish_time_ms=now_ms,
        apply_time_ms=now_ms,
    )


def _aggregated_envelopes(
    topic: SowTopic, rows: list[tuple[str, dict[str, Any]]]
) -> list[changelog.Envelope]:
    now_ms = int(time.time() * 1000)
    return [aggregated_envelope(topic, sow_key, message, now_ms) for sow_key, message in rows]
