"""No record can stop the processor: records that cannot be applied reach the dead-letter
topic with the reason (and where to find them in the input log), later records still
apply, and a failure that is not one record's stops ``sow serve`` with a clear message
instead of leaving a dead processor behind a live gRPC port."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
import yaml
from confluent_kafka import Producer

from processor.keys import key_function
from processor.state.opener import store_path
from processor.state.rocksdb import RocksDBStore
from processor.topology.model import KeyGeneratorSpec, SowTopic
from tests.integration.harness import namespaced, read_topic, running_sow

#: Written straight to the input topic without a key: fits the log (the producer's
#: message.max.bytes is 1,000,000), but re-keyed by its SowKey (19 more bytes) it does not.
BIG_SIZE = 999_950
#: Keyed by its SowKey: fits the log, but its changelog envelope (the value plus about 50
#: bytes and the topic names) does not.
ENVELOPE_SIZE = 999_900


def picky_generator(topic: SowTopic, options: Mapping[str, Any]) -> Callable[[Any], str]:
    """A custom KeyGenerator (named in the topology) that raises on some messages."""

    def generate(message: Any) -> str:
        if message.get("explode"):
            raise ValueError(f"cannot make a key for {message['id']}")
        return f"gen-{message['id']}"

    return generate


def _padded(identifier: int, size: int) -> bytes:
    """A JSON message of exactly ``size`` bytes."""
    head = b'{"id":%d,"pad":"' % identifier
    return head + b"x" * (size - len(head) - 2) + b'"}'


def _header(message: Any, name: str) -> str:
    return str(dict(message.headers())[name].decode())


def _position(message: Any) -> dict[str, Any]:
    return {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()}


def _send(bootstrap: str, records: list[tuple[str, bytes | None, bytes]]) -> list[dict[str, Any]]:
    """Produce (topic, key, value) straight to Kafka; return each record's position."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    delivered: dict[int, Any] = {}
    for at, (topic, key, value) in enumerate(records):

        def report(error: Any, message: Any, at: int = at) -> None:
            assert error is None, error
            delivered[at] = message

        producer.produce(topic, value, key, on_delivery=report)
    assert producer.flush(30) == 0
    return [_position(delivered[at]) for at in range(len(records))]


def test_records_that_cannot_be_applied_are_dead_lettered_and_later_ones_apply(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    schema = {
        "type": "record",
        "name": "Price",
        "fields": [
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "note", "type": "string"},
        ],
    }
    schema_path = tmp_path / "price.avsc"
    schema_path.write_text(json.dumps(schema))
    generator = KeyGeneratorSpec(f"{__name__}:picky_generator")
    topology = namespaced(
        unique,
        SowTopic("BIG", keys=("/id",)),
        SowTopic("GEN", key_generator=generator),
        SowTopic("PRICES", message_type="avro", keys=("/amount",), schema=str(schema_path)),
    )
    big, gen, prices = (topology.topic(n) for n in ("BIG", "GEN", "PRICES"))
    big_key = key_function(big)
    assert big_key is not None
    huge, large = _padded(1, BIG_SIZE), _padded(4, ENVELOPE_SIZE)
    price = io.BytesIO()
    fastavro.schemaless_writer(
        price, fastavro.parse_schema(schema), {"amount": Decimal("12.50"), "note": "n"}
    )
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        positions = _send(
            bootstrap,
            [
                (big.kafka_topic, None, huge),
                (big.kafka_topic, big_key({"id": 4}).encode(), large),
                (big.kafka_topic, big_key({"id": 2}).encode(), b'{"id":2,"pad":"small"}'),
                (gen.kafka_topic, b"gen-7", b'{"id":7,"explode":true}'),
                (gen.kafka_topic, b"gen-8", b'{"id":8}'),
                (prices.kafka_topic, b"p", price.getvalue()),
            ],
        )
        dead = read_topic(bootstrap, f"{unique}.dead-letter", expect=4, timeout_s=60)
        assert len(dead) == 4
        found = {
            (_header(m, "sow.source.topic"), int(_header(m, "sow.source.offset"))): m for m in dead
        }
        for at, size, key in ((0, BIG_SIZE, None), (1, ENVELOPE_SIZE, big_key({"id": 4}))):
            too_large = found[(big.kafka_topic, positions[at]["offset"])]
            assert _header(too_large, "sow.error.reason") == "too-large"
            assert _header(too_large, "sow.error.value-omitted") == str(size)
            assert _header(too_large, "sow.source.partition") == "0"
            assert too_large.value() is None
            assert too_large.key() == (key.encode() if key else None)

        raised = found[(gen.kafka_topic, positions[3]["offset"])]
        assert _header(raised, "sow.error.reason") == "key-generation-failed"
        assert "cannot make a key for 7" in _header(raised, "sow.error.message")
        assert raised.value() == b'{"id":7,"explode":true}'

        unencodable = found[(prices.kafka_topic, positions[5]["offset"])]
        assert _header(unencodable, "sow.error.reason") == "key-generation-failed"
        assert "Decimal" in _header(unencodable, "sow.error.message")
        assert unencodable.value() == price.getvalue()

        records, _, _ = client.query("BIG", min_position=[positions[2]])
        assert [orjson.loads(r.data)["id"] for r in records] == [2]
        records, _, _ = client.query("GEN", min_position=[positions[4]])
        assert [r.sow_key for r in records] == ["gen-8"]
        later = client.publish("BIG", b'{"id":3}')
        records, _, _ = client.query("BIG", min_position=[later.position])
        assert sorted(orjson.loads(r.data)["id"] for r in records) == [2, 3]
        assert app.processor is not None
        assert app.processor.dead_lettered == 4
        assert not app.errors


def _serve(bootstrap: str, tmp_path: Path, unique: str, kafka_topic: str) -> Any:
    """``sow serve`` of one ORDERS topic in a child process, against the test broker."""
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {"topics": [{"name": "ORDERS", "key": ["/orderId"], "kafka_topic": kafka_topic}]}
        )
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor.cli",
            "serve",
            "--topology",
            str(topology_file),
            "--state-dir",
            str(tmp_path / "state"),
            "--group-id",
            f"{unique}-group",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SOW_GRPC_ADDRESS": "127.0.0.1:0",
            "SOW_DEAD_LETTER_TOPIC": f"{unique}.dead-letter",
        },
    )


def test_sow_serve_exits_non_zero_when_its_processor_cannot_open_a_store(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Another process holds the store partition (two processors on one state directory):
    the processor thread fails with a StoreError and the whole process exits."""
    topic = SowTopic("ORDERS", keys=("/orderId",), kafka_topic=f"{unique}.ORDERS")
    holder = RocksDBStore(store_path(tmp_path / "state", topic, 0))
    try:
        process = _serve(bootstrap, tmp_path, unique, topic.kafka_topic)
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    finally:
        holder.close()
    assert process.returncode == 1, stderr
    # The processor runs as a child process of sow serve: it reports its own failure, and
    # sow serve stops because its processor did.
    assert "sow process: error: the sow-processor thread stopped: StoreError" in stderr
    assert "sow serve: error: the processor (child process) stopped" in stderr
    assert "in use by another process" in stderr


def test_sow_serve_exits_non_zero_when_its_processor_dies_after_start(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """A second processor takes over the same transactional identity (the same group and
    instance id): the first is fenced on its next transaction, and rather than serve on
    without a processor, ``sow serve`` stops and says why."""
    from processor.log.kafka.transactional import KafkaTransactionalLog

    kafka_topic = f"{unique}.ORDERS"
    process = _serve(bootstrap, tmp_path, unique, kafka_topic)
    try:
        assert process.stderr is not None
        lines: list[str] = []
        for line in process.stderr:
            lines.append(line)
            if "kafka-sow is ready" in line:
                break
        else:
            pytest.fail("sow serve ended before it was ready:\n" + "".join(lines))
        usurper = KafkaTransactionalLog(bootstrap, f"{unique}-group-0")
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            _send(bootstrap, [(kafka_topic, None, b'{"orderId": 1}')])
            time.sleep(0.5)
        usurper.close()
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = "".join(lines) + rest
    assert process.returncode == 1, stderr
    assert "sow process: error: the sow-processor thread stopped: FencedError" in stderr, stderr
    assert "sow serve: error: the processor (child process) stopped" in stderr, stderr
