"""Settings: environment variables, validation, and the round trip a child process uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.config import Settings
from processor.errors import ConfigurationError
from processor.log.broker import (
    KAFKA_FETCH_WAIT_MS,
    TANSU_FETCH_WAIT_MS,
    ExternalBroker,
    TansuBroker,
)


def test_fetch_wait_from_the_environment() -> None:
    settings = Settings.from_env({"SOW_FETCH_WAIT_MS": "5"})
    assert settings.fetch_wait_ms == 5


def test_fetch_wait_unset_means_the_brokers_default() -> None:
    assert Settings.from_env({}).fetch_wait_ms is None
    assert TansuBroker().fetch_wait_ms == TANSU_FETCH_WAIT_MS
    assert ExternalBroker("kafka:9092").fetch_wait_ms == KAFKA_FETCH_WAIT_MS


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("soon", "fetch_wait_ms must be a whole number of milliseconds, got 'soon'"),
        ("0", "fetch_wait_ms must be between 1 and 1000 milliseconds, got '0'"),
        ("5000", "fetch_wait_ms must be between 1 and 1000 milliseconds, got '5000'"),
    ],
)
def test_fetch_wait_refuses_bad_values(raw: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SOW_FETCH_WAIT_MS": raw})
    assert str(caught.value) == message


def test_max_batch_refuses_bad_values() -> None:
    with pytest.raises(ConfigurationError, match="max_batch must be at least 1 records"):
        Settings.from_env({"SOW_MAX_BATCH": "0"})
    with pytest.raises(ConfigurationError, match="whole number of records"):
        Settings.from_env({"SOW_MAX_BATCH": "many"})


def test_environment_round_trips_for_a_child_process() -> None:
    settings = Settings.from_env({}, fetch_wait_ms=3, max_batch=500, assignment="static")
    assert Settings.from_env(settings.environment()) == settings


def test_kafka_properties_reach_every_client_config() -> None:
    from processor.log.kafka.settings import (
        client_settings,
        consumer_settings,
        producer_settings,
        use_client_properties,
    )

    settings = Settings.from_env(
        {
            "SOW_KAFKA_PROPERTIES": "security.protocol=SASL_SSL; sasl.mechanism=PLAIN;;"
            "sasl.password=a=b"
        }
    )
    wanted = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "a=b"}
    assert settings.client_properties == wanted
    assert settings.environment()["SOW_KAFKA_PROPERTIES"] == settings.kafka_properties
    use_client_properties(settings.client_properties)
    try:
        consumer = consumer_settings("kafka:9092", **{"group.id": "g"})
        producer = producer_settings("kafka:9092", **{"transactional.id": "t"})
        admin = client_settings("kafka:9092")
        for config in (consumer, producer, admin):
            assert wanted.items() <= config.items()
            assert config["bootstrap.servers"] == "kafka:9092"
        assert consumer["group.id"] == "g"
        assert producer["transactional.id"] == "t"
        assert consumer["isolation.level"] == "read_committed"  # the product's own stay
    finally:
        use_client_properties({})
    assert "security.protocol" not in consumer_settings("kafka:9092")


@pytest.mark.parametrize(
    ("raw", "entry"),
    [
        ("security.protocol", "entry 1 'security.protocol'"),
        ("security.protocol=SSL;=PLAIN", "entry 2 '=PLAIN'"),
        ("bad key=1", "entry 1 'bad key=1'"),
    ],
)
def test_kafka_properties_refuse_malformed_values(raw: str, entry: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SOW_KAFKA_PROPERTIES": raw})
    message = str(caught.value)
    assert f"kafka_properties (SOW_KAFKA_PROPERTIES) {entry} is not key=value" in message
    assert "'key=value;key=value'" in message


def test_kafka_properties_reach_the_products_clients() -> None:
    """The product's own client (KafkaLogWriter) is built with the properties: librdkafka
    sees them (it refuses an unknown one) and the writer's record limit follows
    message.max.bytes given there."""
    from confluent_kafka import KafkaException

    from processor.log.kafka.settings import use_client_properties
    from processor.log.kafka.writer import RECORD_FRAMING_BYTES, KafkaLogWriter

    try:
        use_client_properties({"message.max.bytes": "2000000"})
        writer = KafkaLogWriter("127.0.0.1:1")
        try:
            assert writer.max_record_bytes == 2_000_000 - RECORD_FRAMING_BYTES
        finally:
            writer.close()
        use_client_properties({"no.such.property": "1"})
        with pytest.raises(KafkaException, match=r"no\.such\.property"):
            KafkaLogWriter("127.0.0.1:1")
    finally:
        use_client_properties({})


def test_a_start_refuses_properties_kafka_does_not_know() -> None:
    from processor.app import start
    from processor.log.kafka.settings import use_client_properties

    settings = Settings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "SOW_TOPOLOGY": str(Path(__file__).resolve().parents[2] / "topologies" / "orders.yaml"),
            "SOW_KAFKA_PROPERTIES": "security.protocol=PLAINTEXT;no.such.property=1",
        }
    )
    try:
        with pytest.raises(ConfigurationError) as caught:
            start(settings, processor=True, service=False)
    finally:
        use_client_properties({})
    assert str(caught.value) == (
        "the Kafka client refused its configuration: No such configuration property: "
        '"no.such.property"; check the properties given in SOW_KAFKA_PROPERTIES '
        "(['no.such.property', 'security.protocol'])"
    )


def test_standby_is_off_unless_asked() -> None:
    assert Settings.from_env({}).standby == "off"
    assert Settings.from_env({"SOW_STANDBY": "all"}).standby == "all"
    assert Settings.from_env({"SOW_STANDBY": " ALL "}).standby == "all"
    assert Settings.from_env({"SOW_STANDBY": "all"}, standby="off").standby == "off"


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("SOW_STANDBY", "2", "standby (SOW_STANDBY) must be one of off, all, got '2'"),
        (
            "SOW_MEMBERSHIP",
            "sticky",
            "membership (SOW_MEMBERSHIP) must be one of dynamic, static, got 'sticky'",
        ),
        (
            "SOW_ASSIGNMENT",
            "round-robin",
            "assignment (SOW_ASSIGNMENT) must be one of group, static, got 'round-robin'",
        ),
    ],
)
def test_choices_refuse_other_values_naming_the_variable(
    variable: str, raw: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({variable: raw})
    assert str(caught.value) == message


def test_membership_is_static_only_when_asked() -> None:
    assert Settings.from_env({}).membership == "dynamic"
    assert Settings.from_env({}).group_instance_id is None
    unasked = Settings.from_env({"SOW_INSTANCE_ID": "sow-processor-2", "SOW_GROUP_ID": "g"})
    assert unasked.membership == "dynamic"
    assert unasked.group_instance_id is None
    asked = Settings.from_env(
        {"SOW_INSTANCE_ID": "sow-processor-2", "SOW_GROUP_ID": "g", "SOW_MEMBERSHIP": "static"}
    )
    assert asked.group_instance_id == "g-sow-processor-2" == asked.transactional_id
    assert Settings.from_env({"SOW_MEMBERSHIP": "static"}).group_instance_id == "sow-processor-0"


def test_a_child_process_keeps_dynamic_membership_and_standby() -> None:
    # The child always gets SOW_INSTANCE_ID: it must not turn dynamic into static.
    settings = Settings.from_env({}, standby="all")
    child = Settings.from_env(settings.environment())
    assert child == settings
    assert child.membership == "dynamic"
    assert child.standby == "all"


def test_sow_process_options_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.cli.parser import build_parser
    from processor.cli.serve import _settings

    for variable in Settings.ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)
    parser = build_parser()
    args = parser.parse_args(["process", "--standby", "all", "--instance-id", "sow-processor-1"])
    settings = _settings(args)
    assert (settings.standby, settings.membership) == ("all", "dynamic")
    args = parser.parse_args(["process", "--instance-id", "1", "--membership", "static"])
    assert _settings(args).group_instance_id == "sow-processor-1"
    args = parser.parse_args(["process", "--instance-id", "1", "--membership", "dynamic"])
    assert _settings(args).group_instance_id is None
    with pytest.raises(SystemExit):
        parser.parse_args(["process", "--standby", "some"])


@pytest.mark.parametrize("given", ["0", "-1", "abc", "inf", "nan"])
def test_a_timeout_must_be_a_positive_number_of_seconds(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from processor.cli.parser import build_parser

    for command in (["query", "T"], ["subscribe", "T"], ["publish", "T"], ["status"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*command, "--timeout", given])
        assert exited.value.code == 2
        assert f"{given!r} is not a positive number of seconds" in capsys.readouterr().err
    assert build_parser().parse_args(["query", "T", "--timeout", "0.5"]).timeout == 0.5


def test_the_docs_table_is_the_settings() -> None:
    """docs/operations.md shows the table derived from the settings' one definition."""
    from processor.config.docs import settings_table

    assert settings_table() in Path("docs/operations.md").read_text()


def test_the_chart_schema_types_the_values_that_set_settings() -> None:
    """The Helm values schema of every chart value that sets a setting is the one derived
    from the setting (its choices, its bounds)."""
    import json

    from processor.config.docs import helm_schema

    schema = json.loads(Path("helm/kafka-sow/values.schema.json").read_text())
    for path, expected in helm_schema().items():
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        assert node == expected, path


def test_every_setting_has_one_variable_and_a_meaning() -> None:
    from processor.config import Settings, specs_by_name

    specs = specs_by_name()
    assert list(Settings.ENVIRONMENT) == list(specs)
    assert len(set(Settings.ENVIRONMENT.values())) == len(specs)
    assert all(spec.meaning and spec.default_text for spec in specs.values())
