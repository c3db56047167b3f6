"""kafka-sow's own processor under the ingest benchmark contract (see _contract.py).

The input topic holds the workload's orders; the SOW topic ``BENCH`` is keyed by
``/orderId``. Input keyed by SowKey (what kafka-sow publishers write) is applied
directly; input keyed otherwise is re-keyed through the repartition topic first, and a
message counts as processed only once it is applied to state. Every record goes through
the real path: decode (orjson), SowKey generation, Avro changelog envelope, changelog
produce, Kafka transaction with the consumer offsets, RocksDB write batch. Always
exactly-once. With ``BENCH_UPSERT_TOPIC=1`` in the environment the SOW topic has its
upsert-table view (docs/upsert-tables.md): one more record per change, in the same
transaction.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import _contract as contract
from confluent_kafka.admin import AdminClient

import processor
from processor.app import build_processor, topic_specs
from processor.config import Settings
from processor.log.kafka.settings import ensure_topics
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import SowTopic, Topology
from processor.topology.upserts import UpsertSpec

ENGINE = "kafka-sow"


def main() -> int:
    args = contract.parse_args(__doc__ or ENGINE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    contract.start_watchdog(
        args.timeout,
        lambda: contract.failure(
            engine=ENGINE,
            version=processor.__version__,
            args=args,
            guarantee="exactly-once",
            error=f"timed out after {args.timeout:.0f}s",
        ),
    )
    metadata = AdminClient({"bootstrap.servers": args.bootstrap}).list_topics(
        args.topic, timeout=10
    )
    partitions = len(metadata.topics[args.topic].partitions)
    upsert = UpsertSpec() if os.environ.get("BENCH_UPSERT_TOPIC") == "1" else None
    topic = SowTopic(
        "BENCH", keys=("/orderId",), kafka_topic=args.topic, partitions=partitions, upsert=upsert
    )
    topology = Topology({"BENCH": topic})
    state_dir = Path(args.state_dir or tempfile.mkdtemp())
    settings = Settings.from_env(state_dir=state_dir, group_id=args.group, instance_id="bench")
    ensure_topics(args.bootstrap, topic_specs(topology, settings.dead_letter_topic))
    engine = build_processor(settings, args.bootstrap, topology)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    contract.log(ENGINE, f"processing {args.messages:,} messages from {args.topic}")
    while engine.applied < args.messages:
        if not thread.is_alive():
            contract.emit(
                contract.failure(
                    engine=ENGINE,
                    version=processor.__version__,
                    args=args,
                    guarantee="exactly-once",
                    error="the processor stopped early",
                )
            )
            return contract.EXIT_FAILED
        time.sleep(0.005)
    finished = time.perf_counter()
    assert engine.first_batch_at is not None
    seconds = finished - engine.first_batch_at
    processed = engine.applied
    repartitioned = engine.records - engine.applied
    engine.stop()
    thread.join(30)
    keys_in_state = 0
    for partition in range(partitions):
        store = RocksDBStore(state_dir / "BENCH" / str(partition))
        keys_in_state += store.count()
        store.close()
    contract.emit(
        contract.success(
            engine=ENGINE,
            version=processor.__version__,
            args=args,
            messages=processed,
            seconds=seconds,
            guarantee="exactly-once",
            notes=(
                "confluent-kafka + rocksdict + orjson; Avro envelope changelog; one Kafka "
                f"transaction per batch of up to {settings.max_batch} records; "
                f"{repartitioned} records re-keyed through the repartition topic"
                + (f"; upsert topic {topic.upsert_topic}" if upsert else "")
            ),
            keys_in_state=keys_in_state,
            transactions=engine.transactions,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
