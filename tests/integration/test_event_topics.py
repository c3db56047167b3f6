"""AMPS's event topics through the ordinary subscription API (issue 35): a subscriber to
/AMPS/ClientStatus, with a filter, sees another client's logon, subscribe, unsubscribe
and logoff; /AMPS/SOWStats's record counts equal what ``sow status`` prints. Both
backends."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)


def follow(stream: Any, into: queue.Queue[dict[str, Any]]) -> None:
    try:
        for message in stream:
            if message.WhichOneof("part") == "registered":
                into.put({"registered": True})
            elif message.WhichOneof("part") == "change":
                into.put(json.loads(message.change.record.data))
    except Exception:  # cancelled at the end of the test
        return


def next_event(events: queue.Queue[dict[str, Any]], what: str) -> dict[str, Any]:
    try:
        return events.get(timeout=30)
    except queue.Empty:
        raise AssertionError(f"no {what} event within 30s") from None


def test_a_subscriber_sees_another_clients_logon_subscribe_and_logoff(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    topic = next(iter(topology.topics))
    with running_sow(backend, topology, tmp_path, unique) as (app, watcher):
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        name = f"bob-{unique}"
        stream = watcher.subscribe(
            "/AMPS/ClientStatus", filter=f"/ClientStatus/client_name = '{name}'"
        )
        threading.Thread(target=follow, args=(stream, events), daemon=True).start()
        assert next_event(events, "registered") == {"registered": True}
        with SowClient(app.grpc_address, client_name=name) as bob:
            session = bob.session()
            session.subscribe(topic, "orders-1", filter="/price > 10")
            seen = [next_event(events, "logon"), next_event(events, "subscribe")]
            session.unsubscribe("orders-1")
            seen.append(next_event(events, "unsubscribe"))
            session.cancel()
            seen.append(next_event(events, "logoff"))
        stream.cancel()
        kinds = [e["ClientStatus"]["event"] for e in seen]
        assert kinds == ["logon", "subscribe", "unsubscribe", "logoff"]
        subscribe = seen[1]["ClientStatus"]
        assert subscribe["client_name"] == name
        assert (subscribe["topic"], subscribe["filter"], subscribe["sub_id"]) == (
            topic,
            "/price > 10",
            "orders-1",
        )
        assert re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z", subscribe["timestamp"])


def sow_status_records(metrics: str) -> dict[str, int]:
    """The ``records {topic=...}`` rows of ``sow status``, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "status", "--metrics-address", metrics],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = re.findall(r"^records \{topic=(\S+)\}\s+([\d,]+)$", done.stdout, re.MULTILINE)
    return {topic: int(count.replace(",", "")) for topic, count in rows}


def test_sow_stats_counts_equal_sow_status(backend: str, tmp_path: Path, unique: str) -> None:
    topology = namespaced(unique, ORDERS)
    topic = next(iter(topology.topics))
    settings = {"metrics_address": "127.0.0.1:0", "sow_stats_interval_s": 1}
    with running_sow(backend, topology, tmp_path, unique, settings) as (app, client):
        assert app.observer is not None
        for order in range(25):
            client.publish(topic, json.dumps({"orderId": order % 17}).encode(), ack="processed")
        status = sow_status_records(app.observer.address)
        assert status[topic] == 17
        stats: queue.Queue[dict[str, Any]] = queue.Queue()
        stream = client.subscribe("/AMPS/SOWStats", filter=f"/SOWStats/topic = '{topic}'")
        threading.Thread(target=follow, args=(stream, stats), daemon=True).start()
        assert next_event(stats, "registered") == {"registered": True}
        event = next_event(stats, "SOWStats")["SOWStats"]
        stream.cancel()
        assert event["topic"] == topic
        assert event["message_type"] == "json"
        assert event["record_count"] == status[topic]
