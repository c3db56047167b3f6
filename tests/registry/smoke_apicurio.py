"""Smoke check: confluent-kafka's serializers against a real Apicurio registry.

Run: ``python -m tests.registry.smoke_apicurio``. Builds the registry if needed, starts it,
then for Avro, Protobuf and JSON Schema registers a schema through the serializer,
serializes a record and reads it back with the deserializer, and prints timings and the
registry's resident memory. Exits non-zero on the first failure.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.registry import apicurio

TOPIC = "orders"
RECORD = {"id": "o-1", "qty": 3, "price": 9.5}

AVRO_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "kafkasow.smoke",
 "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
            {"name": "price", "type": "double"}]}
"""

JSON_SCHEMA = """
{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
 "properties": {"id": {"type": "string"}, "qty": {"type": "integer"},
                "price": {"type": "number"}},
 "required": ["id", "qty", "price"]}
"""


def _order_message_class() -> Any:
    """A protobuf message class for Order, built from a descriptor (no protoc needed)."""
    f = descriptor_pb2.FileDescriptorProto(
        name="kafkasow_smoke_order.proto", package="kafkasow.smoke"
    )
    f.syntax = "proto3"
    msg = f.message_type.add(name="Order")
    t = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="id", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    msg.field.add(name="qty", number=2, type=t.TYPE_INT32, label=t.LABEL_OPTIONAL)
    msg.field.add(name="price", number=3, type=t.TYPE_DOUBLE, label=t.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kafkasow.smoke.Order"))


def _round_trip(
    name: str,
    topic: str,
    serialize: Callable[..., bytes],
    deserialize: Callable[..., Any],
    value: Any,
) -> Any:
    ctx = SerializationContext(topic, MessageField.VALUE)
    started = time.monotonic()
    data = serialize(value, ctx)
    back = deserialize(data, ctx)
    print(
        f"{name}: {len(data)} bytes, schema id {int.from_bytes(data[1:5], 'big')}, "
        f"round trip {1000 * (time.monotonic() - started):.0f} ms -> {back!r}"
    )
    return back


def check(url: str) -> None:
    client = SchemaRegistryClient({"url": url})
    back = _round_trip(
        "avro",
        f"{TOPIC}-avro",
        AvroSerializer(client, AVRO_SCHEMA),
        AvroDeserializer(client),
        RECORD,
    )
    assert back == RECORD, back

    order = _order_message_class()
    back = _round_trip(
        "protobuf",
        f"{TOPIC}-protobuf",
        ProtobufSerializer(order, client, {"use.deprecated.format": False}),
        ProtobufDeserializer(order, {"use.deprecated.format": False}),
        order(**RECORD),
    )
    assert (back.id, back.qty, back.price) == ("o-1", 3, 9.5), back

    back = _round_trip(
        "json",
        f"{TOPIC}-json",
        JSONSerializer(JSON_SCHEMA, client),
        JSONDeserializer(None, schema_registry_client=client),  # writer's schema by id
        RECORD,
    )
    assert back == RECORD, back

    for subject, kind in (("avro", "AVRO"), ("protobuf", "PROTOBUF"), ("json", "JSON")):
        latest = client.get_latest_version(f"{TOPIC}-{subject}-value")
        assert latest.schema_id is not None, subject
        by_id = client.get_schema(latest.schema_id)
        assert by_id.schema_type == kind, (subject, by_id.schema_type)
        assert by_id.schema_str == latest.schema.schema_str, subject
    print("subjects:", client.get_subjects())


def main() -> int:
    started = time.monotonic()
    apicurio.build()
    print(f"build (or cache check): {time.monotonic() - started:.1f} s")
    with apicurio.running() as registry:
        print(
            f"start until the API answered: {registry.started_in_s:.1f} s, "
            f"RSS {registry.rss_bytes() / 2**20:.0f} MiB"
        )
        check(registry.url)
        print(f"RSS after the checks: {registry.rss_bytes() / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
