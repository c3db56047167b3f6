"""Prometheus metrics and the HTTP health endpoints of one kafka-sow process.

:class:`Observer` serves, on one HTTP address:

* ``/metrics``: Prometheus text. Component figures (records applied, dead letters,
  replica lag, subscriptions...) are read from the components when scraped, so they
  cost nothing on the hot path; gRPC requests are counted and timed by a server
  interceptor (:class:`RequestMetrics`).
* ``/healthz``: 200 while the process runs (liveness).
* ``/readyz``: 200 when the readiness check passes, else 503 with the reason (the same
  check the grpc.health.v1 service reports).

A process relays the figures of its processor child (``sow serve``), which serves its
own endpoint on a loopback port (:meth:`Observer.relay`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from processor import errors
from processor.expr.budget import overruns
from processor.queues.topic import QueueTopic

if TYPE_CHECKING:
    from processor.engine.processor import Processor
    from processor.replica.replica import Replica
    from processor.subscriptions.hub import SubscriptionHub

log = logging.getLogger(__name__)

#: Counted in every process (the processor child's too): a relayed count is added to this
#: process's own rather than dropped (:meth:`Observer.exposition`).
REGEX_OVERRUNS = "sow_regex_budget_exceeded"

#: A handler of other paths of the metrics endpoint: (request, method) -> served.
Mounted = Callable[[BaseHTTPRequestHandler, str], bool]

#: Latency buckets for gRPC calls, in seconds (0.5 ms to 30 s).
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)


class ComponentCollector(Collector):
    """Reads the components' own counters when Prometheus scrapes."""

    def __init__(
        self,
        processor: Callable[[], Processor | None],
        replica: Callable[[], Replica | None],
        hub: Callable[[], SubscriptionHub | None],
        broker: str = "",
    ) -> None:
        """``broker``: the broker's one-line description (which kind, version, where)."""
        self._processor = processor
        self._replica = replica
        self._hub = hub
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        regex = CounterMetricFamily(
            REGEX_OVERRUNS,
            "Regular-expression matches stopped at their budget (SOW_REGEX_MATCH_BUDGET_MS) "
            "that made a filter not match, or REGEXP_REPLACE NULL, by where",
            labels=["where"],
        )
        for where, count in overruns().items():
            regex.add_metric([where], count)
        yield regex
        if self._broker:
            info = GaugeMetricFamily(
                "sow_broker_info", "The broker this process uses", labels=["broker"]
            )
            info.add_metric([self._broker], 1)
            yield info
        processor = self._processor()
        if processor is not None:
            yield _counter("sow_processor_records", "Input records applied", processor.applied)
            yield _counter(
                "sow_processor_transactions", "Transactions committed", processor.transactions
            )
            yield _counter(
                "sow_dead_letters", "Records sent to the dead-letter topic", processor.dead_lettered
            )
            yield _counter("sow_expirations", "Records expired", processor.expired)
            live = processor.live
            if live is not None:
                yield _counter(
                    "sow_processor_live_records",
                    "Changes handed to the query service beside the processor before their commit",
                    live.records,
                )
                kept = CounterMetricFamily(
                    "sow_processor_live_kept",
                    "Partition batches of live topics left to their commit, by why",
                    labels=["reason"],
                )
                for reason, count in sorted(live.kept.items()):
                    kept.add_metric([reason], count)
                yield kept
            yield _counter(
                "sow_duplicate_publishes", "Publishes discarded as duplicates", processor.duplicates
            )
            yield _gauge(
                "sow_processor_ready", "1 once joined and restored", processor.ready.is_set()
            )
            yield _gauge(
                "sow_processor_stalled",
                "1 while the watchdog finds the processor stuck",
                processor.stalled is not None,
            )
            yield _counter(
                "sow_processor_stalls",
                "Times the watchdog found the processor stuck",
                processor.stalls,
            )
            yield _by_topic(
                "sow_processor_input_lag",
                "Committed input records the processor has not applied yet",
                processor.input_lag(),
            )
            yield _gauge(
                "sow_processor_recovering_partitions",
                "Store partitions still replaying their changelog",
                processor.recovering,
            )
            yield _counter(
                "sow_processor_restored_records",
                "Changelog records replayed to recover store partitions",
                processor.restored_records,
            )
            yield _counter(
                "sow_standby_records",
                "Changelog records written into standby stores",
                processor.standby_records,
            )
            yield from _queue_metrics(processor)
        replica = self._replica()
        if replica is not None:
            yield _counter(
                "sow_replica_changes", "Changelog records the read replica applied", replica.applied
            )
            yield _gauge(
                "sow_replica_staleness_seconds",
                "How far the read replica is behind the changelogs' last fetched records",
                replica.staleness_ms() / 1000,
            )
            yield _gauge("sow_replica_caught_up", "1 once caught up", replica.caught_up())
            units = CounterMetricFamily(
                "sow_replica_live_units",
                "Units of changes the processor beside the replica handed over before their "
                "commit: applied, or dropped (the changelog brought them first)",
                labels=["outcome"],
            )
            units.add_metric(["applied"], replica.live.applied)
            units.add_metric(["dropped"], replica.live.dropped)
            yield units
            yield _counter(
                "sow_replica_live_repeats",
                "Changelog records dropped as handed over already by a processor that died "
                "before its commit (its successor committed them again)",
                replica.live.repeated,
            )
            changes = CounterMetricFamily(
                "sow_topic_changes",
                "Publishes and deletes the read replica applied, per SOW topic",
                labels=["topic", "kind"],
            )
            for topic, (publishes, deletes) in replica.changes_by_topic.items():
                changes.add_metric([topic, "publish"], publishes)
                changes.add_metric([topic, "delete"], deletes)
            yield changes
            records = GaugeMetricFamily("sow_records", "Records in the SOW", labels=["topic"])
            for topic, count in replica.record_counts().items():
                records.add_metric([topic], count)
            yield records
            yield _by_topic(
                "sow_replica_changelog_lag",
                "Changelog records committed that the read replica has not applied yet",
                replica.changelog_lag(),
            )
        hub = self._hub()
        if hub is not None:
            yield _gauge("sow_subscriptions", "Live subscriptions", len(hub))
            yield _counter(
                "sow_subscription_changes", "Changes the dispatcher offered", hub.dispatched
            )
            yield _counter(
                "sow_subscription_dispatch_cpu_seconds",
                "CPU the dispatcher used",
                hub.dispatch_cpu_s,
            )
            yield _gauge(
                "sow_subscription_backlog",
                "Messages waiting for subscribers, summed over subscriptions",
                hub.backlog(),
            )


#: Queue figures -> (metric, help, counter?) (:class:`~processor.queues.figures.QueueFigures`).
QUEUE_METRICS = {
    "messages": ("sow_queue_messages", "Messages a queue holds (its depth)", False),
    "leased": ("sow_queue_leased", "Messages leased and not yet acknowledged", False),
    "subscriptions": ("sow_queue_subscriptions", "Subscriptions to a queue", False),
    "delivered": ("sow_queue_delivered", "Leases and barrier deliveries made", True),
    "redelivered": ("sow_queue_redelivered", "Leases of messages leased before", True),
    "acked": ("sow_queue_acked", "Messages acknowledged (removed)", True),
    "returned": ("sow_queue_returned", "Leases returned (cancel, expiry, disconnect)", True),
    "expired": ("sow_queue_expired", "Messages expired to the dead-letter topic", True),
}


def _queue_metrics(processor: Processor) -> Iterator[Metric]:
    """The figures of the queue partitions this processor owns, per queue."""
    queues = {
        name: derived.figures()
        for name, derived in processor.derived.items()
        if isinstance(derived, QueueTopic)
    }
    if not queues:
        return
    for field_name, (name, text, counted) in QUEUE_METRICS.items():
        family: GaugeMetricFamily | CounterMetricFamily = (
            CounterMetricFamily(name, text, labels=["queue"])
            if counted
            else GaugeMetricFamily(name, text, labels=["queue"])
        )
        for queue, figures in queues.items():
            family.add_metric([queue], getattr(figures, field_name))
        yield family
    backlog = GaugeMetricFamily(
        "sow_queue_subscriber_backlog",
        "Unacknowledged leases per subscription",
        labels=["queue", "subscription"],
    )
    for queue, figures in queues.items():
        for subscription, held in figures.backlogs.items():
            backlog.add_metric([queue, subscription], held)
    yield backlog


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=float(value))


def _by_topic(name: str, text: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=["topic"])
    for topic, value in values.items():
        family.add_metric([topic], value)
    return family


class RefusalCollector(Collector):
    """Refused calls per reason (``sow_refused_calls_total``), read from the audit
    (:class:`processor.server.audit.Audit`) when scraped."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "sow_refused_calls",
            "gRPC calls refused: logons (UNAUTHENTICATED) and rights (PERMISSION_DENIED)",
            labels=["reason"],
        )
        for reason, count in sorted(self._counts().items()):
            family.add_metric([reason], count)
        yield family


class RequestMetrics(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Counts gRPC calls by method and status code, and times unary calls (streaming
    calls are timed until their handler returns the stream)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "sow_grpc_requests", "gRPC calls", ["method", "code"], registry=registry
        )
        self.latency = Histogram(
            "sow_grpc_request_seconds",
            "gRPC call time (unary calls)",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            if handler is not None:
                self.requests.labels(_method(details.method), "STARTED").inc()
            return handler
        method, inner = _method(details.method), handler.unary_unary

        def timed(request: Any, context: Any) -> Any:
            began = time.perf_counter()
            code = "OK"
            try:
                return inner(request, context)
            except BaseException:
                status = context.code()
                code = status.name if status is not None else "UNKNOWN"
                raise
            finally:
                self.requests.labels(method, code).inc()
                self.latency.labels(method).observe(time.perf_counter() - began)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _method(full: str) -> str:
    """``/kafka_sow.v1.Sow/Publish`` -> ``Sow/Publish``."""
    service, _, name = full.rpartition("/")
    return f"{service.rpartition('.')[2]}/{name}"


class Observer:
    """The registry, the request interceptor and the HTTP endpoint of one process."""

    def __init__(
        self, readiness: Callable[[], str | None], collector: Collector, *, requests: bool = True
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        #: The gRPC interceptor (None for a process that serves no gRPC).
        self.requests = RequestMetrics(self.registry) if requests else None
        self._readiness = readiness
        self._relayed: list[Callable[[], bytes]] = []
        #: Handlers of other paths (the console, :meth:`mount`), tried in turn.
        self._mounted: list[Mounted] = []
        self._server: ThreadingHTTPServer | None = None
        self.address = ""

    def relay(self, fetch: Callable[[], bytes]) -> None:
        """Append another process's metrics (Prometheus text; empty when it has none
        or does not answer) to every scrape: ``sow serve``'s processor child."""
        self._relayed.append(fetch)

    def mount(self, handler: Mounted) -> None:
        """Serve other paths too: ``handler(request, method)`` answers the request and
        returns True, or returns False for a path it does not serve (the console's HTTP
        transport, ``processor/http``)."""
        self._mounted.append(handler)

    def exposition(self) -> bytes:
        """What /metrics answers: this process's families, then the relayed ones this
        process does not export itself (one family per name, as Prometheus requires; a
        processor child's ``sow_broker_info`` would name the parent's broker as external)."""
        own = generate_latest(self.registry)
        names = {line.split()[2] for line in own.splitlines() if line.startswith(b"# HELP ")}
        relayed = [fetch() for fetch in self._relayed]
        own = _summed(own, relayed, REGEX_OVERRUNS.encode() + b"_total")
        return own + b"".join(_without_families(text, names) for text in relayed)

    def serve(self, address: str) -> str:
        """Serve HTTP on ``host:port`` (port 0: any free one); return the bound address."""
        host, _, port = address.rpartition(":")
        observer = self

        class Handler(BaseHTTPRequestHandler):
            def _mounted(self, method: str) -> bool:
                return any(handler(self, method) for handler in observer._mounted)

            def do_POST(self) -> None:
                if not self._mounted("POST"):
                    self._send(404, b"not found\n")

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/metrics", "/healthz", "/readyz") and self._mounted("GET"):
                    return
                if path == "/metrics":
                    self._send(200, observer.exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n")
                elif path == "/readyz":
                    reason = observer._readiness()
                    if reason is None:
                        self._send(200, b"ready\n")
                    else:
                        self._send(503, f"not ready: {reason}\n".encode())
                else:
                    self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

            def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Scrapes are not worth a log line each."""

        try:
            self._server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise errors.ConfigurationError(
                f"cannot serve metrics on {address}: {why}; "
                "pick another with --metrics-address or SOW_METRICS_ADDRESS"
            ) from None
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="sow-metrics", daemon=True).start()
        self.address = f"{host}:{self._server.server_address[1]}"
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _summed(own: bytes, relayed: list[bytes], name: bytes) -> bytes:
    """``own`` with the relayed samples of counter ``name`` added to its own samples of
    the same labels (both processes export every label)."""
    extra: dict[bytes, float] = {}
    for text in relayed:
        for line in text.splitlines():
            if line.startswith(name + b"{"):
                series, _, value = line.rpartition(b" ")
                extra[series] = extra.get(series, 0.0) + float(value)
    if not extra:
        return own
    lines = own.splitlines(keepends=True)
    for index, line in enumerate(lines):
        series, _, value = line.rstrip(b"\n").rpartition(b" ")
        if series in extra:
            lines[index] = series + b" " + repr(float(value) + extra[series]).encode() + b"\n"
    return b"".join(lines)


def _without_families(text: bytes, names: set[bytes]) -> bytes:
    """Prometheus text without the families named ``names`` (each family's HELP and TYPE
    lines come first, its samples right after them)."""
    kept: list[bytes] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        if line.startswith(b"# HELP "):
            dropping = line.split()[2] in names
        if not dropping:
            kept.append(line)
    return b"".join(kept)
