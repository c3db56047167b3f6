"""Queues under SIGKILLs (heavy, issue 22): 100,000 messages flow through a queue to 4
consumer processes while consumers and the processor are killed at random and
restarted.

* at-least-once: every message is acknowledged (the queue ends empty, nothing
  dead-lettered) and received at least once; a message received twice was leased to a
  consumer when it was killed (duplicates are counted and bounded by the leases
  outstanding at the kills: a consumer's backlog, 50; the queue over the 4-partition
  topic is one queue, fed through its relay).
* at-most-once: no message is received twice, ever (the leases a killed consumer held
  are lost, and counted).

Run with ``python -m pytest -m heavy tests/integration/test_queue_faults.py -s`` (the
figures are printed).
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from processor.app import Application, start
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.topology.loader import load_topology
from tests.integration.test_crash_recovery import ProcessorProcess, reap

__all__ = ["reap"]  # the fixture that kills processors a failed test left running

pytestmark = pytest.mark.heavy

MESSAGES = 100_000
CONSUMERS = 4
PARTITIONS = 4
RATE = 1_500  # published per second

#: A consumer's backlog (the queue's, whatever its topic's partitions).
BACKLOG = 50
#: A consumer process: logs "R <id> <deliveries>" per lease, then acknowledges it (with
#: at-most-once semantics that frees its backlog slot only).
CONSUMER = """
import sys
from processor.client.sow_client import SowClient
address, log_path = sys.argv[1], sys.argv[2]
out = open(log_path, "a", buffering=1)
client = SowClient(address)
stream = client.consume("Q", max_backlog=50)
for lease in stream.leases():
    ident = lease.record.data.split(b'"id":', 1)[1].split(b",", 1)[0].rstrip(b"}")
    out.write(f"R {int(ident)} {lease.deliveries}\\n")
    stream.ack([lease.bookmark])
"""


class ConsumerProcess:
    def __init__(self, script: Path, address: str, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, str(script), address, str(log)],
            stdout=subprocess.DEVNULL,
            stderr=log.with_suffix(".err").open("a"),
        )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def _publish(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    began = time.monotonic()
    for n in range(MESSAGES):
        pause = began + n / RATE - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, b'{"id":%d,"pad":"xxxxxxxx"}' % n, partition=n % PARTITIONS)
        producer.poll(0)
        if stop.is_set():
            break
    producer.flush()


def _receipts(logs: list[Path]) -> collections.Counter[int]:
    received: collections.Counter[int] = collections.Counter()
    for log in logs:
        if log.exists():
            for line in log.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == "R":
                    received[int(parts[1])] += 1
    return received


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("semantics", ["at-least-once", "at-most-once"])
def test_queue_under_sigkills(bootstrap: str, unique: str, tmp_path: Path, semantics: str) -> None:
    topology_file = tmp_path / "queue.yaml"
    topology_file.write_text(
        "topics:\n"
        f"  - {{name: orders, sow: false, kafka_topic: {unique}.orders, "
        f"partitions: {PARTITIONS}}}\n"
        "queues:\n"
        f"  - {{name: Q, message_type: json, underlying: orders, semantics: {semantics}, "
        "lease_period: 60s, max_per_subscription_backlog: 50}\n"
    )
    topology = load_topology(topology_file)
    settings = Settings(
        bootstrap_servers=bootstrap,
        state_dir=tmp_path / "service",
        grpc_address="127.0.0.1:0",
        group_id=f"{unique}-group",
        dead_letter_topic=f"{unique}.dead-letter",
    )
    service: Application = start(settings, topology=topology, processor=False)
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    logs = [tmp_path / f"consumer-{i}.log" for i in range(CONSUMERS)]
    ack = semantics == "at-least-once"
    consumers = [ConsumerProcess(script, service.grpc_address, log) for log in logs]
    processor = ProcessorProcess(bootstrap, topology_file, tmp_path / "state", f"{unique}-group")
    stop = threading.Event()
    publisher = threading.Thread(target=_publish, args=(bootstrap, f"{unique}.orders", stop))
    publisher.start()
    rng = random.Random(22)
    kills = {"consumer": 0, "processor": 0}
    client = SowClient(service.grpc_address)
    began = time.monotonic()
    try:
        next_processor_kill = time.monotonic() + rng.uniform(8, 15)
        while publisher.is_alive():
            time.sleep(rng.uniform(1.5, 4.0))
            if time.monotonic() >= next_processor_kill:
                processor.kill()
                kills["processor"] += 1
                time.sleep(rng.uniform(0.2, 1.5))
                processor = ProcessorProcess(
                    bootstrap, topology_file, tmp_path / "state", f"{unique}-group"
                )
                next_processor_kill = time.monotonic() + rng.uniform(8, 15)
                continue
            print(f"  {time.monotonic() - began:.0f}s: {sum(_receipts(logs).values()):,} received")
            index = rng.randrange(CONSUMERS)
            consumers[index].kill()  # the leases it holds (its backlog at most) return
            kills["consumer"] += 1
            time.sleep(rng.uniform(0.2, 1.0))
            consumers[index] = ConsumerProcess(script, service.grpc_address, logs[index])
        publisher.join()
        deadline = time.monotonic() + 600
        last_said = 0.0
        while True:
            records, _, _ = client.query("Q")
            received = _receipts(logs)
            if time.monotonic() - last_said > 10:
                last_said = time.monotonic()
                print(f"  draining: {len(records):,} queued, {len(received):,} received")
            if not records and (len(received) == MESSAGES or not ack):
                break
            assert time.monotonic() < deadline, (
                f"after 600 s: {len(records)} messages still queued, {len(received):,} of "
                f"{MESSAGES:,} received"
            )
            time.sleep(1.0)
        seconds = time.monotonic() - began
    finally:
        stop.set()
        for consumer in consumers:
            consumer.kill()
        processor.terminate()
        client.close()
        service.stop()
    received = _receipts(logs)
    duplicates = sum(count - 1 for count in received.values() if count > 1)
    print(
        f"\n{semantics}: {MESSAGES:,} messages, {kills['consumer']} consumer and "
        f"{kills['processor']} processor SIGKILLs in {seconds:.0f} s; received "
        f"{len(received):,} distinct, {duplicates:,} more than once (leases outstanding at "
        f"the consumer kills: at most {BACKLOG} per kill, "
        f"{kills['consumer'] * BACKLOG:,} in all); "
        f"lost {MESSAGES - len(received):,}"
    )
    assert kills["processor"] >= 3
    assert kills["consumer"] >= 10
    if ack:
        assert set(received) == set(range(MESSAGES))  # every message, at least once
        assert duplicates <= kills["consumer"] * BACKLOG  # leases held at kills
    else:
        assert duplicates == 0  # never twice
        assert set(received) <= set(range(MESSAGES))
