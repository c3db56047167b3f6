"""Processor latency at low load: input record written -> its transaction committed.

Starts the broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded one) and the processor of
one SOW topic in this process, then writes single records to the input topic, one at a
time, and times from the producer's delivery report to the processor counting the record
as committed (``Processor.records``). Prints percentiles in milliseconds.

    python bench/processor_latency.py --records 200
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from processor.app import build_processor, topic_specs
from processor.config import Settings
from processor.keys import key_function
from processor.log.broker import start_broker
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import SowTopic, Topology


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between records")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    broker = start_broker()
    print(f"broker: {broker.description}", file=sys.stderr, flush=True)
    try:
        name = f"latency-{uuid.uuid4().hex[:8]}"
        topic = SowTopic("LAT", keys=("/id",), kafka_topic=name)
        topology = Topology({"LAT": topic})
        settings = Settings.from_env(
            state_dir=Path(tempfile.mkdtemp()),
            group_id=name,
            dead_letter_topic=f"{name}.dl",
            fetch_wait_ms=broker.fetch_wait_ms,
        )
        bootstrap = broker.bootstrap_servers
        ensure_topics(bootstrap, topic_specs(topology, settings.dead_letter_topic))
        processor = build_processor(settings, bootstrap, topology)
        thread = threading.Thread(target=processor.run, daemon=True)
        thread.start()
        if not processor.ready.wait(60):
            raise SystemExit("the processor did not join its group within 60 s")
        key_of = key_function(topic)
        assert key_of is not None
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
        samples: list[float] = []
        for i in range(args.records + 10):
            message = {"id": i % 100, "n": i}
            before = processor.records
            producer.produce(name, orjson.dumps(message), key_of(message).encode())
            producer.flush(10)
            sent = time.perf_counter()
            while processor.records == before:
                time.sleep(0.0002)
            if i >= 10:  # the first records warm up connections
                samples.append((time.perf_counter() - sent) * 1000)
            time.sleep(args.pause)
        processor.stop()
        thread.join(30)
        cuts = statistics.quantiles(samples, n=100)
        print(
            f"written -> committed over {len(samples)} single records: "
            f"p50 {cuts[49]:.1f} ms, p90 {cuts[89]:.1f} ms, p99 {cuts[98]:.1f} ms, "
            f"max {max(samples):.1f} ms"
        )
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
