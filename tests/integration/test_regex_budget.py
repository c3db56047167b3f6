"""A catastrophic PCRE pattern on a 100 KB value (issue 36): on the backtracking engine,
each match stops at its budget (SOW_REGEX_MATCH_BUDGET_MS). Through gRPC on the
broker-free driver: a query (and sow_and_subscribe's query) fails with RESOURCE_EXHAUSTED
naming the pattern and the budget; a subscription, a view (its filter, or an aggregate's
argument) and a filter delete take that record as not matching (the view leaves it out)
and count it (``sow_regex_budget_exceeded_total{where}``); the other record, which the
pattern matches, goes through everywhere, and the processor goes on."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import ServiceError
from processor.expr.budget import overruns
from processor.topology import load_topology
from tests.conftest import MEMORY
from tests.integration.harness import namespaced_topology, running_sow
from tests.integration.subscription_helpers import Collector

PATTERN = r"(a+)+\1b"
FILTER = f"/s LIKE '{PATTERN}'"  # LIKE hands the backslash to the pattern as it is
AGGREGATE = f"SUM(IF({FILTER}, 1, 0)) AS /m"
TOPOLOGY = f"""
topics:
  - {{name: t, message_type: json, key: /id}}
views:
  - name: V
    underlying: t
    message_type: json
    projection: ["COUNT(/id) AS /n", "/g AS /g"]
    grouping: [/g]
    filter: '{FILTER.replace("'", "''")}'
  - name: W
    underlying: t
    message_type: json
    projection: ["COUNT(/id) AS /n", "/g AS /g", '{AGGREGATE.replace("'", "''")}']
    grouping: [/g]
"""
BUDGET_MS = 20
#: A loose bound on one request that meets the pattern once (the budget, a loaded machine).
REQUEST_S = 5.0


def test_a_catastrophic_pattern_is_stopped_everywhere(tmp_path: Path) -> None:
    (tmp_path / "sow.yaml").write_text(TOPOLOGY)
    topology = namespaced_topology("regex-budget", load_topology(tmp_path / "sow.yaml"))
    settings = {"regex_match_budget_ms": BUDGET_MS}
    with running_sow(MEMORY, topology, tmp_path / "state", "regex-budget", settings) as (_, client):
        before = overruns()
        stream = client.subscribe("t", filter=FILTER)
        live = Collector(stream)
        time.sleep(0.5)  # the subscription is registered before the publishes
        long = {"id": 1, "g": "x", "s": "a" * 100_000}
        short = {"id": 2, "g": "x", "s": "xaab"}
        for record in (long, short):
            client.publish("t", orjson.dumps(record), ack="processed")

        assert live.wait_for(lambda c: len(c.changes()) >= 1)
        time.sleep(0.5)
        assert [orjson.loads(c.record.data)["id"] for c in live.changes()] == [2]
        stream.cancel()
        assert overruns()["subscription"] > before["subscription"]

        started = time.perf_counter()
        with pytest.raises(ServiceError) as caught:
            client.query("t", filter=FILTER)
        assert time.perf_counter() - started < REQUEST_S
        assert caught.value.code == "RESOURCE_EXHAUSTED"
        assert repr(PATTERN) in caught.value.details
        assert f"budget of {BUDGET_MS} ms" in caught.value.details
        assert "SOW_REGEX_MATCH_BUDGET_MS" in caught.value.details

        with client.sow_and_subscribe("t", filter=FILTER) as failed:  # its query fails
            refused = Collector(failed)
            assert refused.done.wait(REQUEST_S)
            assert refused.error is not None
            assert refused.error.code == "RESOURCE_EXHAUSTED"

        # the views count the record the pattern matches, not the long one; the processor
        # goes on (a view's aggregate that overruns leaves the record out)
        for view, expected in (("V", {"n": 1, "g": "x"}), ("W", {"n": 1, "g": "x", "m": 1})):
            deadline = time.monotonic() + 20
            while True:
                records, _, _ = client.query(view)
                if records and orjson.loads(records[0].data) == expected:
                    break
                assert time.monotonic() < deadline, [r.data for r in records]
                time.sleep(0.1)
        assert overruns()["view"] >= before["view"] + 2

        reply = client.delete("t", filter=FILTER)
        assert reply.records_deleted == 1
        assert overruns()["delete"] > before["delete"]
        remaining, _, _ = client.query("t")
        assert [orjson.loads(r.data)["id"] for r in remaining] == [1]
