"""A queue across `sow serve` SIGKILLed and restarted at once (issue 31 item 1): the
restarted processor restores the dead run's subscriptions, and must neither lease to them
(at-most-once: what it sends them is gone) nor keep their leases from the new run's
consumers (at-least-once: redelivered within a second of the new subscription)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import SowClient
from tests.integration.queue_helpers import Consumer
from tests.integration.serve_helpers import Serve


@pytest.mark.parametrize("semantics", ["at-most-once", "at-least-once"])
def test_a_queue_loses_and_delays_nothing_across_a_sigkill_of_sow_serve(
    bootstrap: str, unique: str, tmp_path: Path, semantics: str
) -> None:
    (tmp_path / "topology.yaml").write_text(
        "topics:\n"
        f"  - {{name: jobs, sow: false, kafka_topic: {unique}.jobs, partitions: 1}}\n"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: jobs, semantics: {semantics}, "
        "max_per_subscription_backlog: 10}\n"
    )
    serve = Serve(tmp_path, bootstrap, unique)
    try:
        serve.until_ready()
        with SowClient(serve.address) as client:
            for i in range(6):
                client.publish("Q", orjson.dumps({"id": i}))
            first = Consumer(client, max_backlog=2)
            assert first.until(2) == [0, 1]
            time.sleep(0.5)  # the leases are committed; nothing more is leased to it
            assert first.ids() == [0, 1]
    finally:
        serve.process.send_signal(signal.SIGKILL)  # the parent only: its child follows
        serve.process.wait(timeout=30)
    serve = Serve(tmp_path, bootstrap, unique)  # at once
    try:
        serve.until_ready()
        with SowClient(serve.address) as client:
            second = Consumer(client, max_backlog=10)
            if semantics == "at-most-once":
                # 0 and 1 were delivered (removed when leased); 2..5 never were
                assert second.until(4) == [2, 3, 4, 5]
            else:
                assert second.until(6) == [0, 1, 2, 3, 4, 5]
                redelivered = [at for i, at in zip(second.ids(), second.at, strict=True) if i < 2]
                assert max(redelivered) - second.since < 1.0, "redelivery waited"
            time.sleep(1.0)
            assert len(second.ids()) == len(set(second.ids())), second.ids()
            second.stream.ack(second.bookmarks())
    finally:
        serve.process.send_signal(signal.SIGINT)
        try:
            serve.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.process.kill()
