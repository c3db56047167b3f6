"""The log an application runs on, and the one place where its Kafka adapters are built:
:class:`KafkaBackend` (Apache Kafka or Tansu, and RocksDB stores) and the processor over
any log's connections."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from processor.config import Settings, static_transactional_id
from processor.engine.commit import CrashHook, crash_hook_from_env
from processor.engine.processor import Processor
from processor.log import (
    ChangelogReader,
    ChangelogTail,
    LogWriter,
    ProcessorConnections,
    TopicSpec,
    expect_new_logs,
)
from processor.log.broker import Broker, start_broker
from processor.log.broker.common import CLASSIC_GROUP_PROTOCOL
from processor.log.kafka.acls import written_topics
from processor.log.kafka.condition import ClusterWatch
from processor.log.kafka.input import KafkaEndOffsets, KafkaInputLog
from processor.log.kafka.ownership import FENCED_STATIC, refuse_beside_members
from processor.log.kafka.ranges import KafkaRangeReader
from processor.log.kafka.readers import KafkaChangelogTail, KafkaPartitionReader
from processor.log.kafka.settings import ensure_topics, use_client_properties
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.log.kafka.writer import KafkaLogWriter
from processor.log.replication import Replication
from processor.state.opener import store_opener
from processor.topology import Topology
from processor.topology.queue_topics import processor_topology
from processor.wiring import derived_wiring

log = logging.getLogger(__name__)


class LogBackend(Protocol):
    """Where an application's log lives and how its clients are made: Apache Kafka (or
    Tansu) through :class:`KafkaBackend`, or the in-process memory log of
    :mod:`processor.testing`. Everything else is assembled the same way over either."""

    #: Said at start-up and in metrics: which log this is.
    description: str

    def ensure_topics(self, specs: Sequence[TopicSpec]) -> None: ...

    def processor(self, settings: Settings, topology: Topology) -> Processor:
        """A processor of ``topology`` over this log, per the settings."""
        ...

    def changelog_tail(self) -> ChangelogTail: ...

    def changelog_reader(self) -> ChangelogReader: ...

    def log_writer(self) -> LogWriter: ...

    def stop(self) -> None:
        """Release the log (an embedded broker this application started stops)."""
        ...


class KafkaBackend:
    """A Kafka-protocol broker at ``bootstrap`` (``broker``: the one this process
    started or found, stopped with the application; None: the caller's)."""

    def __init__(self, bootstrap: str, settings: Settings, broker: Broker | None = None) -> None:
        self.bootstrap = bootstrap
        self.broker = broker
        self.description = bootstrap if broker is None else broker.description
        self._fetch = _fetch_settings(settings)
        self._replication = Replication(settings.replication_factor, settings.min_insync_replicas)

    def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        ensure_topics(self.bootstrap, specs, replication=self._replication)

    def processor(self, settings: Settings, topology: Topology) -> Processor:
        """A processor wired to Kafka and RocksDB per the settings: a static group member
        under static membership, with standby stores when asked (group assignment
        only), on the settings' consumer-group protocol (None: classic; :func:`start`
        resolves it from the broker first)."""
        bootstrap, fetch = self.bootstrap, self._fetch
        static = settings.assignment == "static"
        if static:  # refused at start beside group members (checked again on joining)
            refuse_beside_members(bootstrap, settings.group_id)
        protocol = settings.group_protocol or CLASSIC_GROUP_PROTOCOL
        member = {}
        if settings.group_instance_id is not None and not static:
            member["group.instance.id"] = settings.group_instance_id
        writes = written_topics(topology, settings.dead_letter_topic)
        standby_tail = None
        if settings.standby == "all":
            if static:
                log.warning(
                    "standby=all is ignored with assignment=static: the one processor owns "
                    "every store partition, there is none to keep warm"
                )
            else:
                standby_tail = self.changelog_tail
        connections = ProcessorConnections(
            input_log=lambda: KafkaInputLog(
                bootstrap,
                settings.group_id,
                static=static,
                group_protocol=protocol,
                static_id=static_transactional_id(settings.group_id),
                **fetch,
                **member,
            ),
            transactional_log=lambda: KafkaTransactionalLog(
                bootstrap, settings.transactional_id, FENCED_STATIC if static else "", writes
            ),
            reader=lambda: KafkaPartitionReader(bootstrap),
            end_offsets=lambda: KafkaEndOffsets(bootstrap),
        )
        return processor_over(
            settings, topology, connections, crash_hook_from_env(), standby_tail=standby_tail
        )

    def changelog_tail(self) -> ChangelogTail:
        return KafkaChangelogTail(self.bootstrap, **self._fetch)

    def changelog_reader(self) -> ChangelogReader:
        return KafkaRangeReader(self.bootstrap)

    def log_writer(self) -> LogWriter:
        return KafkaLogWriter(self.bootstrap)

    def watch_cluster(self, topics: Sequence[str]) -> ClusterWatch:
        """The cluster's condition for ``topics``, asked once a second from now on (a
        single broker is not watched: :mod:`processor.log.kafka.condition`)."""
        return ClusterWatch(self.bootstrap, topics, self._replication).start()

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()


def processor_over(
    settings: Settings,
    topology: Topology,
    connections: ProcessorConnections,
    crash_hook: CrashHook | None,
    **options: Any,
) -> Processor:
    """A processor of ``topology`` over a log's ``connections``, with RocksDB stores under
    the settings' state directory, and the topology's views; ``options`` go to Processor."""
    topology = processor_topology(topology)
    options = {**derived_wiring(topology), **options}
    return Processor(
        topology,
        connections,
        store_opener(settings.state_dir),
        settings.dead_letter_topic,
        max_batch=settings.max_batch,
        crash_hook=crash_hook,
        pipelined=settings.pipelined_commits,
        **options,
    )


def build_processor(settings: Settings, bootstrap: str, topology: Topology) -> Processor:
    """A processor over the Kafka broker at ``bootstrap`` (:meth:`KafkaBackend.processor`)."""
    return KafkaBackend(bootstrap, settings).processor(settings, topology)


def _fetch_settings(settings: Settings) -> dict[str, Any]:
    """Consumer settings from ``settings.fetch_wait_ms`` (none: the log's defaults)."""
    if settings.fetch_wait_ms is None:
        return {}
    return {"fetch.wait.max.ms": settings.fetch_wait_ms}


def kafka_backend(settings: Settings) -> tuple[Settings, KafkaBackend]:
    """The configured broker (or an embedded one, started), and the settings completed
    with what it implies (fetch wait, group protocol, assignment, whether its log is
    ephemeral)."""
    use_client_properties(settings.client_properties)
    broker = start_broker(
        settings.bootstrap_servers,
        state_dir=settings.state_dir,
        embedded=settings.embedded_broker,
        nodes=settings.embedded_brokers,
    )
    if settings.fetch_wait_ms is None:
        settings = replace(settings, fetch_wait_ms=broker.fetch_wait_ms)
    if settings.group_protocol is None:
        settings = replace(settings, group_protocol=broker.group_protocol)
    if settings.assignment is None:
        settings = replace(settings, assignment=broker.assignment)
    if not broker.keeps_log:
        settings = replace(settings, ephemeral_log=True)
    if settings.ephemeral_log:
        expect_new_logs()
    return settings, KafkaBackend(broker.bootstrap_servers, settings, broker)
