"""How many brokers a Kafka cluster has, asked once with a short timeout (``sow
check-config`` resolves the replication ``sow serve`` would use from it)."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from processor.errors import BrokerError
from processor.log.kafka.settings import client_settings


def broker_count(bootstrap: str, timeout_s: float = 3.0) -> int:
    """The number of brokers the cluster at ``bootstrap`` has: those it lists alive and
    those holding replicas (a member that is down still counts) (with the
    deployment's client properties); BrokerError when it does not answer within
    ``timeout_s`` or the client cannot be made."""
    try:
        # log_level 0: an unreachable broker is said once, by the caller, not by librdkafka
        admin = AdminClient({**client_settings(bootstrap), "log_level": 0})
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        said = error.str() if hasattr(error, "str") else str(error)
        raise BrokerError(f"no answer within {timeout_s:g}s: {said}") from exc
    members = set(metadata.brokers)  # and a member that is down holds replicas still
    for topic in metadata.topics.values():
        for partition in topic.partitions.values():
            members.update(partition.replicas)
    return len(members)
