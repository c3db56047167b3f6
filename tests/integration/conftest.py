"""Fixtures several integration modules share (a session-scoped fixture is shared only
when a conftest provides it): the secured embedded Kafka of tests/integration/secured_kafka.py,
started only by the tests that ask for it."""

from __future__ import annotations

from tests.integration.secured_kafka import secured_kafka

__all__ = ["secured_kafka"]
