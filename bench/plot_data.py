"""What each picture of bench/plots.py shows, read from bench/results/.

Each function reads one result file and returns plain data (a Panel of bars, latency
rows, series), labelled with the run's date and broker; a file that is missing or not
shaped as expected raises (results_io.MissingResultError, KeyError, ...) and the caller
leaves that part out with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

from results_io import Results, Run, median, need, run_of


@dataclass(frozen=True)
class Panel:
    """Bars of one run: kafka-sow's first, then what it stands beside."""

    title: str
    unit: str
    bars: list[tuple[str, float]]
    run: Run


@dataclass(frozen=True)
class Latency:
    """One path's p50 and p99 in one run."""

    label: str
    p50: float
    p99: float
    run: Run
    #: A peer's figure (drawn hatched), not kafka-sow's.
    peer: bool = False


@dataclass(frozen=True)
class Groups:
    """Grouped bars or lines: one value per (group, series)."""

    title: str
    unit: str
    groups: list[str]
    series: dict[str, list[float]]
    run: Run


# Throughput beside peers --------------------------------------------------------------


def ingest_panel(results: Results, rel: str) -> Panel:
    data = need(results, rel)
    names = {
        "kafka_sow": "kafka-sow",
        "kafka_sow_rekey": "kafka-sow re-keyed",
        "kstreams": "Kafka Streams",
        "quixstreams": "quixstreams",
        "faust": "faust",
    }
    bars = [
        (names.get(r["bench_engine"], r["engine"]), r["msgs_per_s"])
        for r in data["results"]
        if r.get("ok")
    ]
    messages = data["workload"]["messages"]
    return Panel(f"Ingest, {messages:,} messages", "msgs/s", bars, run_of(results, rel))


def views_panel(results: Results, rel: str) -> Panel:
    data = need(results, rel)
    names = {"kafka_sow": "kafka-sow View", "kstreams": "Kafka Streams"}
    bars = [(names.get(r["engine"], r["engine"]), r["msgs_per_s"]) for r in data["results"]]
    conflation = data["workload"]["conflation"]
    return Panel(f"View backlog, Conflation {conflation}", "records/s", bars, run_of(results, rel))


def queue_panel(results: Results, rel: str, consumers: int) -> Panel:
    rows = {r["engine"]: r for r in need(results, rel)["rows"] if r["consumers"] == consumers}
    bars = [
        ("kafka-sow queue", rows["kafka_sow"]["messages_per_s"]),
        ("share group", rows["share_group"]["messages_per_s"]),
        ("consumer group", rows["consumer_group"]["messages_per_s"]),
    ]
    return Panel(f"Queue, {consumers} consumers", "msgs/s", bars, run_of(results, rel))


# Throughput beside the raw client or a baseline ----------------------------------------


def publish_panel(results: Results, rel: str) -> Panel:
    data = need(results, rel)
    bars = [
        ("streaming publish", data["streaming"]["msgs_per_s"]),
        ("unary, 8 clients", data["unary"]["msgs_per_s"]),
        ("raw producer", data["raw_producer"]["msgs_per_s"]),
    ]
    return Panel("Publish through sow serve", "msgs/s", bars, run_of(results, rel))


def direct_panel(results: Results, rel: str) -> Panel:
    medians = need(results, rel)["medians_msgs_per_s"]
    bars = [
        ("DirectPublisher", medians["direct"]),
        ("acked raw (floor)", medians["acked"]),
        ("raw producer", medians["raw"]),
    ]
    return Panel("Direct Kafka publisher", "msgs/s", bars, run_of(results, rel))


def scan_panel(results: Results, rel: str) -> Panel:
    scan = need(results, rel)["scans"][0]
    bars = [
        ("kafka-sow scan", scan["kafka_sow_per_s"]),
        ("orjson + predicate", scan["orjson_baseline_per_s"]),
        ("json + predicate", scan["json_baseline_per_s"]),
    ]
    return Panel(f"Filter scan {scan['filter']}", "records/s", bars, run_of(results, rel))


def replay_panel(results: Results, rel: str) -> Panel:
    replay = need(results, rel)["replay"]
    bars = [
        ("replay", replay["unfiltered"]["records_per_s"]),
        ("replay, 10% filter", replay["filter_10pct"]["records_per_s"]),
        ("raw read", replay["raw_read_records_per_s"]),
    ]
    return Panel("Bookmark replay, 1M records", "records/s", bars, run_of(results, rel))


def spark_panel(results: Results, rel: str) -> Panel:
    data = need(results, rel)
    bars = [
        ("Spark count", data["spark_count_rows_per_s"]),
        ("Spark aggregate", data["spark_aggregate_rows_per_s"]),
        ("1 process count", data["baseline_count_rows_per_s"]),
        ("1 process aggregate", data["baseline_aggregate_rows_per_s"]),
    ]
    return Panel("PySpark reader, 1M records", "rows/s", bars, run_of(results, rel))


def delta_panel(results: Results, rel: str) -> Panel:
    by_name = {r["name"]: r["records_per_s"] for r in need(results, rel)["runs"]}
    bars = [
        ("delta_publish", by_name["delta_publish"]),
        ("full publish", by_name["publish (full)"]),
    ]
    return Panel("Processor: deltas vs full", "records/s", bars, run_of(results, rel))


# Latency percentiles per path ------------------------------------------------------------


def subscriber_latency(results: Results, rel: str, delivery: str) -> list[Latency]:
    """Publish -> one subscriber, per rate, from a plain producer (subscribe_latency.py)."""
    run = run_of(results, rel)
    return [
        Latency(
            f"publish -> subscriber, {row['rate']:,}/s, {delivery}",
            row["p50_ms"],
            row["p99_ms"],
            run,
        )
        for row in need(results, rel)
        if row.get("via", "kafka") == "kafka"
    ]


def visible_latency(results: Results, rel: str, delivery: str) -> list[Latency]:
    """Publish -> visible in a query, at idle (bench/publish.py)."""
    idle = need(results, rel)["visible_idle"]
    return [
        Latency(
            f"publish -> visible in a query, idle, {delivery}",
            idle["p50_ms"],
            idle["p99_ms"],
            run_of(results, rel),
        )
    ]


def lease_latency(results: Results, rel: str) -> list[Latency]:
    """Publish -> lease over one partition, handed over and a share group's."""
    rows = [r for r in need(results, rel)["rows"] if r["partitions"] == 1]
    run = run_of(results, rel)
    found = []
    for engine, label, peer in (
        ("handed_over", "publish -> lease, queue", False),
        ("share_group", "publish -> lease, Kafka share group", True),
    ):
        mine = [r for r in rows if r["engine"] == engine]
        p50 = median([r["p50_ms"] for r in mine])
        p99 = median([r["p99_ms"] for r in mine])
        found.append(Latency(label, p50, p99, run, peer))
    return found


def view_latency(results: Results, rel: str) -> list[Latency]:
    """Publish -> view change visible at 1,000/s, kafka-sow's View and Kafka Streams'."""
    run = run_of(results, rel)
    names = {"kafka_sow": "kafka-sow View", "kstreams": "Kafka Streams"}
    return [
        Latency(
            f"publish -> view visible, {names.get(r['engine'], r['engine'])}",
            r["latency"]["p50_ms"],
            r["latency"]["p99_ms"],
            run,
            r["engine"] != "kafka_sow",
        )
        for r in need(results, rel)["results"]
    ]


def query_latency(results: Results, rel: str) -> list[Latency]:
    """Key-index lookup in process and SowQuery over gRPC (bench/query.py)."""
    data = need(results, rel)
    run = run_of(results, rel)
    key = data["lookups"]["key-index /orderId = n"]
    rows = [Latency("key-index lookup, in process", key["p50_ms"], key["p99_ms"], run)]
    for name, figures in data["grpc"].items():
        rows.append(Latency(f"gRPC query, {name}", figures["p50_ms"], figures["p99_ms"], run))
    return rows


# Scaling ---------------------------------------------------------------------------------


def processes_groups(results: Results, rels: list[str]) -> Groups:
    """Steady records/s with 1 and 2 `sow process` in each scale.py run."""
    groups: list[str] = []
    series: dict[str, list[float]] = {"1 process": [], "2 processes": []}
    run = None
    for rel in rels:
        data = need(results, rel)
        by = {r["processes"]: r["steady_per_s"] for r in data["runs"]}
        run = run_of(results, rel)
        records = data["runs"][0]["records"]
        order = "2 then 1" if data["runs"][0]["processes"] == 2 else "1 then 2"
        groups.append(f"{records / 1e6:g}M, {order}\n{run.date[11:]}")
        series["1 process"].append(by[1])
        series["2 processes"].append(by[2])
    if run is None:
        raise ValueError("no scale runs")
    day = Run(run.day(), run.broker, run.logged)
    return Groups("Processors on 4 partitions", "steady records/s", groups, series, day)


def consumers_groups(results: Results, rel: str) -> Groups:
    """Queue throughput by consumers, kafka-sow and the two Kafka groups (queues.py)."""
    rows = need(results, rel)["rows"]
    counts = sorted({r["consumers"] for r in rows})
    rate = {(r["engine"], r["consumers"]): r["messages_per_s"] for r in rows}
    names = {
        "kafka_sow": "kafka-sow queue",
        "share_group": "share group",
        "consumer_group": "consumer group",
    }
    series = {name: [rate[(engine, c)] for c in counts] for engine, name in names.items()}
    return Groups(
        "Queue by consumers", "msgs/s", [str(c) for c in counts], series, run_of(results, rel)
    )


def rebalance_groups(results: Results, rel: str) -> Groups:
    """Membership change -> every partition committing again, per protocol (rebalance.py)."""
    steps = need(results, rel)["steps"]
    names = list(dict.fromkeys(s["step"] for s in steps))
    protocols = list(dict.fromkeys(s["protocol"] for s in steps))
    took = {(s["protocol"], s["step"]): s["processing_s"] for s in steps}
    series = {p: [took[(p, n)] for n in names] for p in protocols}
    unit = "s until every partition commits again"
    return Groups("Rebalance, by group protocol", unit, names, series, run_of(results, rel))


def endurance_groups(results: Results, rel: str) -> Groups:
    """Per-minute publish -> delivered percentiles of the endurance run (endurance.py)."""
    data = need(results, rel)
    minutes = data["per_minute"]
    series = {
        "p50": [m["p50_ms"] for m in minutes],
        "p99": [m["p99_ms"] for m in minutes],
    }
    title = (
        f"sow serve for {data['minutes']:g} min at {data['rate']:,.0f} msg/s, "
        f"{data['delivered']:,} delivered"
    )
    minute = [str(m["minute"]) for m in minutes]
    return Groups(title, "publish -> delivered, ms", minute, series, run_of(results, rel))
