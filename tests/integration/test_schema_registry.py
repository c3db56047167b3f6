"""Topics in the Schema Registry wire format (avro-sr, protobuf-sr, json-sr; issue 37).

The registry is a real one, Apicurio Registry 2.4.2.Final (its Confluent-compatible API),
built from Maven Central by ``tests/registry/apicurio.py`` and shared by this module's
tests, for the three producers feeding SOW topics and for the 30 s outage (the registry
process stopped with SIGSTOP: it answers nothing until SIGCONT). The REST subset of
``tests/schema_registry.py`` serves the tests that need a registry to refuse
connections or to demand basic authentication. The client that reads either and the
serializers that write every record are confluent-kafka's own, so the wire format and
the client's calls are the real ones. On
the Kafka backend the records are produced straight to the topics' Kafka topics, as a
foreign producer would; on the memory backend the same bytes are published through the
gateway (which checks them as the processor does).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson
import pytest

from processor.client.direct import DirectPublisher
from processor.client.sow_client import SowClient
from processor.errors import ServiceError, UnknownSchemaError
from processor.messages import codec_for
from processor.topology.loader import load_topology
from processor.topology.model import Topology
from tests.conftest import MEMORY
from tests.integration.harness import read_topic, running_sow
from tests.integration.subscription_helpers import Collector
from tests.registry import apicurio
from tests.schema_registry import SchemaRegistryServer

AVSC = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sym", "type": "string"},
        {"name": "qty", "type": "long"},
        {"name": "px", "type": "double"},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "sym": {"type": "string"},
        "qty": {"type": "integer"},
        "px": {"type": "number"},
    },
    "required": ["id", "sym"],
}
PROTO = """
syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string sym = 2;
  int64 qty = 3;
  double px = 4;
}
"""
ROWS = [
    {"id": 1, "sym": "IBM", "qty": 10, "px": 2.5},
    {"id": 2, "sym": "MSFT", "qty": 30, "px": 1.0},
    {"id": 3, "sym": "IBM", "qty": 5, "px": 4.0},
]


class Registry(Protocol):
    """What the tests do with a registry: its address, and an outage (stop, start)."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...

    def start(self) -> object: ...


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    """The REST subset (basic authentication required): stopped, it refuses connections."""
    with SchemaRegistryServer(user_info="sow:secret") as server:
        yield server


class FrozenApicurio:
    """The module's Apicurio registry; ``stop`` freezes its process (SIGSTOP), so every
    call to it hangs until the client's timeout, and ``start`` thaws it (SIGCONT)."""

    def __init__(self, running: apicurio.Registry) -> None:
        self.running = running
        self.url = running.url

    def stop(self) -> None:
        os.kill(self.running.process.pid, signal.SIGSTOP)

    def start(self) -> None:
        os.kill(self.running.process.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def real_registry() -> Iterator[FrozenApicurio]:
    """A real registry for the module (each test registers under subjects of its own)."""
    with apicurio.running(quiet=True) as running:
        frozen = FrozenApicurio(running)
        try:
            yield frozen
        finally:
            frozen.start()  # a test that failed while it was frozen


@pytest.fixture(autouse=True)
def _registry_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOW_SCHEMA_REGISTRY_USER_INFO", "sow:secret")


def _topology(tmp_path: Path, unique: str, url: str) -> Topology:
    path = tmp_path / "topology.yaml"
    registry = f"schema_registry: {{url: '{url}'}}"
    path.write_text(
        "topics:\n"
        f"  - {{name: AV, message_type: avro-sr, {registry}, key: /id, kafka_topic: {unique}.AV}}\n"
        f"  - {{name: PB, message_type: protobuf-sr, {registry}, key: /id,"
        f" kafka_topic: {unique}.PB}}\n"
        f"  - {{name: JS, message_type: json-sr, {registry}, key: /id, kafka_topic: {unique}.JS}}\n"
        "views:\n"
        "  - {name: BYSYM, message_type: json, underlying: AV, grouping: [/sym],"
        f"  projection: ['/sym AS /sym', 'SUM(/qty) AS /qty'], kafka_topic: {unique}.BYSYM}}\n"
    )
    return load_topology(path)


class Producers:
    """confluent-kafka's Avro, Protobuf and JSON Schema serializers, one per topic,
    registering their schemas under ``<kafka topic>-value`` as they do by default. A
    ``salt`` makes the three schemas differ from every other test's (a registry gives the
    same content the same id, and the processor's cache would then know it)."""

    def __init__(self, url: str, topology: Topology, tmp_path: Path, salt: str = "") -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "sow:secret"})
        self.order = _proto_class(tmp_path, "".join(c for c in salt if c.isalnum()))
        self.topology = topology
        protobuf = ProtobufSerializer(self.order, client, {"use.deprecated.format": False})
        self._serializers: dict[str, Callable[[Any, Any], bytes]] = {
            "AV": AvroSerializer(client, json.dumps({**AVSC, "doc": salt})),
            "PB": lambda row, ctx: protobuf(self.order(**row), ctx),
            "JS": JSONSerializer(json.dumps({**JSON_SCHEMA, "title": salt}), client),
        }

    def encode(self, topic: str, row: dict[str, Any]) -> bytes:
        from confluent_kafka.serialization import MessageField, SerializationContext

        kafka_topic = self.topology.topic(topic).kafka_topic
        return self._serializers[topic](row, SerializationContext(kafka_topic, MessageField.VALUE))


def _proto_class(tmp_path: Path, salt: str = "") -> Any:
    from google.protobuf import descriptor_pool, message_factory

    from processor.messages.protobuf import _descriptor_set

    package = f"shop{salt}"
    (tmp_path / "order.proto").write_text(PROTO.replace("package shop;", f"package {package};"))
    pool = descriptor_pool.DescriptorPool()
    for file in _descriptor_set(str(tmp_path / "order.proto")).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def _send(
    backend: str, client: SowClient, topology: Topology, items: list[tuple[str, bytes]]
) -> None:
    """Each (topic, payload): produced straight to Kafka (a foreign producer), or on the
    memory backend published through the gateway."""
    if backend == MEMORY:
        for topic, payload in items:
            client.publish(topic, payload)
        return
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": backend, "log_level": 3})
    for topic, payload in items:
        producer.produce(topology.topic(topic).kafka_topic, payload, key=None)
    assert producer.flush(30) == 0


def _until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_foreign_avro_protobuf_and_json_schema_producers_feed_sow_topics(
    backend: str, tmp_path: Path, unique: str, real_registry: FrozenApicurio
) -> None:
    """Three SOW topics fed by confluent-kafka's serializers through a real registry:
    keys, filters, select, a delta (merged with the stored record's writer schema), a
    view over the avro topic and a subscription answer as for the native types."""
    registry = real_registry
    topology = _topology(tmp_path, unique, registry.url)
    producers = Producers(registry.url, topology, tmp_path)
    codecs = {name: codec_for(topology.topics[name]) for name in ("AV", "PB", "JS")}
    with running_sow(backend, topology, tmp_path / "state", unique) as (_, client):
        live = Collector(client.subscribe("JS", filter="/qty > 20"))
        _until(lambda: bool(live.messages))
        items = [(topic, producers.encode(topic, row)) for topic in codecs for row in ROWS]
        _send(backend, client, topology, items)
        for name, codec in codecs.items():
            _until(lambda name=name: len(client.query(name)[0]) == 3)
            records, _, _ = client.query(name, filter="/sym = 'IBM' AND /qty > 6")
            assert [codec.decode(r.data) for r in records] == [ROWS[0]], name
            records, _, _ = client.query(
                name, filter="/id = 2", select="[-/,+/sym,+/qty]", text_form=True
            )
            assert [orjson.loads(r.data) for r in records] == [{"sym": "MSFT", "qty": 30}], name
            # The stored payload is the producer's own: the frame and the body as written.
            records, _, _ = client.query(name, filter="/id = 3")
            assert [r.data for r in records] == [_sent(items, name, 2)]
        _until(lambda: [codecs["JS"].decode(c.record.data) for c in live.changes()] == [ROWS[1]])

        # delta_publish as JSON text: merged into the stored record, its schema id kept
        stored = client.query("AV", filter="/id = 1")[0][0].data
        last = client.publish("AV", b'{"id": 1, "qty": 99}', delta=True, text_form=True)
        records, _, _ = client.query("AV", filter="/id = 1", min_position=[last.position])
        assert [codecs["AV"].decode(r.data) for r in records] == [{**ROWS[0], "qty": 99}]
        assert records[0].data[:5] == stored[:5]
        records, _, _ = client.query("AV", filter="/id = 1", text_form=True)
        assert orjson.loads(records[0].data) == {**ROWS[0], "qty": 99}

        # a view over the avro topic groups it as over a native one
        def view_rows() -> list[Any]:
            return sorted((orjson.loads(r.data) for r in client.query("BYSYM")[0]), key=str)

        _until(lambda: view_rows() == [{"sym": "IBM", "qty": 104}, {"sym": "MSFT", "qty": 30}])

        # the gateway checks a published payload as the processor does
        with pytest.raises(ServiceError, match="magic byte 0"):
            client.publish("JS", b'{"id": 9, "sym": "X"}')
        with pytest.raises(ServiceError, match="does not match JSON Schema"):
            client.publish("JS", codecs["JS"].split(items[6][1])[0] + b'{"id": 9}')


def _sent(items: list[tuple[str, bytes]], topic: str, index: int) -> bytes:
    return [payload for name, payload in items if name == topic][index]


def _dead_letters(bootstrap: str, unique: str, expect: int) -> dict[str, tuple[str, str]]:
    """The dead letters by the topic they came from: (reason, message)."""
    dead = read_topic(bootstrap, f"{unique}.dead-letter", expect=expect, timeout_s=60)
    out = {}
    for message in dead:
        headers = {k: v.decode() for k, v in message.headers()}  # type: ignore[attr-defined]
        source = headers["sow.source.topic"].rsplit(".", 1)[1]
        out[f"{source}@{headers['sow.source.offset']}"] = (
            headers["sow.error.reason"],
            headers["sow.error.message"],
        )
    return out


def test_unknown_ids_garbage_and_foreign_formats_are_dead_lettered_with_the_reason(
    bootstrap: str, tmp_path: Path, unique: str, registry: SchemaRegistryServer
) -> None:
    """An unknown schema id, a body its schema does not read, a payload with no frame, a
    JSON body its JSON Schema refuses and an Avro record on the json-sr topic reach the
    dead-letter topic at once with a precise reason; the good records after them apply."""
    topology = _topology(tmp_path, unique, registry.url)
    producers = Producers(registry.url, topology, tmp_path)
    good = {name: producers.encode(name, ROWS[0]) for name in ("AV", "PB", "JS")}
    avro_frame, json_frame = good["AV"][:5], good["JS"][:5]
    bad = [
        ("AV", b"\x00\x00\x00\x27\x10" + good["AV"][5:]),  # id 10000: never registered
        ("AV", avro_frame + b"\xff\xff\xff"),  # not an Order record
        ("PB", b'{"id": 1}'),  # no frame
        ("JS", json_frame + b'{"id": "one", "sym": "X"}'),  # /id is not an integer
        ("JS", good["AV"]),  # an Avro schema's id on the json-sr topic
    ]
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        _send(bootstrap, client, topology, [*bad, *good.items()])
        reasons = _dead_letters(bootstrap, unique, expect=5)
        assert sorted(reason for reason, _ in reasons.values()) == [
            "undecodable",
            "undecodable",
            "undecodable",
            "undecodable",
            "unknown-schema-id",
        ]
        messages = " | ".join(message for _, message in reasons.values())
        assert "has no schema id 10000" in messages
        assert "not an Avro record of schema schema id" in messages
        assert "not the magic byte 0" in messages
        assert "does not match JSON Schema" in messages
        assert "at /id" in messages
        assert "is a AVRO schema, but the topic's type json-sr reads JSON ones" in messages
        for name in good:
            _until(lambda name=name: len(client.query(name)[0]) == 1)
        assert app.processor is not None
        assert app.processor.dead_lettered == 5
        # The direct publisher checks and keys framed payloads as the gateway does.
        with DirectPublisher(bootstrap, topology) as direct:
            published = direct.publish("PB", producers.encode("PB", ROWS[1]))
            assert (
                published.sow_key == client.publish("PB", producers.encode("PB", ROWS[1])).sow_key
            )
            with pytest.raises(UnknownSchemaError, match="has no schema id 10000"):
                direct.publish("AV", bad[0][1])
        _until(lambda: len(client.query("PB")[0]) == 2)


@pytest.mark.parametrize("outage", ["apicurio-frozen", "refusing"])
def test_a_registry_stopped_for_30s_loses_nothing(
    bootstrap: str, tmp_path: Path, unique: str, request: pytest.FixtureRequest, outage: str
) -> None:
    """Records whose schemas the processor never saw arrive while the registry is down:
    none is applied or dead-lettered during 30 s of outage (the processor retries its
    batch, its cache cannot answer), and every one lands once the registry is back. The
    real registry frozen (calls hang until the client's timeout), or the REST subset
    stopped (connections refused; in the heavy tier)."""
    registry: Registry = request.getfixturevalue(
        "real_registry" if outage == "apicurio-frozen" else "registry"
    )
    topology = _topology(tmp_path, unique, registry.url)
    producers = Producers(registry.url, topology, tmp_path, salt=unique)
    items = [(name, producers.encode(name, row)) for name in ("AV", "PB", "JS") for row in ROWS]
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        registry.stop()
        _send(bootstrap, client, topology, items)
        time.sleep(30)
        assert "the Schema Registry does not answer" in (app.readiness() or "")
        assert app.processor is not None
        assert [len(client.query(name)[0]) for name in ("AV", "PB", "JS")] == [0, 0, 0]
        assert app.processor.dead_lettered == 0
        registry.start()
        for name in ("AV", "PB", "JS"):
            _until(lambda name=name: len(client.query(name)[0]) == 3, timeout_s=60)
        assert app.processor.dead_lettered == 0
        _until(lambda: app.readiness() is None)  # the watchdog sees the loop turn again


def test_a_registry_down_past_the_wait_dead_letters_the_record_and_the_processor_goes_on(
    bootstrap: str,
    tmp_path: Path,
    unique: str,
    registry: SchemaRegistryServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SOW_SCHEMA_REGISTRY_WAIT_S=2: a record whose schema no cache holds waits 2 s for
    the stopped registry, then goes to the dead-letter topic with the reason; a record of
    a cached schema applies meanwhile, and the processor goes on."""
    monkeypatch.setenv("SOW_SCHEMA_REGISTRY_WAIT_S", "2")
    topology = _topology(tmp_path, unique, registry.url)
    producers = Producers(registry.url, topology, tmp_path)
    first, second = producers.encode("AV", ROWS[0]), producers.encode("JS", ROWS[1])
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        _send(bootstrap, client, topology, [("AV", first)])
        _until(lambda: len(client.query("AV")[0]) == 1)
        registry.stop()
        cached = producers.encode("AV", ROWS[1])
        _send(bootstrap, client, topology, [("JS", second), ("AV", cached)])
        reasons = _dead_letters(bootstrap, unique, expect=1)
        assert [reason for reason, _ in reasons.values()] == ["schema-registry-unreachable"]
        assert "schema registry unreachable" in next(iter(reasons.values()))[1]
        _until(lambda: len(client.query("AV")[0]) == 2)
        assert app.processor is not None
        assert app.processor.dead_lettered == 1
