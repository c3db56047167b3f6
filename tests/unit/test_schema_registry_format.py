"""What the Schema Registry wire format's types do that the native ones have no
counterpart for (processor/messages/schema_registry.py, registry.py): the frame, the
registry's answers (an unknown id, an outage: waited for, then a dead letter), the
schema a built message is written with, and the topology's ``schema_registry``.

The registry is tests/schema_registry.py's REST subset, read by confluent-kafka's client;
the payloads are written by confluent-kafka's serializers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.errors import (
    ConfigurationError,
    DecodeError,
    SchemaRegistryUnavailableError,
    SchemaRegistryUnreachableError,
    TopologyError,
    UnknownSchemaError,
)
from processor.messages import codec_for
from processor.messages.registry import Registry, registry_for
from processor.messages.schema_registry import RegistryCodec
from processor.topology.loader import load_topology
from processor.topology.model import SchemaRegistry, SowTopic
from tests.pki import issue, make_ca
from tests.schema_registry import SchemaRegistryServer

AVSC = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "sym", "type": "string"}],
}


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


def _avro_payload(url: str, row: dict[str, object], schema: dict[str, object] = AVSC) -> bytes:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    return bytes(serializer(row, SerializationContext("orders", MessageField.VALUE)))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_record_waits_for_an_unreachable_registry_then_is_dead_lettered(
    registry: SchemaRegistryServer,
) -> None:
    """A cached schema decodes without the registry; an uncached one is 'unavailable'
    (the processor retries) until the wait is over, then a DecodeError with the reason."""
    clock = Clock()
    codec = RegistryCodec("avro-sr", Registry(registry.url, wait_s=60, clock=clock), "orders-value")
    cached = _avro_payload(registry.url, {"id": 1, "sym": "IBM"})
    other = {**AVSC, "name": "Other"}
    uncached = _avro_payload(registry.url, {"id": 2, "sym": "X"}, other)
    assert codec.decode(cached) == {"id": 1, "sym": "IBM"}
    registry.stop()
    assert codec.decode(cached) == {"id": 1, "sym": "IBM"}
    with pytest.raises(SchemaRegistryUnavailableError, match="retrying for up to 60s"):
        codec.decode(uncached)
    clock.now = 59
    with pytest.raises(SchemaRegistryUnavailableError):
        codec.decode(uncached)
    clock.now = 60
    with pytest.raises(SchemaRegistryUnreachableError, match="schema registry unreachable") as info:
        codec.decode(uncached)
    assert info.value.reason_code == "schema-registry-unreachable"
    registry.start()  # the same port, the same schemas
    assert codec.decode(uncached) == {"id": 2, "sym": "X"}
    assert codec.registry.unreachable_since is None


def test_the_frame_and_the_registry_answers_are_precise_errors(
    registry: SchemaRegistryServer,
) -> None:
    codec = RegistryCodec("avro-sr", Registry(registry.url), "orders-value")
    good = _avro_payload(registry.url, {"id": 1, "sym": "IBM"})
    with pytest.raises(DecodeError, match="starts with byte 123, not the magic byte 0"):
        codec.decode(b'{"id": 1}')
    with pytest.raises(DecodeError, match="starts with nothing"):
        codec.decode(b"")
    with pytest.raises(UnknownSchemaError, match="has no schema id 77") as info:
        codec.decode(b"\x00\x00\x00\x00\x4d" + good[5:])
    assert info.value.reason_code == "unknown-schema-id"
    with pytest.raises(DecodeError, match="bytes left over"):
        codec.decode(good + b"\x00")
    json_codec = RegistryCodec("json-sr", Registry(registry.url), "orders-value")
    with pytest.raises(DecodeError, match="is a AVRO schema, but the topic's type json-sr"):
        json_codec.decode(good)


def test_a_built_message_takes_the_subjects_latest_version_and_a_merge_keeps_the_stored_id(
    registry: SchemaRegistryServer,
) -> None:
    stored = _avro_payload(registry.url, {"id": 1, "sym": "IBM"})
    newer = {**AVSC, "fields": [*AVSC["fields"], {"name": "qty", "type": "long", "default": 0}]}
    latest = registry.register("orders-value", json.dumps(newer))
    codec = RegistryCodec("avro-sr", Registry(registry.url), "orders-value")
    built = codec.from_text(b'{"id": 2, "sym": "MSFT", "qty": 5}')
    assert built[:5] == b"\x00" + latest.to_bytes(4, "big")
    merged = codec.merge(stored, b'{"sym": "ORCL"}', True)
    assert merged[:5] == stored[:5]
    assert codec.decode(merged) == {"id": 1, "sym": "ORCL"}
    merged = codec.merge(merged, b"\x00" + built[1:5] + b"\x02\x02x\x0e", False)
    assert merged[:5] == built[:5]  # a payload delta of a newer schema: written with it
    assert codec.decode(merged) == {"id": 1, "sym": "x", "qty": 7}


def test_protobuf_builds_the_message_type_the_topic_names(registry: SchemaRegistryServer) -> None:
    import base64

    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto(name="o.proto", package="p", syntax="proto3")
    for name in ("Header", "Order"):
        message = proto.message_type.add(name=name)
        message.field.add(name="id", number=1, type=3, label=1, json_name="id")
    schema = base64.b64encode(proto.SerializeToString()).decode()
    registry.register("o-value", schema, "PROTOBUF")
    topic = SowTopic(
        "O",
        message_type="protobuf-sr",
        schema_registry=SchemaRegistry(registry.url, "o-value", "p.Order"),
    )
    codec = codec_for(topic)
    built = codec.from_text(b'{"id": 7}')
    assert built[5:7] == b"\x02\x02"  # one index: 1 (p.Order), zigzag
    assert codec.decode(built) == {"id": 7}
    wrong = SowTopic(
        "O",
        message_type="protobuf-sr",
        schema_registry=SchemaRegistry(registry.url, "o-value", "p.Nope"),
    )
    with pytest.raises(DecodeError, match=r"no message type 'p\.Nope'.*p\.Header, p\.Order"):
        codec_for(wrong).from_text(b'{"id": 7}')
    with pytest.raises(ConfigurationError, match="names a protobuf message type"):
        codec_for(
            SowTopic(
                "A", message_type="avro-sr", schema_registry=SchemaRegistry(registry.url, "", "x.Y")
            )
        )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ("message_type: avro-sr", "needs 'schema_registry'"),
        (
            "message_type: json, schema_registry: 'http://r:8081'",
            "allowed only for message types avro-sr",
        ),
        ("message_type: json-sr, schema_registry: 'r:8081'", "not an http:// or https:// URL"),
        ("message_type: json-sr, schema_registry: {url: 'http://r', subjects: x}", "subjects"),
    ],
)
def test_the_topology_says_what_is_wrong_with_schema_registry(
    tmp_path: Path, fields: str, said: str
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"topics:\n  - {{name: T, key: /id, {fields}}}\n")
    with pytest.raises(TopologyError, match=said):
        load_topology(path)


def test_the_topology_reads_schema_registry(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "topics:\n"
        "  - {name: A, key: /id, message_type: avro-sr, schema_registry: 'http://r:8081'}\n"
        "  - {name: P, key: /id, message_type: protobuf-sr, kafka_topic: p.in,\n"
        "     schema_registry: {url: 'https://r1,https://r2', subject: s, message: p.Order}}\n"
    )
    topics = load_topology(path).topics
    assert topics["A"].schema_registry == SchemaRegistry("http://r:8081")
    assert topics["P"].schema_registry == SchemaRegistry("https://r1,https://r2", "s", "p.Order")
    assert isinstance(codec_for(topics["A"]), RegistryCodec)
    assert codec_for(topics["A"]).subject == "A-value"  # type: ignore[attr-defined]


def test_an_amps_declaration_names_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "t.xml"
    path.write_text(
        "<AMPSConfig><MessageTypes><MessageType><Name>orders-sr</Name><Module>protobuf-sr"
        "</Module><SchemaRegistry>http://r:8081</SchemaRegistry><Subject>o-value</Subject>"
        "<RegistryMessage>p.Order</RegistryMessage></MessageType></MessageTypes>"
        "<SOW><Topic><Name>T</Name><MessageType>orders-sr</MessageType><Key>/id</Key>"
        "</Topic></SOW></AMPSConfig>"
    )
    topic = load_topology(path).topics["T"]
    assert topic.message_type == "protobuf-sr"
    assert topic.schema_registry == SchemaRegistry("http://r:8081", "o-value", "p.Order")
    path.write_text(path.read_text().replace("<SchemaRegistry>http://r:8081</SchemaRegistry>", ""))
    with pytest.raises(TopologyError, match="needs <SchemaRegistry>"):
        load_topology(path)
    path.write_text(
        "<AMPSConfig><SOW><Topic><Name>T</Name><MessageType>json-sr</MessageType>"
        "<Key>/id</Key></Topic></SOW></AMPSConfig>"
    )
    with pytest.raises(TopologyError, match=r"json-sr needs a declaration.*<SchemaRegistry>"):
        load_topology(path)


def test_check_config_prints_the_registry_and_the_subject(tmp_path: Path) -> None:
    from processor.cli.check import describe

    path = tmp_path / "t.yaml"
    path.write_text(
        "topics:\n  - {name: A, key: /id, message_type: json-sr, kafka_topic: shop.a,\n"
        "     schema_registry: 'http://r:8081'}\n"
    )
    described = describe(load_topology(path).topics["A"])
    assert described["schema_registry"] == {"url": "http://r:8081", "subject": "shop.a-value"}


def test_a_registry_over_tls_is_read_with_the_client_properties_of_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SOW_SCHEMA_REGISTRY_PROPERTIES reaches confluent-kafka's client: an https
    registry whose CA the client is given answers; a bad entry is a precise error."""
    ca = make_ca("registry-ca", tmp_path)
    server = issue(ca, "registry", server=True, ips=["127.0.0.1"], dns=["localhost"])
    with SchemaRegistryServer(tls=(server.cert, server.key)) as registry:
        writer = SchemaRegistryClient({"url": registry.url, "ssl.ca.location": str(ca.cert)})
        serializer = AvroSerializer(writer, json.dumps(AVSC))
        payload = serializer({"id": 7, "sym": "TLS"}, SerializationContext("o", MessageField.VALUE))
        monkeypatch.setenv("SOW_SCHEMA_REGISTRY_PROPERTIES", f"ssl.ca.location={ca.cert}")
        codec = RegistryCodec("avro-sr", registry_for(registry.url), "o-value")
        assert codec.decode(bytes(payload)) == {"id": 7, "sym": "TLS"}
        # Without the CA the registry's certificate is not trusted: it does not answer.
        monkeypatch.setenv("SOW_SCHEMA_REGISTRY_PROPERTIES", "")
        untrusted = RegistryCodec("avro-sr", registry_for(registry.url), "o-value")
        with pytest.raises(SchemaRegistryUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.decode(bytes(payload))
    monkeypatch.setenv("SOW_SCHEMA_REGISTRY_PROPERTIES", "ssl.ca.location")
    with pytest.raises(ConfigurationError, match=r"SOW_SCHEMA_REGISTRY_PROPERTIES\) entry 1"):
        registry_for("https://127.0.0.1:1")
