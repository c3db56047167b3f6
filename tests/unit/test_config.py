"""Settings: environment variables, validation, and the round trip a child process uses."""

from __future__ import annotations

import pytest

from processor.broker import KAFKA_FETCH_WAIT_MS, TANSU_FETCH_WAIT_MS, ExternalBroker, TansuBroker
from processor.config import Settings
from processor.errors import ConfigurationError


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
