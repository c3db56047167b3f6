"""Assembly: the one place where concrete adapters (Kafka, RocksDB, gRPC) are built."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from processor.config import Settings, static_transactional_id
from processor.engine.commit import CrashHook, crash_hook_from_env
from processor.engine.processor import Processor
from processor.errors import (
    ComponentFailedError,
    ConfigurationError,
    KafkaSecurityError,
    SowError,
    StartCancelledError,
)
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
from processor.log.kafka.input import KafkaEndOffsets, KafkaInputLog
from processor.log.kafka.ownership import FENCED_STATIC, refuse_beside_members
from processor.log.kafka.ranges import KafkaRangeReader
from processor.log.kafka.readers import KafkaChangelogTail, KafkaPartitionReader
from processor.log.kafka.settings import ensure_topics, use_client_properties
from processor.log.kafka.transactional import KafkaTransactionalLog
from processor.log.kafka.writer import KafkaLogWriter
from processor.log.topics import topic_specs
from processor.publish.gateway import Gateway
from processor.query.sow import QueryEngine
from processor.replica.plain_tail import PlainTail
from processor.replica.replica import Replica
from processor.state.opener import store_opener
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import QueueHub, queue_service_id
from processor.topology import Topology, refuse_unserved
from processor.topology.queue_topics import processor_topology
from processor.wiring import derived_wiring
from processor.worker import ProcessorChild

if TYPE_CHECKING:
    from processor.observability.metrics import Observer
    from processor.server.health import Health

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

    def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        ensure_topics(self.bootstrap, specs)

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


@dataclass
class Application:
    """A running kafka-sow process: any of processor, read replica and gRPC service."""

    settings: Settings
    backend: LogBackend
    topology: Topology
    processor: Processor | None = None
    replica: Replica | None = None
    #: Follows the plain topics (None when the topology has none or no service runs).
    plain_tail: PlainTail | None = None
    subscriptions: SubscriptionHub | None = None
    grpc_server: Any = None
    #: The grpc.health.v1 service (None when this application serves no gRPC).
    health: Health | None = None
    #: /metrics, /healthz and /readyz (None unless ``settings.metrics_address``).
    observer: Observer | None = None
    grpc_address: str = ""
    log_writer: LogWriter | None = None
    #: The queues' consumers (a topology with queues and a query service only).
    queues: QueueHub | None = None
    #: gRPC TLS, logon and entitlements (processor.server.auth.ServerSecurity).
    security: Any = None
    processor_child: ProcessorChild | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    #: Component threads that stopped on their own, first first (see :meth:`failure`).
    failures: list[ComponentFailedError] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def broker(self) -> Broker:
        """The Kafka-protocol broker this application runs on (not on the memory log)."""
        if not isinstance(self.backend, KafkaBackend) or self.backend.broker is None:
            raise ConfigurationError("this application runs on no broker of its own")
        return self.backend.broker

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # the thread ends here: record why, for the app to act
                quiet = isinstance(exc, KafkaSecurityError)  # its one line says it all
                log.error("%s stopped with an error: %s", name, exc, exc_info=not quiet)
                self.errors.append(exc)
                self.failures.append(ComponentFailedError(f"{name} thread", exc))
                return
            if not self.stopping.is_set():
                # A component returns only when asked to stop; anything else is a bug
                # that would leave the process serving without it.
                error = SowError("it returned without being asked to stop")
                log.error("%s stopped unexpectedly", name)
                self.errors.append(error)
                self.failures.append(ComponentFailedError(f"{name} thread", error))

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    @property
    def processor_ready(self) -> threading.Event | None:
        """Set once the processor (thread or child) has joined and restored; None when
        this application runs no processor."""
        if self.processor is not None:
            return self.processor.ready
        if self.processor_child is not None:
            return self.processor_child.ready
        return None

    @property
    def processor_stalled(self) -> str | None:
        """What is stuck while the processor (thread or child) is stuck, else None."""
        if self.processor is not None:
            return self.processor.stalled
        if self.processor_child is not None:
            return self.processor_child.stalled
        return None

    def failure(self) -> ComponentFailedError | None:
        """The first component thread (processor, replica) that stopped on its own, or
        None while every one runs. Thread-safe; a process must not go on serving after a
        failure (``sow serve`` stops and exits non-zero)."""
        return self.failures[0] if self.failures else None

    def wait(self, stop: threading.Event, poll_s: float = 0.2) -> ComponentFailedError | None:
        """Block until ``stop`` is set (return None) or a component fails (return it)."""
        while not stop.wait(poll_s):
            failed = self.failure()
            if failed is not None:
                return failed
        return None

    def readiness(self) -> str | None:
        """None when this application is ready to serve, else why not: a component
        failed, the processor has not joined and restored, or the read replica has not
        caught up with the changelogs."""
        failed = self.failure()
        if failed is not None:
            return str(failed)
        ready = self.processor_ready
        if ready is not None and not ready.is_set():
            return "the processor has not joined its group and restored its stores yet"
        stalled = self.processor_stalled
        if stalled is not None:
            return f"the processor is stuck: {stalled}"
        if self.replica is not None and not self.replica.caught_up():
            return f"the read replica is catching up: {self.replica.catch_up_status()}"
        return None

    def stop(self) -> None:
        """Stop everything this application started, in reverse order; first of all, end
        every wait on the read replica (requests waiting for a position or a delete's
        effect end at once, UNAVAILABLE, instead of at their deadline)."""
        self.stopping.set()
        if self.replica is not None:
            self.replica.stop()
        if self.health is not None:
            self.health.stop()
        if self.observer is not None:
            self.observer.stop()
        if self.security is not None:
            self.security.close()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=1).wait()
        if self.subscriptions is not None:
            self.subscriptions.close()
        if self.log_writer is not None:
            self.log_writer.close()
        if self.replica is not None:
            self.replica.stop()
        if self.plain_tail is not None:
            self.plain_tail.stop()
        if self.queues is not None:
            self.queues.stop()
        if self.processor is not None:
            self.processor.stop()
        if self.processor_child is not None:
            self.processor_child.stop()
        for thread in self.threads:
            thread.join(timeout=30)
        self.backend.stop()


def start(
    settings: Settings,
    *,
    topology: Topology | None = None,
    processor: bool = True,
    service: bool = True,
    processor_process: bool = False,
    cancelled: threading.Event | None = None,
    backend: LogBackend | None = None,
) -> Application:
    """Start the broker (or use the configured one), create topics, and start components.

    The topology is loaded from ``settings.topology`` unless given. ``processor_process``:
    the processor runs as a child process (``sow process``) with its own interpreter lock,
    not slowing publishes and queries down (``sow serve``). ``cancelled`` set during
    start-up stops what was started and raises StartCancelledError. ``backend``: the log
    to run on (None: the configured Kafka broker, else an embedded one, started here)."""

    def check() -> None:
        if cancelled is not None and cancelled.is_set():
            raise StartCancelledError("stopped while starting")

    if topology is None:
        from processor.topology.loader import load_topology

        topology = load_topology(settings.topology)
    refuse_unserved(topology)  # views, conflated topics, queues: refused, never NOT_FOUND
    check()
    if backend is None:
        settings, backend = _kafka_backend(settings)
    elif processor_process:
        raise ConfigurationError("a processor child process needs a Kafka broker")
    app = Application(settings, backend, topology)
    processor = processor and bool(topology.topics)  # plain topics only: nothing to process
    try:
        check()
        backend.ensure_topics(topic_specs(topology, settings.dead_letter_topic))
        check()
        if processor and processor_process:

            def exited(code: int) -> None:
                error = SowError(f"it exited with code {code} (see its log above)")
                app.errors.append(error)
                app.failures.append(ComponentFailedError("processor (child process)", error))

            assert isinstance(backend, KafkaBackend)
            app.processor_child = ProcessorChild(settings, backend.bootstrap, exited)
        elif processor:
            app.processor = backend.processor(settings, topology)
            app._spawn("sow-processor", app.processor.run)
        check()
        if service:
            from processor.server.auth import server_security
            from processor.server.health import Health
            from processor.server.service import start_server

            app.replica = Replica(
                topology,
                backend.changelog_tail,
                snapshot_dir=settings.state_dir / "replica",
                reader=backend.changelog_reader,
            )
            app.replica.start_catching_up()
            ready = app.processor_ready
            if ready is not None:
                # Until its own processor has restored the changelogs (and re-published a
                # lost log), what they hold may be part of the SOW: no query is answered
                # from it (issue 18: never an incomplete SOW).
                app.replica.hold_catch_up()
                threading.Thread(
                    target=_release_when_set(ready, app.replica, app),
                    name="sow-replica-gate",
                    daemon=True,
                ).start()
            app._spawn("sow-replica", app.replica.run)
            app.log_writer = backend.log_writer()
            gateway = Gateway(topology, app.log_writer, app.replica)
            engine = QueryEngine(topology, app.replica)
            if topology.plain_topics:
                app.plain_tail = PlainTail(topology, backend.changelog_tail)
                app._spawn("sow-plain-tail", app.plain_tail.run)
            app.subscriptions = SubscriptionHub(topology, app.replica, engine, plain=app.plain_tail)
            if any(topic.queue is not None for topic in topology.topics.values()):
                app.queues = QueueHub(
                    topology,
                    backend.changelog_tail,
                    app.log_writer,
                    service_id=queue_service_id(settings.state_dir),
                )
                app._spawn("sow-queues", app.queues.run)
            app.health = Health(app.readiness)
            if settings.metrics_address:
                app.observer = _observer(app, requests=True)
            interceptors = [] if app.observer is None else [app.observer.requests]
            security = app.security = server_security(settings, app.observer, topology)
            app.grpc_server, app.grpc_address = start_server(
                engine,
                gateway,
                settings.grpc_address,
                app.subscriptions,
                app.health,
                interceptors,
                queues=app.queues,
                contexts=security.contexts,
                credentials=security.credentials,
            )
            security.follow(app.subscriptions, app.queues)  # entitlements reloaded when changed
            app.health.start()
        if settings.metrics_address:
            if app.observer is None:
                app.observer = _observer(app, requests=False)
            child = app.processor_child
            if child is not None:  # its figures are served by the child: relay them
                app.observer.relay(child.metrics)
            app.observer.serve(settings.metrics_address)
    except BaseException:
        app.stop()
        raise
    return app


def _kafka_backend(settings: Settings) -> tuple[Settings, KafkaBackend]:
    """The configured broker (or an embedded one, started), and the settings completed
    with what it implies (fetch wait, group protocol, assignment, whether its log is
    ephemeral)."""
    use_client_properties(settings.client_properties)
    broker = start_broker(
        settings.bootstrap_servers,
        state_dir=settings.state_dir,
        embedded=settings.embedded_broker,
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


def _release_when_set(
    ready: threading.Event, replica: Replica, app: Application
) -> Callable[[], None]:
    """The gate thread's body: release the replica's catch-up once ``ready`` is set."""

    def run() -> None:
        while not ready.wait(0.1):
            if app.stopping.is_set():
                return
        replica.release_catch_up()

    return run


def _observer(app: Application, *, requests: bool) -> Observer:
    """The metrics endpoint of ``app``: its components' figures, read when scraped (and
    gRPC calls, counted by an interceptor, when it serves gRPC)."""
    from processor.observability.metrics import ComponentCollector, Observer

    collector = ComponentCollector(
        lambda: app.processor,
        lambda: app.replica,
        lambda: app.subscriptions,
        broker=app.backend.description,
    )
    return Observer(app.readiness, collector, requests=requests)
