"""The processor's consumer-group protocol: the setting, the consumer configuration each
protocol gets, and how KafkaInputLog follows eager and incremental rebalances (against a
fake librdkafka consumer that records what it is told)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.config import Settings
from processor.errors import ConfigurationError, StaleGroupError
from processor.log import TopicPartitionKey
from processor.log.broker import EmbeddedKafka, ExternalBroker, TansuBroker, embedded_kafka
from processor.log.kafka import input as kafka_input
from processor.log.kafka.input import KafkaInputLog
from processor.log.kafka.settings import consumer_settings
from processor.log.kafka.transactional import KafkaTransactionalLog

CLIENT_SIDE_GROUP_SETTINGS = ("session.timeout.ms", "heartbeat.interval.ms")


def test_group_protocol_comes_from_the_environment_or_the_broker() -> None:
    assert Settings.from_env({}).group_protocol is None  # the broker decides
    assert Settings.from_env({"SOW_GROUP_PROTOCOL": "consumer"}).group_protocol == "consumer"
    assert Settings.from_env({"SOW_GROUP_PROTOCOL": " Classic "}).group_protocol == "classic"
    assert Settings.from_env({"SOW_GROUP_PROTOCOL": "consumer"}, group_protocol="classic") == (
        Settings.from_env({}, group_protocol="classic")
    )


def test_a_bad_group_protocol_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SOW_GROUP_PROTOCOL": "cooperative"})
    assert str(caught.value) == (
        "group_protocol (SOW_GROUP_PROTOCOL) must be one of classic, consumer, got 'cooperative'"
    )


def test_the_resolved_protocol_reaches_the_processor_child() -> None:
    settings = Settings.from_env({}, group_protocol="consumer")
    assert settings.environment()["SOW_GROUP_PROTOCOL"] == "consumer"
    assert Settings.from_env(settings.environment()) == settings
    assert "SOW_GROUP_PROTOCOL" not in Settings.from_env({}).environment()


def test_only_the_embedded_apache_kafka_defaults_to_the_consumer_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An external broker may be older than Kafka 4.0, which refuses a consumer member.
    assert ExternalBroker("kafka:9092").group_protocol == "classic"
    assert TansuBroker().group_protocol == "classic"
    embedded = EmbeddedKafka(tmp_path)  # not started
    assert int(embedded.version.split(".")[0]) >= 4
    assert embedded.group_protocol == "consumer"
    monkeypatch.setattr(embedded_kafka, "kafka_version", lambda: "3.9.1")
    assert EmbeddedKafka(tmp_path).group_protocol == "classic"


@pytest.mark.parametrize("command", ["serve", "process"])
def test_the_option_reaches_the_settings(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.cli.parser import build_parser
    from processor.cli.serve import _settings

    for variable in Settings.ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)
    parser = build_parser()
    assert _settings(parser.parse_args([command])).group_protocol is None
    args = parser.parse_args([command, "--group-protocol", "consumer"])
    assert _settings(args).group_protocol == "consumer"
    monkeypatch.setenv("SOW_GROUP_PROTOCOL", "consumer")
    args = parser.parse_args([command, "--group-protocol", "classic"])
    assert _settings(args).group_protocol == "classic"  # the option wins


def test_a_bad_option_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from processor.cli.parser import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["process", "--group-protocol", "eager"])
    assert exited.value.code == 2
    assert "--group-protocol: invalid choice: 'eager'" in capsys.readouterr().err


def test_the_classic_protocol_keeps_the_client_side_group_settings() -> None:
    settings = consumer_settings("kafka:9092", **{"group.id": "g"})
    assert settings["group.protocol"] == "classic"
    assert settings["partition.assignment.strategy"] == "range"
    assert (settings["session.timeout.ms"], settings["heartbeat.interval.ms"]) == (6000, 500)
    assert "group.remote.assignor" not in settings


def test_the_consumer_protocol_leaves_the_group_settings_to_the_broker() -> None:
    settings = consumer_settings("kafka:9092", "consumer", **{"group.id": "g"})
    assert settings["group.protocol"] == "consumer"
    assert settings["group.remote.assignor"] == "range"  # co-partitions input + repartition
    for name in (*CLIENT_SIDE_GROUP_SETTINGS, "partition.assignment.strategy"):
        assert name not in settings
    assert settings["isolation.level"] == "read_committed"  # the rest is unchanged
    with pytest.raises(ConfigurationError, match="group_protocol must be classic or consumer"):
        consumer_settings("kafka:9092", "eager")


def test_librdkafka_takes_either_configuration() -> None:
    """librdkafka refuses the client-side group settings under the consumer protocol: the
    configurations built here are the ones it accepts (no broker is contacted)."""
    from confluent_kafka import Consumer

    for protocol in ("classic", "consumer"):
        Consumer(consumer_settings("127.0.0.1:1", protocol, **{"group.id": "g"})).close()
    refused = {**consumer_settings("127.0.0.1:1", "consumer"), "session.timeout.ms": 6000}
    with pytest.raises(KafkaException, match=r"session\.timeout\.ms"):
        Consumer({**refused, "group.id": "g"})


def test_properties_the_consumer_protocol_refuses_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaInputLog("127.0.0.1:1", "g", group_protocol="consumer", **{"session.timeout.ms": 6000})
    assert "group_protocol=consumer" in str(caught.value)
    assert "SOW_KAFKA_PROPERTIES must not set them" in str(caught.value)


class FakeConsumer:
    """Records the calls KafkaInputLog makes; ``fire_*`` play librdkafka's callbacks."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []
        self.committed_offsets: dict[TopicPartitionKey, int] = {}
        self.on_assign: Any = None
        self.on_revoke: Any = None
        self.positions: dict[TopicPartitionKey, int] = {}

    def subscribe(self, topics: list[str], on_assign: Any, on_revoke: Any) -> None:
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.committed_offsets.get(key(tp), -1001))
            for tp in partitions
        ]

    def _note(self, name: str, partitions: Sequence[TopicPartition] = ()) -> None:
        self.calls.append((name, sorted((tp.topic, tp.partition, tp.offset) for tp in partitions)))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._note("assign", partitions)

    def unassign(self) -> None:
        self._note("unassign")

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._note("incremental_assign", partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._note("incremental_unassign", partitions)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get(key(tp), -1001))
            for tp in partitions
        ]

    def seek(self, partition: TopicPartition) -> None:
        self._note("seek", [partition])

    def close(self) -> None:
        self._note("close")

    def fire_assign(self, *keys: TopicPartitionKey) -> None:
        self.on_assign(self, [TopicPartition(t, p) for t, p in keys])

    def fire_revoke(self, *keys: TopicPartitionKey) -> None:
        self.on_revoke(self, [TopicPartition(t, p) for t, p in keys])


def key(tp: TopicPartition) -> TopicPartitionKey:
    return (tp.topic, tp.partition)


class Callbacks:
    """The processor's side: holds partitions listed in ``hold`` (None start)."""

    def __init__(self) -> None:
        self.hold: set[TopicPartitionKey] = set()
        self.assigned: list[list[TopicPartitionKey]] = []
        self.revoked: list[list[TopicPartitionKey]] = []

    def on_assign(
        self, partitions: Sequence[TopicPartitionKey], committed: Mapping[TopicPartitionKey, int]
    ) -> Mapping[TopicPartitionKey, int | None]:
        self.assigned.append(sorted(partitions))
        return {tp: None for tp in partitions if tp in self.hold}

    def on_revoke(self, partitions: Sequence[TopicPartitionKey]) -> None:
        self.revoked.append(sorted(partitions))


def input_log(
    monkeypatch: pytest.MonkeyPatch, protocol: str, static: bool = False
) -> tuple[KafkaInputLog, FakeConsumer, Callbacks]:
    made: list[FakeConsumer] = []

    def fake(config: Mapping[str, Any]) -> FakeConsumer:
        made.append(FakeConsumer(config))
        return made[-1]

    monkeypatch.setattr(kafka_input, "Consumer", fake)
    log = KafkaInputLog("kafka:9092", "g", static=static, group_protocol=protocol)
    callbacks = Callbacks()
    if not static:
        log.subscribe(["in", "re"], callbacks.on_assign, callbacks.on_revoke)
    return log, made[0], callbacks


def test_a_static_instance_joins_no_group_whatever_the_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, consumer, _ = input_log(monkeypatch, "consumer", static=True)
    assert consumer.config["group.protocol"] == "classic"
    assert not log.incremental


def test_eager_rebalances_replace_the_whole_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    log, consumer, callbacks = input_log(monkeypatch, "classic")
    assert consumer.config["partition.assignment.strategy"] == "range"
    assert not log.incremental
    consumer.committed_offsets = {("in", 0): 5, ("re", 0): 7}
    callbacks.hold = {("re", 0)}
    consumer.fire_assign(("in", 0), ("re", 0))
    assert consumer.calls[-1] == ("assign", [("in", 0, 5)])
    consumer.positions = {("in", 0): 9}
    log.resume({("re", 0): None})
    assert consumer.calls[-1] == ("assign", [("in", 0, 9), ("re", 0, 7)])
    consumer.fire_revoke(("in", 0), ("re", 0))
    assert consumer.calls[-1] == ("unassign", [])
    assert callbacks.revoked == [[("in", 0), ("re", 0)]]


def test_incremental_rebalances_add_and_remove_only_what_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, consumer, callbacks = input_log(monkeypatch, "consumer")
    assert consumer.config["group.protocol"] == "consumer"
    assert consumer.config["group.remote.assignor"] == "range"
    assert log.incremental
    consumer.committed_offsets = {("in", 0): 5, ("in", 1): 6, ("re", 1): 8}
    consumer.fire_assign(("in", 0), ("re", 0))
    assert consumer.calls[-1] == ("incremental_assign", [("in", 0, 5), ("re", 0, -1001)])
    # More partitions later: only they are added; one is held for its store's recovery.
    callbacks.hold = {("re", 1)}
    consumer.fire_assign(("in", 1), ("re", 1))
    assert consumer.calls[-1] == ("incremental_assign", [("in", 1, 6)])
    assert callbacks.assigned == [[("in", 0), ("re", 0)], [("in", 1), ("re", 1)]]
    # Resumed by itself: the fetching partitions are not assigned again.
    log.resume({("re", 1): None})
    assert consumer.calls[-1] == ("incremental_assign", [("re", 1, 8)])
    # A revocation removes only what it names.
    consumer.fire_revoke(("in", 0), ("re", 0))
    assert consumer.calls[-1][0] == "incremental_unassign"
    assert [(t, p) for t, p, _ in consumer.calls[-1][1]] == [("in", 0), ("re", 0)]
    assert callbacks.revoked == [[("in", 0), ("re", 0)]]
    consumer.fire_revoke(("in", 1))
    assert [(t, p) for t, p, _ in consumer.calls[-1][1]] == [("in", 1)]


def test_a_partition_revoked_while_held_is_neither_unassigned_nor_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka never had it: unassigning it would be refused, resuming it would fetch
    a partition another member now owns."""
    log, consumer, callbacks = input_log(monkeypatch, "consumer")
    callbacks.hold = {("in", 2), ("re", 2)}
    consumer.fire_assign(("in", 2), ("re", 2), ("in", 3))
    assert consumer.calls[-1] == ("incremental_assign", [("in", 3, -1001)])
    consumer.fire_revoke(("in", 2), ("in", 3))
    assert consumer.calls[-1] == ("incremental_unassign", [("in", 3, -1001)])
    before = len(consumer.calls)
    log.resume({("in", 2): None})
    assert len(consumer.calls) == before  # nothing left to resume
    log.resume({("re", 2): 11})
    assert consumer.calls[-1] == ("incremental_assign", [("re", 2, 11)])


def test_an_empty_callback_still_settles_the_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback itself must (un)assign, even nothing: otherwise confluent-kafka
    assigns (or unassigns) everything it was given, held partitions included."""
    _, consumer, callbacks = input_log(monkeypatch, "consumer")
    callbacks.hold = {("in", 0)}
    consumer.fire_assign(("in", 0))
    assert consumer.calls[-1] == ("incremental_assign", [])
    consumer.fire_revoke(("in", 0))
    assert consumer.calls[-1] == ("incremental_unassign", [])
    consumer.fire_assign()
    assert consumer.calls[-1] == ("incremental_assign", [])
    assert callbacks.assigned[-1] == []  # a member given nothing is told so


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_callbacks_while_closing_take_nothing_on(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing leaves the group: an assignment that arrives then is not opened (no
    committed-offset look-up, no store), a revocation only keeps librdkafka's books."""
    log, consumer, callbacks = input_log(monkeypatch, protocol)
    consumer.fire_assign(("in", 0))
    log.close()
    consumer.fire_assign(("in", 1))
    consumer.fire_revoke(("in", 0), ("in", 1))
    assert callbacks.assigned == [[("in", 0)]]
    assert callbacks.revoked == []
    if protocol == "consumer":
        assert consumer.calls[-2:] == [
            ("incremental_assign", []),
            ("incremental_unassign", [("in", 0, -1001)]),
        ]
    else:
        assert consumer.calls[-2:] == [("assign", []), ("unassign", [])]


def test_rewind_seeks_each_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    log, consumer, _ = input_log(monkeypatch, "consumer")
    log.rewind({("re", 1): 4, ("in", 0): 10})
    assert consumer.calls[-2:] == [("seek", [("in", 0, 10)]), ("seek", [("re", 1, 4)])]


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    ],
)
def test_offsets_refused_by_a_moved_on_group_are_a_stale_group_error(code: int) -> None:
    class Producer:
        def send_offsets_to_transaction(self, *args: object) -> None:
            raise KafkaException(KafkaError(code, "refused"))

    from processor.log.kafka.transactional import _CallThread

    log = KafkaTransactionalLog.__new__(KafkaTransactionalLog)
    log._producer = Producer()  # type: ignore[assignment]
    log._helper = _CallThread("test-txn-call")  # send_offsets runs on it
    try:
        with pytest.raises(StaleGroupError, match="the group refused the transaction's offsets"):
            log.send_offsets({("in", 0): 1}, object())
    finally:
        log._helper.stop()


@pytest.mark.parametrize(
    ("setting", "broker", "asked", "used"),
    [
        ("group_protocol", "consumer", None, "consumer"),  # the embedded Apache Kafka
        ("group_protocol", "classic", None, "classic"),  # an external broker, or Tansu
        ("group_protocol", "consumer", "classic", "classic"),
        ("group_protocol", "classic", "consumer", "consumer"),
        ("assignment", "group", None, "group"),  # Apache Kafka: sow serve's joins its group
        ("assignment", "static", None, "static"),  # the embedded Tansu broker: no group join
        ("assignment", "static", "group", "group"),
        ("assignment", "group", "static", "static"),
    ],
)
def test_a_start_takes_the_brokers_protocol_and_assignment_unless_one_is_set(
    setting: str, broker: str, asked: str | None, used: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the broker implies, unless the settings say; resolved at start, it goes to
    ``sow serve``'s processor child too."""
    from processor import app as application
    from processor.app import backend
    from processor.topology.model import SowTopic, Topology

    class FakeBroker:
        bootstrap_servers = "127.0.0.1:1"
        description = "a fake broker"
        fetch_wait_ms = 10
        keeps_log = True
        group_protocol = "classic"
        assignment = "group"

        def stop(self) -> None:
            pass

    setattr(FakeBroker, setting, broker)
    monkeypatch.setattr(backend, "start_broker", lambda *a, **k: FakeBroker())
    monkeypatch.setattr(backend, "ensure_topics", lambda *a, **k: None)
    topology = Topology({"ORDERS": SowTopic("ORDERS", keys=("/id",))})
    settings = Settings(**{setting: asked})
    started = application.start(settings, topology=topology, processor=False, service=False)
    try:
        assert getattr(started.settings, setting) == used
        assert started.settings.environment()[f"SOW_{setting.upper()}"] == used  # to the child
    finally:
        started.stop()


def test_every_static_processor_of_a_group_has_the_groups_one_transactional_id() -> None:
    """Whatever its instance id, so that two fence each other and every group member
    fences them (processor.log.kafka.ownership); no replica's id is the same."""
    one = Settings(assignment="static", group_id="g", instance_id="1")
    two = Settings(assignment="static", group_id="g", instance_id="2")
    assert one.transactional_id == two.transactional_id == "g.static"
    members = {Settings(group_id="g", instance_id=i).transactional_id for i in ("0", "static")}
    assert "g.static" not in members
