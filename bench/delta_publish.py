"""delta_publish vs publish: records/s through the processor (decode, SowKey, merge,
envelope, changelog produce, Kafka transaction, RocksDB write batch).

Two fresh SOW topics on one broker (the embedded one, or
``KAFKA_BOOTSTRAP_SERVERS``). Each input topic is filled first with N records keyed by
their SowKey, as the gateway writes them; then a processor is started on it and timed from
its first batch until it has applied all N:

1. full: N whole messages (6 fields) cycling over K keys;
2. delta: the same N messages as deltas (header ``sow.delta: 1``) giving the Key field and
   2 of the 5 others, cycling over the same K keys: the first K insert (no stored record),
   the rest merge into the stored record (one state lookup, two JSON decodes, one merge,
   one encode per record more than a publish).

    python bench/delta_publish.py [--messages 200000] [--keys 10000] [--json-out FILE]

Progress goes to stderr, a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processor.app import build_processor, topic_specs
from processor.changelog.commands import DELTA_HEADER, DELTA_NATIVE
from processor.config import Settings
from processor.keys import key_function, partition_for
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology

PARTITIONS = 2


def say(text: str) -> None:
    sys.stderr.write(f"[delta-bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def full(i: int, keys: int) -> dict[str, Any]:
    return {
        "id": i % keys,
        "symbol": "IBM",
        "price": 100.0 + i % 50,
        "qty": i % 7 + 1,
        "desk": {"name": "d", "book": i % 3},
        "tags": ["a", "b"],
    }


def delta(i: int, keys: int) -> dict[str, Any]:
    return {"id": i % keys, "price": 100.0 + i % 50, "desk": {"book": i % 3}}


def fill(bootstrap: str, topic: SowTopic, count: int, keys: int, as_delta: bool) -> None:
    """Write the input records straight to Kafka, keyed and placed by their SowKey."""
    key_of = key_function(topic)
    assert key_of is not None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    headers = [(DELTA_HEADER, DELTA_NATIVE)] if as_delta else None
    make = delta if as_delta else full
    for i in range(count):
        message = make(i, keys)
        sow_key = key_of(message).encode()
        while True:
            try:
                producer.produce(
                    topic.kafka_topic,
                    orjson.dumps(message),
                    sow_key,
                    partition_for(sow_key, PARTITIONS),
                    headers=headers,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def run(bootstrap: str, name: str, count: int, keys: int, as_delta: bool) -> dict[str, Any]:
    """Fill one fresh topic, then time one processor applying it."""
    run_id = uuid.uuid4().hex[:8]
    topic = SowTopic(
        "BENCH", keys=("/id",), kafka_topic=f"delta-bench-{run_id}", partitions=PARTITIONS
    )
    topology = Topology({"BENCH": topic})
    state_dir = Path(tempfile.mkdtemp(prefix="delta-bench-"))
    settings = Settings.from_env(
        state_dir=state_dir,
        group_id=f"delta-bench-{run_id}",
        dead_letter_topic=f"delta-bench-{run_id}.dead-letter",
    )
    ensure_topics(bootstrap, topic_specs(topology, settings.dead_letter_topic))
    say(f"{name}: writing {count:,} records")
    fill(bootstrap, topic, count, keys, as_delta)
    engine = build_processor(settings, bootstrap, topology)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    say(f"{name}: processing")
    deadline = time.monotonic() + 600
    while engine.applied < count:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"{name}: the processor stopped at {engine.applied:,} of {count:,}")
        time.sleep(0.005)
    finished = time.perf_counter()
    assert engine.first_batch_at is not None
    seconds = finished - engine.first_batch_at
    engine.stop()
    thread.join(30)
    rate = count / seconds
    say(f"{name}: {rate:,.0f} records/s ({seconds:.2f} s)")
    return {"name": name, "records": count, "seconds": seconds, "records_per_s": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        bootstrap = broker.bootstrap_servers
        results = [
            run(bootstrap, "publish (full)", args.messages, args.keys, as_delta=False),
            run(bootstrap, "delta_publish", args.messages, args.keys, as_delta=True),
        ]
    finally:
        broker.stop()
    print("| path | records | seconds | records/s |")
    print("| --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['name']} | {r['records']:,} | {r['seconds']:.2f} | {r['records_per_s']:,.0f} |"
        )
    ratio = results[1]["records_per_s"] / results[0]["records_per_s"]
    print(f"\ndelta / full: {ratio:.2f}")
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"runs": results, "delta_over_full": ratio}, indent=2))


if __name__ == "__main__":
    main()
