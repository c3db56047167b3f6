"""Issue 9 acceptance: sow_and_subscribe has no gap and no duplicate under load.

Publishers update keys as fast as they can (and delete some) while sow_and_subscribe
clients, with and without filters, start at random moments. After publishing stops,
each client's state rebuilt from its query result plus its stream must equal a sow
query with its filter, and no client may receive one log position twice.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.sow_client import SowClient
from processor.topology.model import SowTopic
from processor.wire import sow_pb2
from tests.integration.harness import difference, namespaced, running_sow
from tests.integration.subscription_helpers import Collector

QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)

#: (filter, oof): filters on /group never change for a record, so without oof (and with
#: send_deletes, to learn of deletes) a client still holds exactly what matches; /price
#: filters move records in and out of focus.
CLIENT_KINDS: list[tuple[str, bool]] = [
    ("", False),
    ("/group = 2", False),
    ("/group IN (1, 3)", True),
    ("/price > 50", True),
    ("/group = 4 AND /price < 30", True),
]


def _message(key: int, rng: random.Random) -> bytes:
    return orjson.dumps({"id": key, "group": key % 5, "price": rng.randint(0, 100)})


def _rebuild(collector: Collector) -> tuple[dict[str, bytes], list[tuple[str, int, int]]]:
    """A client's state from its query result and changes, and every log position it got."""
    state = {r.sow_key: r.data for r in collector.query_records()}
    positions = [
        (r.position.topic, r.position.partition, r.position.offset)
        for r in collector.query_records()
    ]
    snapshot = {(p.topic, p.partition): p.offset for p in collector.group_end().snapshot}
    for change in collector.changes():
        cp = change.changelog_position
        assert cp.offset >= snapshot[(cp.topic, cp.partition)], "a change from before the query"
        if change.kind == sow_pb2.CHANGE_PUBLISH:
            state[change.sow_key] = change.record.data
            p = change.record.position
            positions.append((p.topic, p.partition, p.offset))
        else:
            assert change.sow_key in state, "a delete or OOF of a record the client did not hold"
            state.pop(change.sow_key)
    return state, positions


def _expected(client: SowClient, filter_text: str) -> dict[str, bytes]:
    records, _, _ = client.query("QUOTES", filter=filter_text, batch_size=10000)
    return {r.sow_key: r.data for r in records}


def run_no_gap(
    bootstrap: str, tmp_path: Path, unique: str, keys: int, clients: int, seconds: float
) -> None:
    topology = namespaced(unique, QUOTES)
    rng = random.Random(9)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        last = list(client.publish_stream("QUOTES", (_message(k, rng) for k in range(keys))))
        client.query("QUOTES", min_position=[r.position for r in last[-2:]])
        stop = threading.Event()
        published: list[Any] = []

        def updates(seed: int) -> Iterator[bytes]:
            local = random.Random(seed)
            while not stop.is_set():
                yield _message(local.randrange(keys), local)

        def publisher(seed: int) -> None:
            published.extend(client.publish_stream("QUOTES", updates(seed), batch_size=200))

        def deleter() -> None:
            local = random.Random(99)
            while not stop.wait(0.05):
                sow_keys = [last[local.randrange(keys)].sow_key for _ in range(5)]
                client.delete("QUOTES", sow_keys)

        workers = [threading.Thread(target=publisher, args=(s,)) for s in (1, 2)]
        workers.append(threading.Thread(target=deleter))
        for worker in workers:
            worker.start()
        collectors: list[tuple[Collector, str]] = []
        started = time.monotonic()
        for number in range(clients):
            time.sleep(rng.uniform(0, seconds / clients * 1.5))
            filter_text, oof = CLIENT_KINDS[number % len(CLIENT_KINDS)]
            stream = client.sow_and_subscribe(
                "QUOTES",
                filter=filter_text,
                oof=oof,
                send_deletes=not oof,
                batch_size=500,
                sub_id=f"c{number}",
                max_backlog=1_000_000,
            )
            collectors.append((Collector(stream), filter_text))
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        stop.set()
        for worker in workers:
            worker.join(60)
        assert published, "the publishers published nothing"
        tails: dict[tuple[str, int], Any] = {}
        for result in published:
            if result.position is not None:
                tails[(result.position.topic, result.position.partition)] = result.position
        client.query("QUOTES", min_position=list(tails.values()), timeout=60)
        for collector, filter_text in collectors:
            expected = _expected(client, filter_text)

            def caught_up(c: Collector, expected: dict[str, bytes] = expected) -> bool:
                return c.group_end() is not None and _rebuild(c)[0] == expected

            assert collector.wait_for(caught_up, 60), (
                f"client {collector.messages[0].sub_id} ({filter_text!r}) does not end with "
                f"the SOW: error {collector.error}; {difference(_rebuild(collector)[0], expected)}"
            )
            _, positions = _rebuild(collector)
            assert len(positions) == len(set(positions)), "a log position was received twice"
            assert collector.error is None
        for collector, _ in collectors:
            collector.stop()
        assert sum(len(c.changes()) for c, _ in collectors) > 0


def test_sow_and_subscribe_has_no_gap_and_no_duplicate(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    run_no_gap(bootstrap, tmp_path, unique, keys=2000, clients=10, seconds=4.0)


@pytest.mark.heavy
def test_sow_and_subscribe_no_gap_at_acceptance_scale(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    run_no_gap(bootstrap, tmp_path, unique, keys=10_000, clients=50, seconds=20.0)
