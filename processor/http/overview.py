"""The console's figures: read from the process's own ``/metrics`` text (which holds
its processor child's too, relayed), so the console shows exactly what Prometheus
scrapes and ``sow status`` prints, and a short history of them for the charts."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

#: Figures summed over their labels (name as exported -> the overview's key).
TOTALS = {
    "sow_processor_records_total": "records_applied",
    "sow_processor_transactions_total": "transactions",
    "sow_dead_letters_total": "dead_letters",
    "sow_expirations_total": "expirations",
    "sow_duplicate_publishes_total": "duplicates",
    "sow_processor_stalls_total": "stalls",
    "sow_processor_stalled": "stalled",
    "sow_processor_ready": "processor_ready",
    "sow_processor_recovering_partitions": "recovering_partitions",
    "sow_processor_restored_records_total": "restored_records",
    "sow_replica_changes_total": "replica_changes",
    "sow_replica_staleness_seconds": "replica_staleness_s",
    "sow_replica_caught_up": "replica_caught_up",
    "sow_subscriptions": "subscriptions",
    "sow_subscription_backlog": "subscription_backlog",
    "sow_brokers_answering": "brokers_answering",
    "sow_grpc_requests_total": "grpc_calls",
}
#: Figures by topic (name -> the topic row's key).
BY_TOPIC = {
    "sow_records": "records",
    "sow_processor_input_lag": "input_lag",
    "sow_replica_changelog_lag": "changelog_lag",
}
#: Figures by queue (name without the ``sow_queue_`` prefix is the queue row's key).
BY_QUEUE = (
    "sow_queue_messages",
    "sow_queue_leased",
    "sow_queue_subscriptions",
    "sow_queue_delivered_total",
    "sow_queue_acked_total",
    "sow_queue_expired_total",
)
#: Samples kept for the charts (one every SAMPLE_S seconds: ten minutes).
SAMPLE_S = 2.0
SAMPLES = 300


def figures(text: str) -> dict[str, Any]:
    """The overview's figures from Prometheus text: totals, and rows by topic and by
    queue (each queue's subscribers' backlogs under ``backlogs``)."""
    totals: dict[str, float] = {}
    topics: dict[str, dict[str, float]] = collections.defaultdict(dict)
    queues: dict[str, dict[str, Any]] = collections.defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in TOTALS:
                key = TOTALS[name]
                totals[key] = totals.get(key, 0.0) + value
            elif name in BY_TOPIC and "topic" in labels:
                topics[labels["topic"]][BY_TOPIC[name]] = value
            elif name == "sow_topic_changes_total" and "topic" in labels:
                row = topics[labels["topic"]]
                kind = {"publish": "publishes", "delete": "deletes"}.get(
                    labels.get("kind", ""), "changes"
                )
                row[kind] = row.get(kind, 0.0) + value
            elif name in BY_QUEUE and "queue" in labels:
                key = name.removeprefix("sow_queue_").removesuffix("_total")
                queues[labels["queue"]][key] = value
            elif name == "sow_queue_subscriber_backlog" and "queue" in labels:
                backlogs = queues[labels["queue"]].setdefault("backlogs", {})
                backlogs[labels.get("subscription", "")] = value
    return {"totals": totals, "topics": dict(topics), "queues": dict(queues)}


class History:
    """The figures sampled every ``SAMPLE_S`` seconds, the last ``SAMPLES`` kept, for
    the console's charts of rates and lags (a thread started on first use)."""

    def __init__(self, read: Callable[[], str]) -> None:
        self._read = read
        self._samples: collections.deque[dict[str, Any]] = collections.deque(maxlen=SAMPLES)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def samples(self) -> list[dict[str, Any]]:
        self._start()
        with self._lock:
            return list(self._samples)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="sow-console", daemon=True)
        self._sample()
        self._thread.start()

    def _sample(self) -> None:
        try:
            current = figures(self._read())
        except ValueError:  # a relayed text cut short: the next sample will do
            return
        sample = {"time": time.time(), "totals": current["totals"]}
        sample["topics"] = {
            name: {k: row.get(k, 0.0) for k in ("records", "publishes", "deletes", "input_lag")}
            for name, row in current["topics"].items()
        }
        with self._lock:
            self._samples.append(sample)

    def _run(self) -> None:
        while not self._stopped.wait(SAMPLE_S):
            try:
                self._sample()
            except Exception:  # a bug: say so; the charts miss this sample, not the rest
                log.exception("console: a sample of the figures failed")

    def stop(self) -> None:
        self._stopped.set()
