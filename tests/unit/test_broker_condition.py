"""The Kafka cluster's condition (processor/log/kafka/condition.py), judged from fake
metadata: healthy, degraded but progressing, or blocking, in one line; published only
once it held for two polls; time counted in each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaException

from processor.log.kafka.condition import (
    BLOCKING,
    DEGRADED,
    HEALTHY,
    ClusterView,
    ClusterWatch,
    Condition,
    Steady,
    judge,
)
from processor.log.kafka.settings import Refusals

MIN_2 = {"t": 2, "u": 2}


def metadata(
    brokers: Sequence[int], partitions: Mapping[tuple[str, int], tuple[int, list[int], list[int]]]
) -> Any:
    """A confluent-kafka ClusterMetadata look-alike: brokers listed, and per (topic,
    partition) its leader, replicas and in-sync replicas."""
    topics: dict[str, Any] = {}
    for (name, p), (leader, replicas, isr) in partitions.items():
        topic = topics.setdefault(name, SimpleNamespace(error=None, partitions={}))
        topic.partitions[p] = SimpleNamespace(leader=leader, replicas=replicas, isrs=isr)
    return SimpleNamespace(brokers={b: SimpleNamespace(id=b) for b in brokers}, topics=topics)


def view(brokers: Sequence[int], partitions: Mapping[Any, Any], topics: Sequence[str] = ("t", "u")):
    return ClusterView.of(metadata(brokers, partitions), topics)


ALL = [1, 2, 3]


def test_every_broker_up_and_every_replica_in_sync_is_healthy() -> None:
    seen = view(ALL, {("t", 0): (1, ALL, ALL), ("t", 1): (2, ALL, ALL), ("u", 0): (3, ALL, ALL)})
    assert judge(seen, MIN_2) == Condition(HEALTHY, "", 3)


def test_one_broker_down_with_leaders_and_enough_in_sync_replicas_is_degraded() -> None:
    seen = view([1, 2], {("t", 0): (1, ALL, [1, 2]), ("t", 1): (2, ALL, [1, 2])})
    condition = judge(seen, MIN_2)
    assert condition.state == DEGRADED
    assert condition.answering == 2
    assert condition.text == (
        "1 of 3 brokers is down (id 3); every partition has a leader and enough in-sync "
        "replicas: bring it back before another fails"
    )


def test_a_broker_known_before_and_no_longer_listed_counts_as_down() -> None:
    """Replicas name every broker that holds a copy; one known only from earlier answers
    (it holds none of the watched partitions) is down too once it is not listed."""
    seen = view([1, 2], {("t", 0): (1, [1, 2], [1, 2])})
    assert judge(seen, MIN_2, known={1, 2, 3}).text.startswith("1 of 3 brokers is down (id 3)")


def test_two_brokers_down_leaves_fewer_in_sync_replicas_than_the_minimum() -> None:
    seen = view([1], {("t", 0): (1, ALL, [1]), ("t", 1): (1, ALL, [1]), ("u", 0): (1, ALL, [1])})
    condition = judge(seen, MIN_2)
    assert condition.state == BLOCKING
    assert condition.text == (
        "2 of 3 brokers are down (ids 2, 3); t[0] (and 2 more partitions) has 1 in-sync "
        "replica, fewer than min.insync.replicas=2: writes to it are refused until a broker "
        "returns"
    )
    assert "\n" not in condition.text


def test_a_partition_without_a_leader_blocks_first() -> None:
    seen = view([1], {("t", 0): (1, ALL, [1]), ("u", 0): (-1, [2, 3], [3])})
    condition = judge(seen, MIN_2)
    assert condition.state == BLOCKING
    assert condition.text == (
        "2 of 3 brokers are down (ids 2, 3); u[0] has no leader: it can be neither written "
        "nor read until a broker of its replicas (2, 3) returns"
    )


def test_a_leader_on_a_broker_not_listed_is_no_leader() -> None:
    seen = view([1, 2], {("t", 0): (3, ALL, ALL)})
    assert "t[0] has no leader" in judge(seen, MIN_2).text


def test_the_minimum_is_each_topics_own() -> None:
    """One copy in sync is enough for a topic of min.insync.replicas=1."""
    seen = view([1], {("t", 0): (1, ALL, [1])}, topics=["t"])
    assert judge(seen, {"t": 1}).state == DEGRADED


def test_replicas_catching_up_with_every_broker_up_is_degraded() -> None:
    seen = view(ALL, {("t", 0): (1, ALL, [1, 2]), ("t", 1): (1, ALL, [1, 2])})
    condition = judge(seen, MIN_2)
    assert condition.state == DEGRADED
    assert condition.text.startswith("t[0] (and 1 more partition) has 2 of 3 replicas in sync")


def test_topics_not_watched_and_topics_in_error_are_left_out() -> None:
    data = metadata(ALL, {("t", 0): (1, ALL, ALL), ("other", 0): (-1, ALL, [])})
    data.topics["u"] = SimpleNamespace(error="UNKNOWN_TOPIC", partitions={})
    seen = ClusterView.of(data, ["t", "u"])
    assert [p.name for p in seen.partitions] == ["t[0]"]
    assert judge(seen, MIN_2).state == HEALTHY


def test_a_new_state_is_published_after_two_judgements_in_a_row() -> None:
    steady = Steady(hold=2)
    blocked = Condition(BLOCKING, "x", 1)
    assert steady.update(Condition(HEALTHY, "", 3), 0.0).state == HEALTHY
    assert steady.update(blocked, 1.0).state == HEALTHY  # one odd answer: not yet
    assert steady.update(Condition(HEALTHY, "", 3), 2.0).state == HEALTHY
    assert steady.update(blocked, 3.0).state == HEALTHY
    assert steady.update(blocked, 4.0) == blocked
    # A new text in the same state is published at once.
    assert steady.update(Condition(BLOCKING, "y", 1), 5.0).text == "y"
    assert steady.update(Condition(HEALTHY, "", 3), 6.0).state == BLOCKING
    assert steady.update(Condition(DEGRADED, "d", 3), 7.0).state == BLOCKING
    assert steady.update(Condition(DEGRADED, "d", 3), 8.0).state == DEGRADED
    assert steady.update(Condition(HEALTHY, "", 3), 9.0).state == DEGRADED
    assert steady.update(Condition(HEALTHY, "", 3), 10.0).state == HEALTHY


def test_time_in_each_state_is_counted() -> None:
    steady = Steady(hold=1)
    steady.update(Condition(HEALTHY), 0.0)
    steady.update(Condition(BLOCKING, "x"), 10.0)
    assert steady.seconds(BLOCKING, 12.5) == pytest.approx(2.5)
    steady.update(Condition(DEGRADED, "d"), 15.0)
    steady.update(Condition(HEALTHY), 18.0)
    assert steady.seconds(BLOCKING, 30.0) == pytest.approx(5.0)
    assert steady.seconds(DEGRADED, 30.0) == pytest.approx(3.0)
    assert steady.seconds(HEALTHY, 30.0) == pytest.approx(22.0)


class FakeAdmin:
    """Answers list_topics with the metadata set (None: no answer), and describe_configs
    with min.insync.replicas=2."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.configs_asked: list[str] = []

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        if self.answer is None:
            raise KafkaException("timed out")
        return self.answer

    def poll(self, timeout: float) -> int:
        return 0

    def describe_configs(self, resources: Sequence[Any], request_timeout: float) -> Any:
        class Done:
            def result(self, timeout: float) -> Any:
                return {"min.insync.replicas": SimpleNamespace(value="2")}

        self.configs_asked.extend(r.name for r in resources)
        return {r: Done() for r in resources}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watch_publishes_held_judgements_and_silence() -> None:
    clock, admin = Clock(), FakeAdmin()
    watch = ClusterWatch(
        "b:9092", ["t"], clock=clock, poll_s=0.001, silent_after_s=3.0, probe=lambda _: set()
    )
    assert not watch.active  # nothing to show before the first answer
    admin.answer = metadata(ALL, {("t", 0): (1, ALL, ALL)})
    watch.poll(admin, Refusals("test"))
    assert watch.active
    assert watch.blocking() is None
    assert admin.configs_asked == ["t"]
    admin.answer = metadata([1], {("t", 0): (1, ALL, [1])})
    for _ in range(2):
        clock.now += 1
        watch.poll(admin, Refusals("test"))
    assert watch.blocking() is not None
    assert "fewer than min.insync.replicas=2" in (watch.blocking() or "")
    assert admin.configs_asked == ["t"]  # read once
    admin.answer = metadata(ALL, {("t", 0): (1, ALL, ALL)})
    for _ in range(2):
        clock.now += 1
        watch.poll(admin, Refusals("test"))
    assert watch.condition.state == HEALTHY
    assert watch.seconds(BLOCKING) == pytest.approx(2.0)
    admin.answer = None  # nobody answers: silence counts after 3 s only
    for _ in range(2):
        clock.now += 1
        watch.poll(admin, Refusals("test"))
    assert watch.condition.state == HEALTHY
    for _ in range(2):
        clock.now += 1
        watch.poll(admin, Refusals("test"))
    assert (watch.blocking() or "").startswith("no broker answers at b:9092 (none for 3s or more)")


def test_a_single_broker_is_not_watched() -> None:
    admin = FakeAdmin()
    admin.answer = metadata([1], {("t", 0): (1, [1], [1])})
    watch = ClusterWatch("b:9092", ["t"], poll_s=0.001, probe=lambda _: set())
    watch.poll(admin, Refusals("test"))
    assert not watch.watching
    assert not watch.active
    assert watch.condition.state == HEALTHY
    assert admin.configs_asked == []


def test_the_metrics_show_the_condition_and_the_time_in_it() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from processor.observability.condition import ConditionCollector

    clock, admin = Clock(), FakeAdmin()
    watch = ClusterWatch("b:9092", ["t"], clock=clock, poll_s=0.001, probe=lambda _: set())
    registry = CollectorRegistry()
    registry.register(ConditionCollector(lambda: watch))
    assert generate_latest(registry) == b""  # not judged yet
    admin.answer = metadata([1], {("t", 0): (1, ALL, [1])})
    for _ in range(3):
        watch.poll(admin, Refusals("test"))
        clock.now += 1
    text = generate_latest(registry).decode()
    assert "sow_brokers_answering 1.0" in text
    assert "sow_broker_blocking 1.0" in text
    assert "sow_broker_degraded 0.0" in text
    assert "sow_broker_blocking_seconds_total 2.0" in text
    assert 'sow_broker_condition{condition="2 of 3 brokers are down (ids 2, 3); t[0] has' in text


def test_a_call_that_waited_on_a_blocking_cluster_says_why() -> None:
    import grpc

    from processor import errors
    from processor.server.calls import Calls

    class Context:
        def abort(self, code: grpc.StatusCode, message: str) -> None:
            self.ended = (code, message)

    said: list[str | None] = ["orders[0] has 1 in-sync replica"]
    calls = Calls(blocking=lambda: said[0])
    context = Context()
    calls.abort(context, errors.UnconfirmedWriteError("the broker did not confirm"))
    assert context.ended[0] == grpc.StatusCode.UNAVAILABLE
    assert context.ended[1].endswith(
        "(the Kafka cluster is blocking: orders[0] has 1 in-sync replica)"
    )
    calls.abort(context, errors.UnknownTopicError("no topic X"))  # not a wait on the broker
    assert "blocking" not in context.ended[1]
    said[0] = None
    calls.abort(context, errors.UnconfirmedWriteError("the broker did not confirm"))
    assert context.ended[1] == "the broker did not confirm"


def test_brokers_that_refuse_connections_are_down_even_when_stale_metadata_lists_them() -> None:
    """Two of three members SIGKILLed: the controller quorum is lost, and the survivor's
    metadata still lists all three with their old leaders and in-sync replicas."""
    import socket

    from processor.log.kafka.condition import unreachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = listening.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            down = closed.getsockname()[1]  # bound, not listening: refused
            brokers = {
                1: SimpleNamespace(host="127.0.0.1", port=up),
                2: SimpleNamespace(host="127.0.0.1", port=down),
            }
            assert unreachable(brokers) == {2}
    stale = metadata(
        [1, 2, 3], {("t", 0): (1, [1, 2, 3], [1, 2, 3]), ("t", 1): (2, [1, 2, 3], [1, 2, 3])}
    )
    assert judge(ClusterView.of(stale, ["t"]), MIN_2).state == "healthy"  # as it claims
    seen = judge(ClusterView.of(stale, ["t"], unreachable={2, 3}), MIN_2)
    assert seen.state == "blocking"
    assert seen.text.startswith("2 of 3 brokers are down (ids 2, 3); t[1] has no leader")


def test_an_answer_the_watch_cannot_judge_is_said_and_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch thread outlives a bad answer (never a dead thread behind a stale state)."""
    import threading

    asked = threading.Event()
    calls: list[int] = []

    class Watch(ClusterWatch):
        def poll(self, admin: Any, refusals: Any) -> None:
            calls.append(1)
            if len(calls) < 3:
                raise ValueError("an odd answer")
            asked.set()

    watch = Watch("127.0.0.1:1", ["t"], poll_s=0.01).start()
    try:
        assert asked.wait(10), "the watch did not ask again after a bad answer"
        assert watch.watching
    finally:
        watch.stop()
    assert not watch.watching
    assert watch.blocking() is None
    said = [r for r in caplog.records if "could not judge" in r.getMessage()]
    assert len(said) == 1
