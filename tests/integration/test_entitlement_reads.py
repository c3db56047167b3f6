"""Every read path through an entitlement filter, against a model (issue 32).

Random records, a random user filter and a random entitlement filter: a query, an
aggregated query, a paginated window, a sow_and_subscribe followed by random publishes,
updates and deletes (with OOF, and as a delta subscription), a historical query, a
bookmark replay and a queue subscription each return exactly the records matching both
filters, nothing more. The service runs on the memory log with its real processor,
RocksDB stores, replica, query engine, subscription hub and queue hub; the reads go to
them with the request context a transport would build for an entitled principal.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor import changelog
from processor.app import Application
from processor.client.sow_client import SowClient
from processor.query.historical import point_of, run_historical
from processor.query.sow import SowQuery
from processor.security import Principal, RequestContext
from processor.security.entitlements import Definitions
from processor.subscriptions.model import ChangeKind, SubscribeRequest
from processor.testing import start_memory
from processor.topology.loader import load_topology

DESKS = ("FX", "RATES", "EQ")
TOPOLOGY = """
topics:
  - {name: orders, message_type: json, key: /id, partitions: 2,
     history: {window: 1h, granularity: 0s}}
  - {name: jobs, sow: false}
queues:
  - {name: work, message_type: json, underlying: jobs}
"""


@dataclass(frozen=True)
class Filter:
    """An AMPS filter and the same predicate in Python (the model)."""

    text: str
    test: Callable[[dict[str, Any]], bool]


def _desk(desk: str) -> Filter:
    return Filter(f"/desk = '{desk}'", lambda m: m["desk"] == desk)


def _qty_above(bound: int) -> Filter:
    return Filter(f"/qty > {bound}", lambda m: m["qty"] > bound)


def _between(low: int, high: int) -> Filter:
    return Filter(f"/qty BETWEEN {low} AND {high}", lambda m: low <= m["qty"] <= high)


def _desks(chosen: tuple[str, ...]) -> Filter:
    listed = ", ".join(f"'{d}'" for d in chosen)
    return Filter(f"/desk IN ({listed})", lambda m: m["desk"] in chosen)


NO_PX = Filter("/px IS NULL", lambda m: m.get("px") is None)

atoms = st.one_of(
    st.sampled_from(DESKS).map(_desk),
    st.integers(0, 9).map(_qty_above),
    st.tuples(st.integers(0, 9), st.integers(0, 9)).map(lambda b: _between(min(b), max(b))),
    st.lists(st.sampled_from(DESKS), min_size=1, max_size=2, unique=True).map(
        lambda d: _desks(tuple(d))
    ),
    st.just(NO_PX),
)


def _both(a: Filter, b: Filter, how: str) -> Filter:
    if how == "AND":
        return Filter(f"({a.text}) AND ({b.text})", lambda m: a.test(m) and b.test(m))
    return Filter(f"({a.text}) OR ({b.text})", lambda m: a.test(m) or b.test(m))


filters = st.one_of(
    atoms,
    st.tuples(atoms, atoms, st.sampled_from(["AND", "OR"])).map(lambda t: _both(*t)),
)
records = st.fixed_dictionaries(
    {
        "desk": st.sampled_from(DESKS),
        "qty": st.integers(0, 9),
        "px": st.one_of(st.none(), st.integers(1, 5)),
    }
)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Application, SowClient]]:
    directory = tmp_path_factory.mktemp("entitled-reads")
    path = directory / "topology.yaml"
    path.write_text(TOPOLOGY)
    app = start_memory(load_topology(path), directory / "state")
    deadline = time.monotonic() + 60
    while app.readiness() is not None:
        assert time.monotonic() < deadline, app.readiness()
        time.sleep(0.05)
    client = SowClient(app.grpc_address)
    try:
        yield app, client
    finally:
        client.close()
        app.stop()


RUNS = itertools.count(1)


def _caller(entitlement: Filter | None) -> RequestContext:
    grant: dict[str, Any] = {"topic": "orders|work"}
    if entitlement is not None:
        grant["filter"] = entitlement.text
    definitions = Definitions.parse(
        {"principals": {"user": {"logon": True, "read": [grant], "acknowledge": ["work"]}}},
        "test",
    )
    return RequestContext(Principal("user"), definitions.rights_for(Principal("user")))


class Model:
    """The SOW of one example's records (its run number keeps them apart from others')."""

    def __init__(self, run: int, user: Filter, entitlement: Filter | None) -> None:
        self.run, self.user, self.entitlement = run, user, entitlement
        self.records: dict[int, dict[str, Any]] = {}

    def allowed(self, message: dict[str, Any]) -> bool:
        return self.entitlement is None or self.entitlement.test(message)

    def visible(self, message: dict[str, Any]) -> bool:
        return self.user.test(message) and self.allowed(message)

    def expected(self) -> dict[int, dict[str, Any]]:
        return {i: m for i, m in self.records.items() if self.visible(m)}

    def filter_text(self) -> str:
        return f"/run = {self.run} AND ({self.user.text})"


def _publish(client: SowClient, model: Model, ident: int, body: dict[str, Any]) -> Any:
    message = {"id": f"{model.run}-{ident}", "run": model.run, **body}
    model.records[ident] = message
    return client.publish("orders", orjson.dumps(message), ack="processed")


def _delete(client: SowClient, model: Model, ident: int) -> None:
    del model.records[ident]
    client.delete("orders", filter=f"/id = '{model.run}-{ident}'")


def _ids(envelopes: list[Any]) -> dict[int, dict[str, Any]]:
    found = {}
    for envelope in envelopes:
        message = orjson.loads(envelope.data)
        found[int(message["id"].split("-")[1])] = message
    return found


def _query(app: Application, model: Model, caller: RequestContext, **extra: Any) -> Any:
    hub = app.subscriptions
    assert hub is not None
    query = SowQuery(topic="orders", filter=model.filter_text(), batch_size=10_000, **extra)
    return hub.engine.run(query, caller)


def _checked_subscription_view(
    notices: list[Any], start: dict[int, dict[str, Any]], model: Model
) -> dict[int, Any]:
    """The subscriber's records after its notices; no publish outside its rights."""
    view = dict(start)
    for notice in notices:
        message = orjson.loads(changelog.data_of(notice.envelope))
        ident = int(message["id"].split("-")[1])
        if notice.kind is ChangeKind.PUBLISH:
            assert model.allowed(message), f"a publish outside the entitlement: {message}"
            view[ident] = message
        else:
            assert notice.current is None  # its new state may be outside the rights
            assert model.allowed(message), f"an OOF carrying a body outside it: {message}"
            view.pop(ident, None)
    return view


#: One example: the first records, later changes, the user's filter, the entitlement
#: filter (None: a read grant without one) and whether the subscription is a delta one.
EXAMPLE = {
    "first": st.lists(records, min_size=1, max_size=12),
    "later": st.lists(
        st.tuples(st.sampled_from(["publish", "delete"]), st.integers(0, 15), records),
        max_size=12,
    ),
    "user": filters,
    "entitlement": st.one_of(st.none(), filters),
    "delta": st.booleans(),
}
QUIET = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=12, deadline=None, suppress_health_check=QUIET)  # heavy: 300
@given(**EXAMPLE)
def test_every_read_path_returns_exactly_what_both_filters_match(
    service: tuple[Application, SowClient], **example: Any
) -> None:
    check_every_read_path(service, **example)


@pytest.mark.heavy
@settings(max_examples=300, deadline=None, suppress_health_check=QUIET)
@given(**EXAMPLE)
def test_every_read_path_through_many_more_examples(
    service: tuple[Application, SowClient], **example: Any
) -> None:
    check_every_read_path(service, **example)


def check_every_read_path(
    service: tuple[Application, SowClient],
    first: list[dict[str, Any]],
    later: list[tuple[str, int, dict[str, Any]]],
    user: Filter,
    entitlement: Filter | None,
    delta: bool,
) -> None:
    app, client = service
    hub = app.subscriptions
    assert hub is not None
    model = Model(next(RUNS), user, entitlement)
    caller = _caller(entitlement)
    for ident, body in enumerate(first):
        _publish(client, model, ident, body)
    before = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    time.sleep(0.002)
    expected_before = model.expected()

    # A query, and an aggregated one.
    result = _query(app, model, caller)
    assert _ids([e for b in result.batches for e in b]) == expected_before
    grouped = _query(app, model, caller, projection="/desk, COUNT(/id) AS /n", grouping="/desk")
    counts = {
        orjson.loads(e.data)["desk"]: orjson.loads(e.data)["n"] for b in grouped.batches for e in b
    }
    wanted: dict[str, int] = {}
    for message in expected_before.values():
        wanted[message["desk"]] = wanted.get(message["desk"], 0) + 1
    assert counts == wanted

    # A paginated window: the top three by quantity among what both filters match.
    window, phase = hub.sow_and_subscribe(
        SubscribeRequest(
            topic="orders", filter=model.filter_text(), top_n=3, skip_n=0, order_by="/qty DESC"
        ),
        None,
        caller,
    )
    shown = _ids([e for b in phase.batches for e in b])
    assert all(model.visible(m) for m in shown.values())
    top = sorted((m["qty"] for m in expected_before.values()), reverse=True)[:3]
    assert sorted((m["qty"] for m in shown.values()), reverse=True) == top
    hub.unsubscribe(window)

    # sow_and_subscribe, then later changes.
    subscription, opening = hub.sow_and_subscribe(
        SubscribeRequest(topic="orders", filter=model.filter_text(), oof=True, delta=delta),
        None,
        caller,
    )
    start = _ids([e for b in opening.batches for e in b])
    assert start == expected_before
    last = None
    for action, ident, body in later:
        if action == "delete":
            if ident in model.records:
                _delete(client, model, ident)
            continue
        last = _publish(client, model, ident, body)  # an update when ident is held
    if last is not None:
        client.query("orders", filter="1=0", min_position=[last.position], timeout=30)
    notices: list[Any] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        taken = subscription.take(1000, 0.2)
        notices.extend(taken)
        if not taken and time.monotonic() > deadline - 4.5:
            break
    hub.unsubscribe(subscription)
    assert _checked_subscription_view(notices, start, model) == model.expected()

    # A bookmark replay from before the later changes: each replayed publish is one
    # both filters match, and each such later publish is replayed.
    replaying, replay = hub.subscribe_replaying(
        SubscribeRequest(topic="orders", filter=model.filter_text(), bookmark=before),
        None,
        caller,
    )
    replayed = set()
    for deliveries in replay:
        for notice in deliveries:
            message = orjson.loads(changelog.data_of(notice.envelope))
            assert model.allowed(message), f"replayed outside the entitlement: {message}"
            if notice.kind is ChangeKind.PUBLISH:
                assert model.user.test(message)
                replayed.add((message["id"], message["desk"], message["qty"], message["px"]))
    hub.unsubscribe(replaying)
    wanted = {
        (f"{model.run}-{ident}", body["desk"], body["qty"], body["px"])
        for action, ident, body in later
        if action == "publish" and model.visible(body)
    }
    assert replayed == wanted

    # The SOW as of before the later changes (a historical query).
    point = point_of(before)
    assert point is not None
    past = run_historical(
        hub.engine,
        SowQuery(topic="orders", filter=model.filter_text(), batch_size=10_000),
        point,
        caller,
    )
    assert _ids([e for b in past.batches for e in b]) == expected_before


def test_a_queue_subscriber_leases_only_what_both_filters_match(
    service: tuple[Application, SowClient],
) -> None:
    app, client = service
    queues = app.queues
    assert queues is not None
    entitlement = _desks(("FX", "EQ"))
    caller = _caller(entitlement)
    consumer = queues.subscribe("work", "/qty > 3", None, caller)
    try:
        published = []
        for index in range(60):
            message = {"n": index, "desk": DESKS[index % 3], "qty": index % 10}
            client.publish("jobs", orjson.dumps(message))
            published.append(message)
        wanted = {m["n"] for m in published if m["qty"] > 3 and entitlement.test(m)}
        leased: set[int] = set()
        deadline = time.monotonic() + 30
        while leased != wanted and time.monotonic() < deadline:
            try:
                delivery = consumer.inbox.get(timeout=0.5)
            except Exception:  # queue.Empty: nothing yet
                continue
            assert delivery is not None
            message = orjson.loads(changelog.decode(delivery.envelope).data)
            assert message["n"] in wanted, f"leased outside both filters: {message}"
            leased.add(message["n"])
            consumer.ack([delivery.bookmark])
        assert leased == wanted
    finally:
        consumer.close()
