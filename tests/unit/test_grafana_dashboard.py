"""The Grafana dashboard the Helm chart ships (helm/kafka-sow/dashboards/kafka-sow.json,
issue 35): every metric its PromQL names is one the product exports, and its structure is
what Grafana and its sidecar need.

The exported series come from a real scrape, not a list kept by hand: a broker-free
application (memory log, RocksDB stores) with a SOW topic and a queue serves its /metrics
endpoint, built as every process builds it (processor/app: ComponentCollector, the
cluster's ConditionCollector, RefusalCollector, RequestMetrics); one gRPC call gives the
histogram its samples, and a ClusterWatch judged from fake broker metadata makes the
cluster's figures appear (they are exported only while a Kafka cluster is watched).
Each family's type gives its series: a counter ``<name>_total``, a histogram
``<name>_bucket``, ``_sum`` and ``_count``.

The PromQL expressions are read with a small tokenizer (below): strings, label matchers,
range and subquery brackets, numbers and durations are dropped, as are functions,
aggregation operators, keywords and the labels of grouping clauses; what is left names
series.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from processor.client.sow_client import SowClient
from processor.log.kafka.condition import ClusterWatch
from processor.log.kafka.settings import Refusals
from processor.testing import start_memory
from processor.topology.loader import load_topology
from tests.unit.test_broker_condition import ALL, Clock, FakeAdmin, metadata

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "kafka-sow" / "dashboards" / "kafka-sow.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# --- PromQL: the names of the series an expression selects -------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: PromQL functions (Prometheus 3), and ``start``/``end`` of the ``@`` modifier.
FUNCTIONS = _words(
    """
    abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
    clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year
    days_in_month deg delta deriv double_exponential_smoothing end exp floor histogram_avg
    histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
    histogram_sum holt_winters hour idelta increase info irate label_join label_replace
    last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
    predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn
    sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt start stddev_over_time
    stdvar_over_time sum_over_time tan tanh time timestamp vector year
    """
)
#: Aggregation operators.
AGGREGATIONS = _words(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile "
    "limitk limit_ratio"
)
#: Clauses followed by a parenthesised list of labels (``group_left`` may have none).
GROUPING = _words("by without on ignoring group_left group_right")
#: Keywords that are neither series nor functions.
KEYWORDS = _words("and or unless bool offset atan2 inf nan")

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)
    | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<variable>\$\{\w+(?::\w+)?\}|\$\w+)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<matchers>\{(?:[^{}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\})
    | (?P<range>\[[^\[\]]*\])
    | (?P<op>==|!=|<=|>=|[-+*/%^<>(),@])
    """,
    re.VERBOSE,
)
#: A label matcher, inside braces: ``label op "value"`` (or a bare quoted metric name).
_MATCHER = re.compile(
    r"""\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*)?(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*"""
)
#: The inside of a range or subquery: ``5m``, ``$__rate_interval``, ``1h:1m``, ``5m:``.
_RANGE_PART = r"\s*(?:(?:\d+(?:ms|[smhdwy]))+|\$\{?\w+\}?)\s*"
_RANGE = re.compile(rf"\[{_RANGE_PART}(?::(?:{_RANGE_PART})?)?\]")


class PromQLError(ValueError):
    """An expression the tokenizer cannot read."""


def tokens(expr: str) -> list[tuple[str, str]]:
    """``expr`` as (kind, text) pairs, spaces dropped; PromQLError on anything else."""
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(expr):
        match = _TOKEN.match(expr, at)
        if match is None:
            raise PromQLError(f"cannot read {expr[at : at + 20]!r} in {expr!r}")
        kind, text = match.lastgroup or "", match.group()
        if kind == "matchers":
            inside = text[1:-1].strip().rstrip(",")
            if inside and not all(_MATCHER.fullmatch(part) for part in _split_matchers(inside)):
                raise PromQLError(f"bad label matchers {text!r} in {expr!r}")
        if kind == "range" and not _RANGE.fullmatch(text):
            raise PromQLError(f"bad range {text!r} in {expr!r}")
        if kind != "space":
            found.append((kind, text))
        at = match.end()
    return found


def _split_matchers(inside: str) -> list[str]:
    """The matchers between braces, split at the commas outside their quoted values."""
    parts = re.findall(r"""(?:[^,"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)+""", inside)
    return [part for part in parts if part.strip()]


def series_names(expr: str) -> list[str]:
    """The metric names ``expr`` selects, in order of appearance (repeats kept)."""
    found: list[str] = []
    items = tokens(expr)
    depth = 0
    i = 0
    while i < len(items):
        kind, text = items[i]
        following = items[i + 1] if i + 1 < len(items) else ("", "")
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth < 0:
                raise PromQLError(f"unbalanced ')' in {expr!r}")
        elif kind == "ident":
            word = text.lower()
            if word in GROUPING:
                if following[1] == "(":  # the labels: skip to the closing parenthesis
                    close = items.index(("op", ")"), i + 2)
                    for label_kind, label in items[i + 2 : close]:
                        if label_kind != "ident" and label != ",":
                            raise PromQLError(f"bad label list after {text!r} in {expr!r}")
                    i = close
                elif word not in ("group_left", "group_right"):
                    raise PromQLError(f"{text!r} without its labels in {expr!r}")
            elif word in KEYWORDS:
                pass
            elif following[1] == "(" or (word in AGGREGATIONS and following[1] in GROUPING):
                if text not in FUNCTIONS and text not in AGGREGATIONS:
                    raise PromQLError(f"unknown function {text!r} in {expr!r}")
            else:
                found.append(text)
        i += 1
    if depth:
        raise PromQLError(f"unbalanced '(' in {expr!r}")
    return found


def unexported(expr: str, exported: set[str]) -> list[str]:
    """The series ``expr`` names that the product does not export."""
    return [name for name in series_names(expr) if name not in exported]


# --- What the product exports: a real scrape -----------------------------------------------

TOPOLOGY = """
topics:
  - {name: ORDERS, key: /id}
  - {name: ORDERS_IN, sow: false, message_type: json}
queues:
  - name: WORK
    message_type: json
    underlying: ORDERS_IN
    default_publish_target: ORDERS_IN
"""


def _watched_cluster() -> ClusterWatch:
    """A watch of a healthy three-broker cluster (fake metadata), judged: its figures show."""
    clock, admin = Clock(), FakeAdmin()
    watch = ClusterWatch("b:9092", ["t"], clock=clock, poll_s=0.001, probe=lambda _: set())
    admin.answer = metadata(ALL, {("t", 0): (1, ALL, ALL)})
    for _ in range(3):
        watch.poll(admin, Refusals("test"))
        clock.now += 1
    assert watch.active
    return watch


@pytest.fixture(scope="module")
def exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What a process's /metrics answers after a publish and a query."""
    folder = tmp_path_factory.mktemp("dashboard")
    (folder / "topology.yaml").write_text(TOPOLOGY)
    topology = load_topology(folder / "topology.yaml")
    app = start_memory(topology, folder / "state", metrics_address="127.0.0.1:0")
    try:
        deadline = time.monotonic() + 30
        while app.readiness() is not None:
            assert time.monotonic() < deadline, app.readiness()
            time.sleep(0.05)
        with SowClient(app.grpc_address) as client:
            reply = client.publish("ORDERS", b'{"id": 1}')
            client.query("ORDERS", min_position=[reply.position])
        app.cluster = _watched_cluster()  # what its ConditionCollector reads
        assert app.observer is not None
        url = f"http://{app.observer.address}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text: str = answer.read().decode()
        return text
    finally:
        app.stop()


#: The series of each metric type (prometheus_client names a counter family without _total).
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "unknown": ("",),
}


def families(text: str) -> dict[str, str]:
    """Family name -> type, of Prometheus text."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def series_of(text: str) -> set[str]:
    """Every series name the exposition ``text`` has or, for a family without samples yet
    (a queue without subscribers, no call refused), would have."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def exported(exposition: str) -> set[str]:
    return series_of(exposition)


# --- The dashboard ------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        assert text == variable["definition"], variable["name"]
        called = re.fullmatch(r"(label_values|query_result)\((.*)\)", text.strip(), re.DOTALL)
        assert called is not None, f"variable {variable['name']}: {text}"
        inner = called.group(2)
        if called.group(1) == "label_values":
            inner = inner.rpartition(",")[0] if "," in inner else ""
        yield f"variable {variable['name']!r}", inner


# --- Tests ---------------------------------------------------------------------------------


def test_the_tokenizer_finds_the_series_and_only_them() -> None:
    assert series_names(
        "histogram_quantile(0.99, sum by (le, method) "
        '(rate(sow_grpc_request_seconds_bucket{job=~"$job", code!="a}b,c"}[$__rate_interval])))'
    ) == ["sow_grpc_request_seconds_bucket"]
    assert series_names(
        "sum(rate(a_total[5m] offset 1h30m)) / on (instance) group_left (pod) "
        "max without (topic) (b) > bool 0.5e3 or vector(0) unless c @ end()"
    ) == ["a_total", "b", "c"]
    assert series_names("sum(x) by (topic) + topk(5, y[1h:5m]) - count by (q) (z)") == [
        "x",
        "y",
        "z",
    ]
    assert series_names('label_replace(up, "dst", "$1", "src", "(.*)")') == ["up"]
    assert series_names('{__name__="a"}') == []  # no name outside the braces
    for wrong in (
        "rate(x[5m]",  # unbalanced
        "sum by topic (x)",  # a grouping clause without its labels
        "rates(x[5m])",  # no such function
        "x{job=~$job}",  # an unquoted matcher value
        "x[5 minutes]",  # not a duration
        "x # y",
    ):
        with pytest.raises(PromQLError):
            series_names(wrong)


def test_every_series_the_dashboard_names_is_one_the_product_exports(
    exported: set[str],
) -> None:
    checked = 0
    for where, expr in expressions(dashboard()):
        assert unexported(expr, exported) == [], f"{where}: {expr}"
        checked += len(series_names(expr))
    assert checked > 50


def test_the_check_catches_a_series_the_product_does_not_export(exported: set[str]) -> None:
    """Tampered expressions: a counter without its _total, a histogram's family name, a
    gauge with one, a misspelt name; a label of a grouping clause is not taken for one."""
    good = "sum by (topic) (rate(sow_topic_changes_total[5m]))"
    assert unexported(good, exported) == []
    for wrong, name in (
        ("sum(rate(sow_processor_records[5m]))", "sow_processor_records"),
        ("histogram_quantile(0.9, rate(sow_grpc_request_seconds[5m]))", "sow_grpc_request_seconds"),
        ("sum(sow_records_total)", "sow_records_total"),
        (
            good.replace("sow_topic_changes_total", "sow_topic_change_total"),
            "sow_topic_change_total",
        ),
    ):
        assert unexported(wrong, exported) == [name]
    assert unexported("sum by (sow_nothing) (sow_records)", exported) == []
    # and the dashboard itself, tampered
    board = dashboard()
    target = next(t for p in panels(board) for t in p.get("targets", []))
    target["expr"] = target["expr"].replace("sow_", "sow_x_", 1)
    assert any(unexported(expr, exported) for _, expr in expressions(board))


def test_the_scrape_has_every_kind_of_figure(exposition: str, exported: set[str]) -> None:
    """The scrape the check relies on covers each collector: components, queues, the
    cluster, refusals and gRPC requests; a counter's and a histogram's series are those
    prometheus_client writes."""
    kinds = families(exposition)
    assert kinds["sow_processor_records"] == "counter"
    assert kinds["sow_queue_messages"] == "gauge"
    assert kinds["sow_grpc_request_seconds"] == "histogram"
    for name in (
        "sow_processor_records_total",
        "sow_replica_staleness_seconds",
        "sow_subscription_backlog",
        "sow_queue_subscriber_backlog",
        "sow_broker_blocking_seconds_total",
        "sow_refused_calls_total",
        "sow_grpc_requests_total",
        "sow_grpc_request_seconds_bucket",
        "sow_grpc_request_seconds_count",
    ):
        assert name in exported, name
    assert re.search(r'^sow_grpc_request_seconds_bucket\{le="0.005",', exposition, re.M)
    assert "sow_processor_records" not in exported


def test_every_family_the_product_exports_has_a_panel(exposition: str) -> None:
    """A metric added to the product without a panel fails here: add one to the dashboard
    (and its line to docs/operations.md)."""
    named = {name for _, expr in expressions(dashboard()) for name in series_names(expr)}
    kinds = families(exposition)
    # prometheus_client writes a Counter's and a Histogram's start time beside it, as a
    # family of its own (sow_grpc_requests_created): not worth a panel
    stamps = {f"{family}_created" for family, kind in kinds.items() if kind != "gauge"}
    shown = {
        family
        for family, kind in kinds.items()
        if any(family + suffix in named for suffix in SUFFIXES[kind])
    }
    assert sorted(set(kinds) - shown - stamps) == []


def test_the_dashboard_is_what_grafana_and_its_sidecar_load() -> None:
    board = dashboard()
    assert board["uid"] == "kafka-sow"
    assert board["title"] == "kafka-sow"
    assert board["id"] is None  # provisioned: Grafana gives it one
    assert board["time"]["from"].startswith("now-")
    assert board["time"]["to"] == "now"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    all_panels = list(panels(board))
    ids = [panel["id"] for panel in all_panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    graphs = [panel for panel in all_panels if panel["type"] != "row"]
    assert len(graphs) >= 25
    for panel in graphs:
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert panel.get("description"), title
        assert panel["targets"], title
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), title
        for target in panel["targets"]:
            assert target["expr"].strip(), title
            assert target["datasource"] == DATASOURCE, title
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, title
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    # every $variable an expression uses is defined (or one of Grafana's own)
    used = {
        name
        for _, expr in expressions(board)
        for name in re.findall(r"\$\{?(\w+)", expr)
        if not name.startswith("__")
    }
    assert used <= set(variables), used - set(variables)
    # no two panels overlap on the grid
    cells: set[tuple[int, int]] = set()
    for panel in all_panels:
        position = panel["gridPos"]
        mine = {
            (position["x"] + dx, position["y"] + dy)
            for dx in range(position["w"])
            for dy in range(position["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine
