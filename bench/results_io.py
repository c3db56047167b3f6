"""bench/results/ as the plots and the summary table read it (bench/plots.py).

Every JSON file under the results folder, keyed by its path relative to that folder, and
the date and broker of the run each one holds: from the JSON where it says, else from
LOGGED (the run's section in docs/benchmarks-log.md), else the broker from the folder
(``kafka/``: the embedded Apache Kafka, ``tansu/``: the embedded Tansu).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Results(dict[str, Any]):
    """Relative path (posix) -> the parsed JSON, noting which files were read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def __getitem__(self, rel: str) -> Any:
        self.read.add(rel)
        return super().__getitem__(rel)


KAFKA = "Apache Kafka 4.2.1"
TANSU = "Tansu"
NO_BROKER = "none (in process)"

#: Runs whose JSON names no date (or no broker), as the run-by-run log gives them.
#: path -> (date, broker or None to take the JSON's or the folder's).
LOGGED: dict[str, tuple[str, str | None]] = {
    "kafka/queues_issue34_s3.json": ("2026-11-29 11:08", None),
    "kafka/queue_latency.json": ("2026-11-29 11:04", None),
    "kafka/issue34_s2_kafka_live_false.json": ("2026-11-29 08:11", None),
    "kafka/issue34_s2_kafka_live_true.json": ("2026-11-29 08:11", None),
    "kafka/query.json": ("2026-11-26 02:53", NO_BROKER),
    "kafka/replay.json": ("2026-11-26 02:43", None),
    "kafka/spark_read.json": ("2026-11-26 02:50", None),
    "kafka/delta_publish.json": ("2026-11-26 02:46", None),
    "kafka/endurance.json": ("2026-11-25 23:38", None),
    "security.json": ("2026-11-28 23:42", "none (memory log)"),
}


class MissingResultError(Exception):
    """A result a plot or a summary row needs is absent or not shaped as expected."""


@dataclass(frozen=True)
class Run:
    """When and on which broker one result file was measured."""

    date: str
    broker: str
    #: The date or the broker comes from the log, not from the JSON.
    logged: bool

    def label(self) -> str:
        """``2026-11-26 03:07, Apache Kafka 4.2.1`` (a dagger when taken from the log)."""
        return f"{self.date}, {self.broker}" + (" †" if self.logged else "")

    def day(self) -> str:
        """The date without the time, for the tight labels of a plot."""
        return self.date.split(" ")[0]


def load_results(root: Path) -> Results:
    """Every parseable JSON file under ``root``; a file that does not parse is noted."""
    results = Results()
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        try:
            results[rel] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            note(f"skipped {rel}: not readable as JSON ({exc.__class__.__name__})")
    return results


def note(message: str) -> None:
    """A line for whoever runs the command, on stderr."""
    print(f"plots: {message}", file=sys.stderr)


def need(results: Results, rel: str) -> Any:
    """The parsed JSON of ``rel``, or MissingResultError."""
    if rel not in results:
        raise MissingResultError(f"{rel} is not in the results")
    return results[rel]


def short_broker(text: str, rel: str) -> str:
    """A broker as the tables name it, from a JSON's description (or the folder's)."""
    lowered = text.lower()
    version = re.search(r"apache kafka ([\d.]+)", lowered)
    if version:
        return f"Apache Kafka {version.group(1)}"
    if "tansu" in lowered:
        return TANSU
    if lowered.startswith("none") or lowered.startswith("memory log"):
        return text  # no broker: the JSON says what stood in for one
    return folder_broker(rel)


def folder_broker(rel: str) -> str:
    """The broker a results folder holds the runs of."""
    if rel.startswith("kafka/"):
        return KAFKA
    if rel.startswith("tansu/"):
        return TANSU
    return "?"


def json_date(data: Any) -> str | None:
    """``YYYY-MM-DD HH:MM`` (or a day) from a result's ``date`` or ``finished`` field."""
    if not isinstance(data, dict):
        return None
    for key in ("date", "finished"):
        value = data.get(key)
        if isinstance(value, str) and re.match(r"\d{4}-\d\d-\d\d", value):
            return value.replace("T", " ")[:16]
    return None


def run_of(results: Results, rel: str) -> Run:
    """The date and broker of the run ``rel`` holds."""
    data = need(results, rel)
    logged_date, logged_broker = LOGGED.get(rel, (None, None))
    date = json_date(data)
    from_log = False
    if date is None:
        date = logged_date or "date unknown"
        from_log = logged_date is not None
    described = data.get("broker") if isinstance(data, dict) else None
    if logged_broker is not None:
        broker = logged_broker
        from_log = True
    elif isinstance(described, str):
        broker = short_broker(described, rel)
    else:
        broker = folder_broker(rel)
    return Run(date, broker, from_log)


def median(values: list[float]) -> float:
    """The median of a few rounds."""
    ordered = sorted(values)
    if not ordered:
        raise MissingResultError("no rounds")
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2
