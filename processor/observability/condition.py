"""The Kafka cluster's condition as metrics (:mod:`processor.log.kafka.condition`): brokers
answering, whether it is blocking or degraded, the time spent in each, and the condition in
words (``sow status`` prints it). Nothing is exported while the cluster is not watched (a
single broker, the memory log, a process without a query service)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from processor.log.kafka.condition import BLOCKING, DEGRADED, ClusterWatch


class ConditionCollector(Collector):
    """Reads the cluster watch when Prometheus scrapes."""

    def __init__(self, watch: Callable[[], ClusterWatch | None]) -> None:
        self._watch = watch

    def collect(self) -> Iterator[Metric]:
        watch = self._watch()
        if watch is None or not watch.active:
            return
        condition = watch.condition
        yield GaugeMetricFamily(
            "sow_brokers_answering",
            "Brokers the Kafka cluster lists alive, at the last answer (0: none answers)",
            value=condition.answering,
        )
        yield GaugeMetricFamily(
            "sow_broker_blocking",
            "1 while the Kafka cluster blocks progress (a partition without a leader or "
            "short of min.insync.replicas, or no broker answers)",
            value=float(condition.state == BLOCKING),
        )
        yield GaugeMetricFamily(
            "sow_broker_degraded",
            "1 while the Kafka cluster is degraded but progressing (a broker down, "
            "replicas catching up)",
            value=float(condition.state == DEGRADED),
        )
        yield CounterMetricFamily(
            "sow_broker_blocking_seconds",
            "Seconds the Kafka cluster has been blocking",
            value=watch.seconds(BLOCKING),
        )
        yield CounterMetricFamily(
            "sow_broker_degraded_seconds",
            "Seconds the Kafka cluster has been degraded",
            value=watch.seconds(DEGRADED),
        )
        info = GaugeMetricFamily(
            "sow_broker_condition",
            "1, labelled with the Kafka cluster's condition: healthy, degraded or blocking, "
            "and why",
            labels=["state", "condition"],
        )
        info.add_metric([condition.state, condition.text], 1)
        yield info
