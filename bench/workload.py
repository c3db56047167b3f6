"""The ingest benchmark's workload: N small JSON orders over K keys, in a fresh topic.

Every engine in ``bench/ingest.py`` reads the same bytes: message ``i`` (0-based) is ::

    {"orderId": i % K, "symbol": "IBM", "price": 100.0 + (i % 50), "qty": (i % 7) + 1,
     "side": "buy"}

encoded with orjson, with the Kafka key ``str(i % K)`` as UTF-8 bytes. So the last value
per key is known in advance and every one of the K keys is written ``N / K`` times.

Importable (:func:`create_topic`, :func:`produce`, :func:`prepare`) and a CLI::

    python bench/workload.py --bootstrap 127.0.0.1:9092 --topic orders-1 \
        --messages 200000 --keys 10000 --partitions 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import orjson
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

DEFAULT_MESSAGES = 200_000
DEFAULT_KEYS = 10_000
DEFAULT_PARTITIONS = 2

# Explicit topic configs. Tansu answers DescribeConfigs only with configs set at creation,
# and quixstreams derives its changelog topic's config from the input topic's
# ``retention.ms`` (KeyError without it). Unlimited retention: nothing expires mid-run.
TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    """What :func:`prepare` put into the topic."""

    topic: str
    partitions: int
    messages: int
    keys: int
    bytes: int
    produce_seconds: float


def order(i: int, keys: int) -> dict[str, object]:
    """The ``i``-th order of the workload (pure: the same for every engine and run)."""
    return {
        "orderId": i % keys,
        "symbol": "IBM",
        "price": 100.0 + (i % 50),
        "qty": (i % 7) + 1,
        "side": "buy",
    }


def records(
    messages: int, keys: int, keying: str = "natural", partitions: int = DEFAULT_PARTITIONS
) -> Iterator[tuple[bytes, bytes, int]]:
    """Yield ``(key, value, partition)`` for the whole workload, in order.

    ``natural`` keys each record by ``str(orderId)`` (partition -1: the producer's default
    partitioner), as a plain Kafka application would. ``sowkey`` keys it by its kafka-sow
    SowKey (KeyDomain ``BENCH``, Key ``/orderId``) on the SowKey's partition, as every
    kafka-sow publisher (CLI, gRPC gateway, client) writes it. The values are identical.
    """
    sow_key = None
    if keying == "sowkey":
        from processor.keys import FieldKeyGenerator, partition_for

        generator = FieldKeyGenerator("BENCH", ("/orderId",))

        def sow_key(order_id: int) -> tuple[bytes, int]:
            raw = generator({"orderId": order_id}).encode()
            return raw, partition_for(raw, partitions)

    elif keying != "natural":
        raise ValueError(f"keying is natural or sowkey, got {keying!r}")
    for i in range(messages):
        value = orjson.dumps(order(i, keys))
        if sow_key is None:
            yield str(i % keys).encode(), value, -1
        else:
            key, partition = sow_key(i % keys)
            yield key, value, partition


def create_topic(
    bootstrap: str, topic: str, partitions: int = DEFAULT_PARTITIONS, timeout_s: float = 30.0
) -> None:
    """Create ``topic`` (replication factor 1, :data:`TOPIC_CONFIG`); raise ``RuntimeError``
    if it already exists.

    A fresh topic per run keeps engines from reading each other's data.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=TOPIC_CONFIG)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        raise RuntimeError(f"cannot create topic {topic!r} on {bootstrap}: {exc}") from exc
    # Wait until the metadata shows every partition (the broker may lag the response).
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic=topic, timeout=5.0)
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic!r} did not show {partitions} partitions in {timeout_s}s")


def produce_items(
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[bytes | None, bytes | None, int]],
    expected: int,
    idempotent: bool = False,
) -> int:
    """Produce (key, value, partition) items in order, batched aggressively (linger,
    large batches, acks=all; ``idempotent`` keeps each key's order through retries);
    fail if any delivery fails; return the payload bytes written."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": "all",
            "enable.idempotence": idempotent,
            "log_level": 3,
        }
    )
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(str(err))
        else:
            delivered += 1

    total = 0
    for key, value, partition in items:
        total += len(value or b"")
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120.0)
    if remaining or errors or delivered != expected:
        first = errors[0] if errors else "none"
        raise RuntimeError(
            f"producing to {topic!r}: delivered {delivered}/{expected}, "
            f"{len(errors)} errors (first: {first}), {remaining} still queued"
        )
    return total


def produce(
    bootstrap: str,
    topic: str,
    messages: int,
    keys: int,
    keying: str = "natural",
    partitions: int = DEFAULT_PARTITIONS,
) -> int:
    """Produce the workload into ``topic``; return the payload bytes written
    (:func:`produce_items`). Partitioning is librdkafka's default (murmur2-compatible
    ``consistent_random``) on the key."""
    items = records(messages, keys, keying, partitions)
    return produce_items(bootstrap, topic, items, messages)


def prepare(
    bootstrap: str,
    topic: str,
    messages: int = DEFAULT_MESSAGES,
    keys: int = DEFAULT_KEYS,
    partitions: int = DEFAULT_PARTITIONS,
    keying: str = "natural",
) -> WorkloadReport:
    """Create ``topic`` and produce the workload into it (see :func:`records` for keying)."""
    if messages < 1 or keys < 1 or partitions < 1:
        raise ValueError("messages, keys and partitions must all be >= 1")
    create_topic(bootstrap, topic, partitions)
    started = time.perf_counter()
    size = produce(bootstrap, topic, messages, keys, keying, partitions)
    return WorkloadReport(
        topic=topic,
        partitions=partitions,
        messages=messages,
        keys=min(keys, messages),
        bytes=size,
        produce_seconds=round(time.perf_counter() - started, 3),
    )


def main(argv: list[str] | None = None) -> int:
    """CLI: create the topic, produce the workload, print a JSON report to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="host:port of the broker")
    parser.add_argument("--topic", required=True, help="a topic name that does not exist yet")
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    args = parser.parse_args(argv)
    try:
        report = prepare(args.bootstrap, args.topic, args.messages, args.keys, args.partitions)
    except (RuntimeError, ValueError) as exc:
        print(f"workload: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
