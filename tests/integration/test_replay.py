"""Issue 10 item 7: bookmark subscriptions replay the changelogs, then go live.

Real broker, real processor, real gRPC. Each bookmark form (epoch, a position vector, a
timestamp, ranges) is checked against the changelog itself: the replay delivers exactly
the matching changes after the bookmark, ``completed`` names the vector it reached, and
the live stream then continues with every change once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.changelog import CONTROL_PREFIX
from processor.client.sow_client import ServiceError, SowClient
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, read_topic, running_sow
from tests.integration.subscription_helpers import Collector

QUOTES = SowTopic("QUOTES", keys=("/id",), partitions=2)
FILTER = "/price > 50"

#: (partition, offset, SowKey, value or None, timestamp ms) of one changelog record.
Change = tuple[int, int, str, bytes | None, int]


@pytest.fixture
def sow(bootstrap: str, tmp_path: Path, unique: str) -> Iterator[tuple[SowClient, Topology]]:
    topology = namespaced(unique, QUOTES)
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        yield client, topology


def publish_rounds(client: SowClient, rng: random.Random, count: int) -> None:
    """Publish (and sometimes delete) ``count`` times; return once the SOW shows it."""
    last = None
    for _ in range(count):
        key = rng.randint(0, 30)
        if rng.random() < 0.15:
            client.delete("QUOTES", [orjson.dumps(key).decode()], timeout=30)
            continue
        message = {"id": key, "price": rng.randint(0, 100)}
        last = client.publish("QUOTES", orjson.dumps(message))
    if last is not None:
        client.query("QUOTES", min_position=[last.position], timeout=30)


def changelog(bootstrap: str, topology: Topology) -> list[Change]:
    """Every data record of the QUOTES changelog, in offset order per partition."""
    name = topology.topic("QUOTES").changelog_topic
    records: Any = read_topic(bootstrap, name, 2, timeout_s=120)
    changes = [
        (r.partition(), r.offset(), r.key().decode(), r.value(), r.timestamp()[1])
        for r in records
        if not r.key().startswith(CONTROL_PREFIX)
    ]
    return sorted(changes, key=lambda c: (c[0], c[1]))


def matching(change: Change) -> bool:
    return change[3] is not None and _price(change[3]) > 50


def _price(envelope: bytes) -> int:
    from processor import changelog as codec

    price: int = orjson.loads(codec.data_of(envelope))["price"]
    return price


def completed(collector: Collector) -> dict[int, int]:
    assert collector.wait_for(
        lambda c: any(m.WhichOneof("part") == "completed" for m in c.messages), 60
    ), f"no completed: {collector.error}"
    message = next(m for m in collector.messages if m.WhichOneof("part") == "completed")
    return {p.partition: p.offset for p in message.completed.position}


def delivered(collector: Collector) -> list[tuple[int, int]]:
    return [
        (c.changelog_position.partition, c.changelog_position.offset) for c in collector.changes()
    ]


def check_replay_then_live(
    client: SowClient,
    bootstrap: str,
    topology: Topology,
    collector: Collector,
    after: dict[int, int],
    rng: random.Random,
) -> None:
    """The replay delivered the matching changes from ``after`` (first offset per
    partition) to ``completed``; then live publishing adds each later one once."""
    reached = completed(collector)
    records = changelog(bootstrap, topology)
    replayed = [(p, o) for p, o, *_ in filter(matching, records) if after[p] <= o < reached[p]]
    assert replayed, "the replay covers some changes"
    assert delivered(collector) == replayed
    publish_rounds(client, rng, 40)
    records = changelog(bootstrap, topology)
    expected = [(p, o) for p, o, *_ in filter(matching, records) if after[p] <= o]
    assert collector.wait_for(lambda c: len(c.changes()) >= len(expected), 60)
    got = delivered(collector)
    assert len(got) == len(set(got)), "a change delivered twice"
    assert sorted(got) == expected
    collector.stop()


def test_epoch_replays_everything_then_goes_live(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    client, topology = sow
    rng = random.Random(1)
    publish_rounds(client, rng, 120)
    plain = Collector(client.subscribe("QUOTES", filter=FILTER, bookmark="0"))
    focused = Collector(client.subscribe("QUOTES", filter=FILTER, bookmark="0", oof=True))
    check_replay_then_live(client, bootstrap, topology, plain, {0: 0, 1: 0}, rng)
    # With oof, the replay keeps the focus: the records held at the end are the SOW's.
    records, _, _ = client.query("QUOTES", filter=FILTER, batch_size=10000)
    held: dict[str, bytes] = {}
    focused.wait_for(lambda c: any(m.WhichOneof("part") == "completed" for m in c.messages))
    for change in focused.changes():
        if change.kind == sow_pb2.CHANGE_PUBLISH:
            held[change.sow_key] = change.record.data
        else:
            assert change.sow_key in held
            held.pop(change.sow_key)
    assert held == {r.sow_key: r.data for r in records}
    focused.stop()


def test_position_vector_resumes_after_each_partition(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    client, topology = sow
    rng = random.Random(2)
    publish_rounds(client, rng, 120)
    records = changelog(bootstrap, topology)
    name = topology.topic("QUOTES").changelog_topic
    middle = {p: [o for q, o, *_ in records if q == p] for p in (0, 1)}
    last_seen = {p: offsets[len(offsets) // 2] for p, offsets in middle.items()}
    bookmark = ",".join(f"{name}/{p}/{o}" for p, o in last_seen.items())
    collector = Collector(client.subscribe("QUOTES", filter=FILTER, bookmark=bookmark))
    after = {p: o + 1 for p, o in last_seen.items()}
    check_replay_then_live(client, bootstrap, topology, collector, after, rng)
    # A partition the vector does not list replays from its earliest offset.
    only_first = Collector(
        client.subscribe("QUOTES", filter=FILTER, bookmark=f"{name}/0/{last_seen[0]}")
    )
    reached = completed(only_first)
    records = changelog(bootstrap, topology)
    expected = [
        (p, o)
        for p, o, *_ in filter(matching, records)
        if (o > last_seen[0] if p == 0 else True) and o < reached[p]
    ]
    assert delivered(only_first) == expected
    only_first.stop()


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def test_timestamp_replays_changes_after_it(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    client, topology = sow
    rng = random.Random(3)
    publish_rounds(client, rng, 100)
    records = changelog(bootstrap, topology)
    moment = sorted(c[4] for c in records)[len(records) // 2]
    after = {}
    for partition in (0, 1):
        later = [o for p, o, _, _, ts in records if p == partition and ts > moment]
        after[partition] = later[0] if later else 1 << 40
    collector = Collector(client.subscribe("QUOTES", filter=FILTER, bookmark=_stamp(moment)))
    check_replay_then_live(client, bootstrap, topology, collector, after, rng)


def test_ranges_replay_between_two_points_then_end(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    client, topology = sow
    rng = random.Random(4)
    publish_rounds(client, rng, 100)
    records = changelog(bootstrap, topology)
    name = topology.topic("QUOTES").changelog_topic
    offsets = [o for p, o, *_ in records if p == 0]
    low, high = offsets[len(offsets) // 4], offsets[3 * len(offsets) // 4]
    # Vectors: "(" starts after the low position, "]" includes the high one; partition 1
    # is listed in neither, so it replays from its start to the present.
    collector = Collector(
        client.subscribe("QUOTES", filter=FILTER, bookmark=f"({name}/0/{low}:{name}/0/{high}]")
    )
    reached = completed(collector)
    assert reached[0] == high + 1
    assert collector.done.wait(10), "a range subscription ends after completed"
    assert collector.error is None
    expected = [
        (p, o)
        for p, o, *_ in filter(matching, records)
        if (low < o <= high if p == 0 else o < reached[1])
    ]
    assert delivered(collector) == expected
    # Timestamps: "[" includes changes at the start time, ")" excludes the end time.
    times = sorted({c[4] for c in records})
    start, end = times[len(times) // 3], times[2 * len(times) // 3]
    collector = Collector(client.subscribe("QUOTES", bookmark=f"[{_stamp(start)}:{_stamp(end)})"))
    completed(collector)
    assert collector.done.wait(10)
    expected = [(p, o) for p, o, _, v, ts in records if v is not None and start <= ts < end]
    assert sorted(delivered(collector)) == sorted(expected)


def test_bad_bookmarks_are_refused_with_the_reason(sow: tuple[SowClient, Topology]) -> None:
    client, _ = sow
    for bookmark, code, fragment in (
        ("elsewhere/0/3", "INVALID_ARGUMENT", "not a changelog partition"),
        ("recent", "INVALID_ARGUMENT", "client-library constant"),
        ("nonsense", "INVALID_ARGUMENT", "is not a position"),
    ):
        stream = client.subscribe("QUOTES", bookmark=bookmark)
        with pytest.raises(ServiceError) as raised:
            list(stream)
        assert raised.value.code == code
        assert fragment in raised.value.details


def test_sow_and_subscribe_ignores_a_bookmark_without_history(
    sow: tuple[SowClient, Topology],
) -> None:
    client, _ = sow
    publish_rounds(client, random.Random(5), 30)
    records, _, _ = client.query("QUOTES", batch_size=10000)
    collector = Collector(client.sow_and_subscribe("QUOTES", bookmark="0", batch_size=1000))
    assert collector.wait_for(lambda c: c.group_end() is not None)
    assert {r.sow_key for r in collector.query_records()} == {r.sow_key for r in records}
    collector.stop()


@pytest.mark.heavy  # ~130 s on the embedded broker: its fetches slow as batches pile up
def test_replays_started_during_publishing_deliver_every_change_once(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    """Bookmark subscriptions start while publishers run: the replay and the live
    stream meet with no gap and no duplicate, whatever arrives during the replay."""
    import threading
    import time

    client, topology = sow
    rng = random.Random(6)
    publish_rounds(client, rng, 150)
    name = topology.topic("QUOTES").changelog_topic
    stop = threading.Event()
    last: list[Any] = []

    def publish() -> None:
        own = random.Random(7)
        while not stop.is_set():
            message = {"id": own.randint(0, 30), "price": own.randint(0, 100)}
            last.append(client.publish("QUOTES", orjson.dumps(message)))
            time.sleep(0.01)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    #: (collector, first offset per partition or None, the time of a timestamp
    #: bookmark or None, filtered).
    started: list[tuple[Collector, dict[int, int] | None, int | None, bool]] = []
    try:
        for round_number in range(4):
            time.sleep(rng.uniform(0.2, 0.6))
            after: dict[int, int] | None = None
            moment = None
            if round_number == 0:
                after, bookmark = {0: 0, 1: 0}, "0"
            elif round_number == 1:
                records = changelog(bootstrap, topology)
                seen = {p: max(o for q, o, *_ in records if q == p) // 2 for p in (0, 1)}
                after = {p: o + 1 for p, o in seen.items()}
                bookmark = ",".join(f"{name}/{p}/{o}" for p, o in seen.items())
            else:
                moment = int(time.time() * 1000) - 300
                bookmark = _stamp(moment)
            filtered = round_number % 2 == 0
            stream = client.subscribe(
                "QUOTES", filter=FILTER if filtered else "", bookmark=bookmark
            )
            started.append((Collector(stream), after, moment, filtered))
    finally:
        stop.set()
        publisher.join(10)
    client.query("QUOTES", min_position=[last[-1].position], timeout=30)
    records = changelog(bootstrap, topology)
    for collector, first, moment, filtered in started:
        after = first or {}
        if first is None:
            # A change committed after the bookmark was taken may have been written
            # before its time: the first offset is decided from the whole changelog.
            for partition in (0, 1):
                later = [o for p, o, _, _, ts in records if p == partition and ts > (moment or 0)]
                after[partition] = later[0] if later else 1 << 62
        expected = [
            (p, o)
            for p, o, _, value, _ in records
            if value is not None
            and after[p] <= o
            and (not filtered or matching((p, o, "", value, 0)))
        ]
        collector.wait_for(lambda c, n=len(expected): len(c.changes()) >= n, 60)  # noqa: B008
        got = delivered(collector)
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        assert not missing, f"after {after}: missing {missing[:10]}; {collector.error}"
        assert not extra, f"after {after}: extra {extra[:10]}"
        assert len(got) == len(set(got)), "a change delivered twice"
        assert sorted(got) == expected
        collector.stop()


def test_a_bookmark_past_the_replica_skips_what_the_client_has(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    """A client failing over to a replica that is behind sends positions past the
    replica's: nothing is replayed there and the live stream starts after them."""
    client, topology = sow
    rng = random.Random(8)
    publish_rounds(client, rng, 40)
    name = topology.topic("QUOTES").changelog_topic
    records = changelog(bootstrap, topology)
    ends = {p: max(o for q, o, *_ in records if q == p) for p in (0, 1)}
    ahead = {p: o + 25 for p, o in ends.items()}
    bookmark = ",".join(f"{name}/{p}/{o}" for p, o in ahead.items())
    collector = Collector(client.subscribe("QUOTES", bookmark=bookmark))
    reached = completed(collector)
    assert reached == {p: o + 1 for p, o in ahead.items()}
    assert collector.changes() == []
    publish_rounds(client, rng, 120)
    records = changelog(bootstrap, topology)
    expected = [(p, o) for p, o, _, v, _ in records if v is not None and o > ahead[p]]
    assert expected, "publishing went past the bookmark"
    assert collector.wait_for(lambda c: len(c.changes()) >= len(expected), 30)
    assert sorted(delivered(collector)) == expected
    collector.stop()


def test_a_session_subscription_replays_from_a_bookmark(
    sow: tuple[SowClient, Topology], bootstrap: str
) -> None:
    client, topology = sow
    rng = random.Random(9)
    publish_rounds(client, rng, 60)
    session = client.session()
    session.subscribe("QUOTES", "replayed", filter=FILTER, bookmark="0")
    collector = Collector(session)
    reached = completed(collector)
    records = changelog(bootstrap, topology)
    expected = [(p, o) for p, o, *_ in filter(matching, records) if o < reached[p]]
    assert delivered(collector) == expected
    publish_rounds(client, rng, 40)
    records = changelog(bootstrap, topology)
    expected = [(p, o) for p, o, *_ in filter(matching, records)]
    assert collector.wait_for(lambda c: len(c.changes()) >= len(expected), 30)
    assert sorted(delivered(collector)) == expected
    collector.stop()
