"""Assembly: the one place where concrete adapters (Kafka, RocksDB, gRPC) are built; the
log and the processor over it in :mod:`processor.app.backend`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processor.app.backend import (
    KafkaBackend,
    LogBackend,
    build_processor,
    kafka_backend,
    processor_over,
)
from processor.changelog.live import HandedRecord, LiveDone, LiveTarget, LiveUnit, PipeSink
from processor.config import Settings
from processor.engine.processor import Processor
from processor.errors import (
    ComponentFailedError,
    ConfigurationError,
    KafkaSecurityError,
    SowError,
    StartCancelledError,
)
from processor.expr.budget import set_budget_ms
from processor.log import LogWriter
from processor.log.broker import Broker
from processor.log.topics import topic_specs
from processor.messages.registry import unreachable as unreachable_registries
from processor.publish.gateway import Gateway
from processor.query.sow import QueryEngine
from processor.replica.plain_tail import PlainTail
from processor.replica.replica import Replica
from processor.requests.dead_letters import DeadLetters
from processor.requests.events import Events
from processor.requests.queries import Queries
from processor.state.opener import store_opener
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import QueueHub, queue_service_id
from processor.topology import Topology, refuse_unserved
from processor.topology.events import with_event_topics
from processor.worker import ProcessorChild, live_sink_from_env

if TYPE_CHECKING:
    from processor.http.api import HttpApi
    from processor.log.kafka.condition import ClusterWatch
    from processor.observability.metrics import Observer
    from processor.server.health import Health

__all__ = [
    "Application",
    "KafkaBackend",
    "LogBackend",
    "build_processor",
    "processor_over",
    "start",
    "store_opener",
    "topic_specs",
]

log = logging.getLogger(__name__)

#: The thread of the queues' consumers (QueueHub.run): deliveries and heartbeats.
QUEUES_THREAD = "sow-queues"


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
    #: Where the processor of this process hands its live units (None: nowhere).
    live: LiveRelay | PipeSink | None = None
    #: The Kafka cluster's condition for this application's topics (a query service on a
    #: Kafka cluster only; a single broker is not watched).
    cluster: ClusterWatch | None = None
    #: The event topics' publisher and the clients it knows (None: no query service).
    events: Events | None = None
    #: The console and HTTP API on the metrics endpoint (None: not served).
    http: HttpApi | None = None
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
        caught up with the changelogs, or the Kafka cluster is blocking (said before the
        processor's reasons, which then follow from it)."""
        failed = self.failure()
        if failed is not None:
            return str(failed)
        # A query service alone still answers from its replica while the cluster blocks:
        # only a process whose processor cannot progress is unready for it.
        runs_processor = self.processor is not None or self.processor_child is not None
        blocking = None if self.cluster is None or not runs_processor else self.cluster.blocking()
        if blocking is not None:
            return f"the Kafka cluster is blocking: {blocking}"
        away = unreachable_registries(self.topology) if runs_processor else []
        if away:
            return (
                f"the Schema Registry does not answer ({', '.join(away)}): the records "
                "whose schema is in no cache wait for it"
            )
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
        if self.cluster is not None:
            self.cluster.stop()
        if self.health is not None:
            self.health.stop()
        if self.observer is not None:
            self.observer.stop()
        if self.http is not None:
            self.http.history.stop()
        if self.events is not None:
            self.events.close()
        if self.security is not None:
            self.security.close()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=1).wait()
        if self.subscriptions is not None:
            self.subscriptions.close()
        if self.queues is not None:
            # Before the writer closes: the queues' thread writes heartbeats with it, and
            # one written after would end that thread with an error (sow serve exit 1).
            self.queues.stop()
            for thread in self.threads:
                if thread.name == QUEUES_THREAD:
                    thread.join(timeout=30)
        if self.log_writer is not None:
            self.log_writer.close()
        if self.replica is not None:
            self.replica.stop()
        if self.plain_tail is not None:
            self.plain_tail.stop()
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

    set_budget_ms(settings.regex_match_budget_ms)  # one per process (processor.expr.budget)
    if topology is None:
        from processor.topology.loader import load_topology

        topology = load_topology(settings.topology)
    refuse_unserved(topology)  # views, conflated topics, queues: refused, never NOT_FOUND
    if service and settings.event_topics:
        topology = with_event_topics(topology, settings.event_topic_prefix)
    check()
    if backend is None:
        settings, backend = kafka_backend(settings)
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
            restarts = settings.processor_restarts
            app.processor_child = ProcessorChild(settings, backend.bootstrap, exited, restarts)
        elif processor:
            app.processor = backend.processor(settings, topology)
            sink = _live_sink(settings, service, topology)
            if sink is not None:
                app.processor.attach_live(sink, units=settings.live_delivery)
                app.live = sink
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
                app._spawn(QUEUES_THREAD, app.queues.run)
            types = {name: t.message_type for name, t in topology.topics.items()}
            app.events = Events(
                gateway,
                app.replica.record_counts,
                types,
                settings.sow_stats_interval_s,
                publish=settings.event_topics,
            )
            target = _live_target(app.replica, app.queues)
            if isinstance(app.live, LiveRelay):
                app.live.target = target
            if app.processor_child is not None:
                app.processor_child.live = target
            app.health = Health(app.readiness)
            if isinstance(backend, KafkaBackend):
                specs = topic_specs(topology, settings.dead_letter_topic)
                app.cluster = backend.watch_cluster([spec.name for spec in specs])
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
                blocking=None if app.cluster is None else app.cluster.blocking,
                events=app.events,
            )
            if app.observer is not None and settings.console != "off":
                app.http = _console(app, engine, gateway)
                app.observer.mount(app.http)
            security.follow(app.subscriptions, app.queues)  # entitlements reloaded when changed
            app.health.start()
        if settings.metrics_address:
            if app.observer is None:
                app.observer = _observer(app, requests=False)
            child = app.processor_child
            if child is not None:  # its figures are served by the child: relay them
                app.observer.relay(child.metrics)  # the same slot whatever child runs
            app.observer.serve(settings.metrics_address)
    except BaseException:
        app.stop()
        raise
    return app


class LiveRelay:
    """What a processor in this process hands over (live units, a queue's leases), to
    the replica and queue hub once they exist (:func:`_live_target`)."""

    def __init__(self) -> None:
        self.target: LiveTarget | None = None

    def send(
        self,
        units: Sequence[LiveUnit],
        dones: Sequence[LiveDone],
        ended: bool = False,
        handed: Sequence[HandedRecord] = (),
    ) -> None:
        target = self.target
        if target is not None:
            target(units, dones, ended, handed)


def _live_target(replica: Replica, queues: QueueHub | None) -> LiveTarget:
    """Where what a processor hands over goes: its units to the replica, the records it
    handed over as they are (a queue's leases) to the queue hub."""

    def take(
        units: Sequence[LiveUnit],
        dones: Sequence[LiveDone],
        ended: bool,
        handed: Sequence[HandedRecord],
    ) -> None:
        if units or dones or ended:
            replica.apply_live(units, dones, ended)
        if handed and queues is not None:
            queues.handed(handed)

    return take


def _live_sink(
    settings: Settings, service: bool, topology: Topology
) -> LiveRelay | PipeSink | None:
    """Where this process's processor hands its live units (``SOW_LIVE_DELIVERY``) and a
    queue's leases (``SOW_QUEUE_HANDOVER``): the replica and queue hub beside it, or the
    parent ``sow serve``'s (:func:`live_sink_from_env`); None: nowhere, nothing to hand."""
    queues = any(topic.queue is not None for topic in topology.topics.values())
    if not settings.live_delivery and not (settings.queue_handover and queues):
        return None
    return LiveRelay() if service else live_sink_from_env()


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


def _console(app: Application, engine: QueryEngine, gateway: Gateway) -> HttpApi:
    """The console and HTTP API of ``app``'s query service (processor/http), behind the
    same authentication as its gRPC service."""
    from processor.http.api import HttpApi, Parts

    observer, security = app.observer, app.security
    assert observer is not None
    parts = Parts(
        Queries(engine, gateway),
        app.subscriptions,
        app.queues,
        app.events,
        DeadLetters(app.backend.changelog_reader, app.settings.dead_letter_topic),
        observer.exposition,
        app.readiness,
        app.backend.description,
    )
    contexts = None if security is None else security.contexts
    return HttpApi(parts, contexts, app.settings.console)


def _observer(app: Application, *, requests: bool) -> Observer:
    """The metrics endpoint of ``app``: its components' figures, read when scraped (and
    gRPC calls, counted by an interceptor, when it serves gRPC)."""
    from processor.observability.condition import ConditionCollector
    from processor.observability.metrics import ComponentCollector, Observer

    collector = ComponentCollector(
        lambda: app.processor,
        lambda: app.replica,
        lambda: app.subscriptions,
        broker=app.backend.description,
    )
    observer = Observer(app.readiness, collector, requests=requests)
    observer.registry.register(ConditionCollector(lambda: app.cluster))
    return observer
