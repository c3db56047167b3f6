"""The benchmark pictures and the summary table of docs/benchmarks.md, from bench/results/.

    python bench/plots.py

reads every JSON under bench/results/, writes the PNGs into docs/img/benchmarks/ and
rewrites the summary table between the markers in docs/benchmarks.md; it says on stdout
what it wrote, and on stderr what it left out (a result file no picture or row reads, or
one missing or of another shape). ``--check`` writes nothing and exits 1 if the doc's
table is not the one the results give. Needs matplotlib (``pip install -e '.[plots]'``).
"""

from __future__ import annotations

import argparse
import io
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import plot_data as data
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image  # matplotlib's own dependency
from results_io import Results, load_results, note
from summary import (
    SHAPE_ERRORS,
    Row,
    replace_marked,
    summary_markdown,
    summary_rows,
)

ROOT = Path(__file__).resolve().parents[1]
DPI = 100
COLOURS = 64
OURS, PEER, GOOD, BAD = "#1f77b4", "#9a9a9a", "#2ca02c", "#ff7f0e"


def compact(value: float) -> str:
    """1,234,567 -> 1.23M: a bar's label."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def save(fig: Figure, out: Path, name: str) -> Path:
    """The figure as ``out/name``: 64 colours (a third of the bytes, no visible change)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        reduced = image.convert("RGB").quantize(colors=COLOURS, method=Image.Quantize.MEDIANCUT)
    path = out / name
    reduced.save(path, format="PNG", optimize=True)
    return path


def parts(builders: list[Callable[[], data.Panel]]) -> list[data.Panel]:
    """The panels whose results are there; the others are noted and left out."""
    panels = []
    for build in builders:
        try:
            panels.append(build())
        except SHAPE_ERRORS as exc:
            note(f"left a panel out ({exc.__class__.__name__}: {exc})")
    return panels


def bar_panel(ax: Axes, panel: data.Panel) -> None:
    """kafka-sow's bar in colour, the others grey, each labelled with its figure."""
    labels = [textwrap.fill(name, 13, break_long_words=False) for name, _ in panel.bars]
    values = [value for _, value in panel.bars]
    colours = [OURS] + [PEER] * (len(values) - 1)
    drawn = ax.bar(range(len(values)), values, color=colours)
    ax.bar_label(drawn, [compact(v) for v in values], fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=7.5)
    ax.set_ylabel(panel.unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.yaxis.set_major_formatter(lambda v, _: compact(v))
    ax.margins(y=0.15)
    ax.set_title(f"{panel.title}\n{panel.run.label()}", fontsize=9)


def panel_grid(panels: list[data.Panel], title: str, out: Path, name: str) -> Path:
    """Panels side by side, three to a row."""
    if not panels:
        raise ValueError(f"nothing to draw for {name}")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        bar_panel(ax, panel)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return save(fig, out, name)


def throughput_peers(results: Results, out: Path) -> Path:
    """kafka-sow beside other engines, each panel one run."""
    panels = parts(
        [
            lambda: data.ingest_panel(results, "kafka/ingest.json"),
            lambda: data.ingest_panel(results, "kafka/ingest_1m.json"),
            lambda: data.views_panel(results, "kafka/views.json"),
            lambda: data.views_panel(results, "kafka/views_inline.json"),
            lambda: data.queue_panel(results, "kafka/queues_issue34_s3.json", 4),
            lambda: data.queue_panel(results, "kafka/queues_issue34_s3.json", 16),
        ]
    )
    title = "Throughput beside other engines (same run, same broker; blue: kafka-sow)"
    return panel_grid(panels, title, out, "throughput_peers.png")


def throughput_raw(results: Results, out: Path) -> Path:
    """kafka-sow beside the raw client or a hand-rolled baseline, each panel one run."""
    panels = parts(
        [
            lambda: data.publish_panel(results, "kafka/issue34_s2_publish_live_false.json"),
            lambda: data.direct_panel(results, "kafka/direct_publish_issue34_s3.json"),
            lambda: data.scan_panel(results, "kafka/query.json"),
            lambda: data.replay_panel(results, "kafka/replay.json"),
            lambda: data.spark_panel(results, "kafka/spark_read.json"),
            lambda: data.delta_panel(results, "kafka/delta_publish.json"),
        ]
    )
    title = "Throughput beside the raw client or a baseline (same run; blue: kafka-sow)"
    return panel_grid(panels, title, out, "throughput_raw.png")


def latency(results: Results, out: Path) -> Path:
    """p50 and p99 per path, log scale, each row labelled with its run."""
    builders: list[Callable[[], list[data.Latency]]] = [
        lambda: data.subscriber_latency(
            results, "kafka/issue34_s2_kafka_live_false.json", "at commit"
        ),
        lambda: data.subscriber_latency(
            results, "kafka/issue34_s2_kafka_live_true.json", "at apply time"
        ),
        lambda: data.visible_latency(
            results, "kafka/issue34_s2_publish_live_false.json", "at commit"
        ),
        lambda: data.visible_latency(
            results, "kafka/issue34_s2_publish_live_true.json", "at apply time"
        ),
        lambda: data.lease_latency(results, "kafka/queue_latency.json"),
        lambda: data.view_latency(results, "kafka/views.json"),
        lambda: data.query_latency(results, "kafka/query.json"),
    ]
    rows: list[data.Latency] = []
    for build in builders:
        try:
            rows.extend(build())
        except SHAPE_ERRORS as exc:
            note(f"left latency rows out ({exc.__class__.__name__}: {exc})")
    if not rows:
        raise ValueError("no latency rows")
    rows.reverse()  # barh draws from the bottom up
    fig, ax = plt.subplots(figsize=(10, 0.52 * len(rows) + 1.4))
    ys = range(len(rows))
    for offset, pct, colour in ((0.2, "p50", "#9ecae1"), (-0.2, "p99", OURS)):
        values = [getattr(r, pct) for r in rows]
        drawn = ax.barh(
            [y + offset for y in ys],
            values,
            height=0.38,
            color=colour,
            label=pct,
            hatch=None,
        )
        for bar, row in zip(drawn, rows, strict=True):
            if row.peer:
                bar.set_hatch("///")
                bar.set_facecolor(PEER if pct == "p99" else "#d9d9d9")
        ax.bar_label(drawn, [f"{v:.3g}" for v in values], fontsize=7, padding=2)
    labels = [f"{r.label}\n{r.run.label()}" for r in rows]
    ax.set_yticks(list(ys), labels, fontsize=7.5)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Latency percentiles per path (hatched grey: a peer in the same run)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "latency.png")


def grouped(ax: Axes, groups: data.Groups, log: bool = False) -> None:
    """Bars of each series side by side in each group."""
    width = 0.8 / len(groups.series)
    for index, (name, values) in enumerate(groups.series.items()):
        xs = [x + (index - (len(groups.series) - 1) / 2) * width for x in range(len(values))]
        drawn = ax.bar(xs, values, width=width, label=name)
        ax.bar_label(drawn, [compact(v) for v in values], fontsize=7)
    ax.set_xticks(range(len(groups.groups)), groups.groups, fontsize=7.5)
    if log:
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(lambda v, _: compact(v))
    ax.set_ylabel(groups.unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.margins(y=0.15)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    ax.set_title(f"{groups.title}\n{groups.run.label()}", fontsize=9)


def scaling(results: Results, out: Path) -> Path:
    """Processors, consumers and rebalances: what scaling out gives and costs."""
    builders: list[tuple[Callable[[], data.Groups], bool]] = [
        (
            lambda: data.processes_groups(
                results,
                [
                    "kafka/scale.json",
                    "kafka/scale_run2.json",
                    "kafka/scale_2m.json",
                    "kafka/scale_2m_reversed.json",
                ],
            ),
            False,
        ),
        (lambda: data.consumers_groups(results, "kafka/queues_issue34_s3.json"), True),
        (lambda: data.rebalance_groups(results, "rebalance.json"), False),
    ]
    drawn: list[tuple[data.Groups, bool]] = []
    for build, log in builders:
        try:
            drawn.append((build(), log))
        except SHAPE_ERRORS as exc:
            note(f"left a scaling panel out ({exc.__class__.__name__}: {exc})")
    if not drawn:
        raise ValueError("no scaling results")
    fig, axes = plt.subplots(1, len(drawn), figsize=(4.6 * len(drawn), 4.2), squeeze=False)
    for ax, (groups, log) in zip(axes.flat, drawn, strict=True):
        grouped(ax, groups, log)
    fig.suptitle("Scaling out: processors, consumers, rebalances", fontsize=11)
    fig.tight_layout()
    return save(fig, out, "scaling.png")


def endurance(results: Results, out: Path) -> Path:
    """Per-minute latency percentiles over a long run."""
    groups = data.endurance_groups(results, "kafka/endurance.json")
    fig, ax = plt.subplots(figsize=(9, 3.6))
    minutes = [int(m) for m in groups.groups]
    for name, values in groups.series.items():
        ax.plot(minutes, values, marker=".", label=name)
    ax.set_xlabel("minute of the run")
    ax.set_ylabel(groups.unit)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title(f"{groups.title}\n{groups.run.label()}", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "endurance.png")


def ratios(rows: list[Row], out: Path) -> Path:
    """The summary table's ratio column: kafka-sow / what it stands beside."""
    if not rows:
        raise ValueError("no summary rows")
    shown = list(reversed(rows))
    fig, ax = plt.subplots(figsize=(10, 0.34 * len(shown) + 1.6))
    values = [r.ratio for r in shown]
    drawn = ax.barh(
        range(len(shown)), values, color=[GOOD if r.ahead else BAD for r in shown], height=0.7
    )
    ax.bar_label(drawn, [f"{v:.2f}x" for v in values], fontsize=7, padding=2)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(shown)), [f"{r.short} ({r.run.day()})" for r in shown], fontsize=8)
    ax.set_xlabel("kafka-sow's figure / the other's (log scale)")
    ax.set_title(
        "kafka-sow beside its peer or the raw client, same run (the summary table)\n"
        "green: kafka-sow ahead (a higher rate, a lower latency)",
        fontsize=10,
    )
    ax.margins(x=0.12)
    fig.tight_layout()
    return save(fig, out, "ratios.png")


def shown(path: Path) -> str:
    """A path as the user gave it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def write_summary(rows: list[Row], doc: Path, check: bool) -> bool:
    """Put the table between the doc's markers; True if the doc holds it (or now does)."""
    text = doc.read_text(encoding="utf-8")
    updated = replace_marked(text, summary_markdown(rows))
    if updated is None:
        note(f"{doc} has no summary markers: the table was not written")
        return False
    if updated == text:
        print(f"summary table in {shown(doc)} is current ({len(rows)} rows)")
        return True
    if check:
        note(f"the summary table in {doc} differs from the results: run python bench/plots.py")
        return False
    doc.write_text(updated, encoding="utf-8")
    print(f"rewrote the summary table in {shown(doc)} ({len(rows)} rows)")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "benchmarks")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the doc's table is not the one the results give",
    )
    args = parser.parse_args(argv)
    results = load_results(args.results)
    rows = summary_rows(results)
    args.out.mkdir(parents=True, exist_ok=True)
    pictures: list[Callable[[], Path]] = [
        lambda: ratios(rows, args.out),
        lambda: throughput_peers(results, args.out),
        lambda: throughput_raw(results, args.out),
        lambda: latency(results, args.out),
        lambda: scaling(results, args.out),
        lambda: endurance(results, args.out),
    ]
    for draw in [] if args.check else pictures:
        try:
            path = draw()
        except SHAPE_ERRORS as exc:
            note(f"a picture was left out ({exc.__class__.__name__}: {exc})")
            continue
        print(f"wrote {shown(path)} ({path.stat().st_size // 1024} KB)")
    for rel in [] if args.check else sorted(set(results) - results.read):
        note(f"skipped {rel}: no picture or summary row reads it")
    return 0 if write_summary(rows, args.doc, args.check) else 1


if __name__ == "__main__":
    sys.exit(main())
