"""Choosing and running the Kafka-protocol broker.

The order is fixed (ARCHITECTURE.md): an explicit bootstrap address
(``KAFKA_BOOTSTRAP_SERVERS`` or ``--bootstrap-servers``) wins; otherwise the embedded
Apache Kafka (:mod:`processor.log.broker.embedded_kafka`) when Java 17+ is installed (its jars
are fetched with Maven the first time); otherwise the embedded Tansu broker
(:mod:`processor.log.broker.tansu`), memory only, which says at start-up which limits apply.
``SOW_EMBEDDED_BROKER`` (``auto``, ``kafka`` or ``tansu``) pins the embedded kind, and
``SOW_EMBEDDED_BROKERS`` > 1 starts the embedded Apache Kafka as a replicated cluster
(:mod:`processor.log.broker.cluster`): never Tansu, which runs one node.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from processor.config import EMBEDDED_BROKERS
from processor.errors import BrokerError, ConfigurationError
from processor.log.broker.cluster import EmbeddedKafkaCluster
from processor.log.broker.common import (
    BOOTSTRAP_ENV,
    KAFKA_FETCH_WAIT_MS,
    Broker,
    ExternalBroker,
    free_loopback_port,
    wait_until_answers,
)
from processor.log.broker.embedded_kafka import EmbeddedKafka
from processor.log.broker.tansu import LIMITS, TANSU_FETCH_WAIT_MS, TansuBroker

__all__ = [
    "BOOTSTRAP_ENV",
    "EMBEDDED_BROKERS",
    "EMBEDDED_ENV",
    "KAFKA_FETCH_WAIT_MS",
    "TANSU_FETCH_WAIT_MS",
    "Broker",
    "EmbeddedKafka",
    "EmbeddedKafkaCluster",
    "ExternalBroker",
    "TansuBroker",
    "free_loopback_port",
    "start_broker",
    "wait_until_answers",
]

log = logging.getLogger(__name__)

EMBEDDED_ENV = "SOW_EMBEDDED_BROKER"


def start_broker(
    bootstrap_servers: str | None = None,
    *,
    state_dir: Path | None = None,
    embedded: str | None = None,
    kafka_overrides: Mapping[str, str] | None = None,
    nodes: int = 1,
) -> Broker:
    """Return a usable broker, chosen in the documented order.

    ``bootstrap_servers`` (else ``$KAFKA_BOOTSTRAP_SERVERS``) selects an external broker.
    Otherwise an embedded broker starts: ``embedded`` (else ``$SOW_EMBEDDED_BROKER``, else
    ``auto``) says which. The embedded Apache Kafka keeps its log in ``state_dir/kafka``
    (a temporary folder, removed at stop, when ``state_dir`` is None);
    ``kafka_overrides`` are extra broker properties (tests shorten timers with them).
    ``nodes`` > 1: the embedded Apache Kafka runs as a cluster of that many members.
    """
    explicit = bootstrap_servers or os.environ.get(BOOTSTRAP_ENV, "").strip()
    if explicit:
        return ExternalBroker(explicit)
    kind = (embedded or os.environ.get(EMBEDDED_ENV, "") or "auto").strip().lower()
    if kind not in EMBEDDED_BROKERS:
        raise ConfigurationError(
            f"embedded_broker ({EMBEDDED_ENV}) must be one of {', '.join(EMBEDDED_BROKERS)}, "
            f"got {kind!r}"
        )
    directory = None if state_dir is None else state_dir / "kafka"
    if nodes > 1:
        if kind == "tansu":
            raise ConfigurationError(
                f"the embedded Tansu broker runs one node: {nodes} embedded brokers need the "
                f"embedded Apache Kafka ({EMBEDDED_ENV}=kafka or auto, with Java 17+)"
            )
        # No fallback: one broker where a replicated cluster was asked for would be a
        # weaker guarantee than the user chose.
        return EmbeddedKafkaCluster(directory, nodes=nodes, overrides=kafka_overrides).start()
    if kind == "tansu":
        broker = TansuBroker().start()
        log.info("the embedded Tansu broker runs: %s", LIMITS)
        return broker
    try:
        return EmbeddedKafka(directory, overrides=kafka_overrides).start()
    except BrokerError as exc:
        if kind == "kafka":
            raise
        log.warning("%s; falling back to the embedded Tansu broker: %s", exc, LIMITS)
    return TansuBroker().start()
