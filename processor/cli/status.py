"""``sow status``: a running server's health and figures, as a table."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

from processor.cli.guards import served_metrics_address
from processor.config import Settings
from processor.errors import BrokerError, DeadlineError, SowError

#: Metrics shown, in this order, with their labels as printed.
SHOWN = {
    "sow_brokers_answering": "brokers answering",
    "sow_broker_blocking_seconds_total": "time blocking (s)",
    "sow_broker_degraded_seconds_total": "time degraded (s)",
    "sow_processor_stalls_total": "processor stalls",
    "sow_records": "records",
    "sow_processor_records_total": "input records applied",
    "sow_processor_transactions_total": "transactions",
    "sow_dead_letters_total": "dead letters",
    "sow_expirations_total": "expirations",
    "sow_duplicate_publishes_total": "duplicate publishes",
    "sow_processor_input_lag": "input lag (records)",
    "sow_processor_recovering_partitions": "store partitions recovering",
    "sow_processor_restored_records_total": "changelog records restored",
    "sow_standby_records_total": "standby records",
    "sow_replica_changes_total": "replica changes applied",
    "sow_replica_staleness_seconds": "replica staleness (s)",
    "sow_replica_changelog_lag": "replica changelog lag (records)",
    "sow_subscriptions": "subscriptions",
    "sow_subscription_backlog": "subscription backlog",
    "sow_queue_messages": "queue messages",
    "sow_queue_leased": "queue messages leased",
    "sow_queue_subscriptions": "queue subscriptions",
    "sow_queue_delivered_total": "queue deliveries",
    "sow_queue_redelivered_total": "queue redeliveries",
    "sow_queue_acked_total": "queue acknowledgements",
    "sow_queue_returned_total": "queue leases returned",
    "sow_queue_expired_total": "queue messages expired",
    "sow_queue_subscriber_backlog": "queue subscriber backlog",
    "sow_grpc_requests_total": "gRPC calls",
}


def cmd_status(args: argparse.Namespace) -> int:
    """Print readiness and the main figures from a server's metrics endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    settings = Settings.from_env(state_dir=args.state_dir)
    address = (
        args.metrics_address
        or settings.metrics_address
        or served_metrics_address(settings.state_dir)
    )
    if not address:
        raise SowError(
            f"no running `sow serve` found in {settings.state_dir} (it records its metrics "
            "address there): run sow status where sow serve runs, or pass --state-dir, or "
            "--metrics-address HOST:PORT (or SOW_METRICS_ADDRESS)"
        )
    ready = _get(f"http://{address}/readyz", args.timeout)
    text = _get(f"http://{address}/metrics", args.timeout)
    state = "yes" if ready == "ready" else "no: " + ready.removeprefix("not ready: ")
    rows: list[tuple[str, str]] = [("ready", state)]
    samples: dict[str, list[tuple[str, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sow_broker_info" and "broker" in sample.labels:
                rows.append(("broker", sample.labels["broker"]))
            if sample.name == "sow_broker_condition" and "state" in sample.labels:
                why = sample.labels.get("condition", "")
                rows.append(
                    ("broker condition", ": ".join(filter(None, (sample.labels["state"], why))))
                )
            if sample.name in SHOWN:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples.setdefault(sample.name, []).append((labels, sample.value))
    for name, label in SHOWN.items():
        for labels, figure in samples.get(name, []):
            if name.endswith("_seconds_total"):
                shown = f"{figure:,.1f}"
            else:
                shown = f"{figure:,.3f}" if name.endswith("_seconds") else f"{figure:,.0f}"
            rows.append((f"{label} {{{labels}}}" if labels else label, shown))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        sys.stdout.write(f"{name:<{width}}  {value}\n")
    return 0


def _get(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return str(reply.read().decode()).strip()
    except urllib.error.HTTPError as error:  # /readyz answers 503 with the reason
        return str(error.read().decode()).strip()
    except (urllib.error.URLError, OSError) as exc:
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            raise DeadlineError(f"{url} did not answer within --timeout {timeout:g}s") from None
        raise BrokerError(f"no metrics endpoint answered at {url}: {exc}") from None
