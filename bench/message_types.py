"""Per message type: ingest into the SOW on Apache Kafka, query scans, and raw decoding.

The same logical orders (``order(i)``: id, client, symbol, region, price, quantity, side)
in each message type: json, avro, fix (numeric tags), nvfix, xml (under an ``<order>``
root, so its paths are ``/order/...``), bson, bflat, msgpack, protobuf (a proto3 message
of the same fields) and composite-local (one msgpack part, ``/0/...``); and, named with
``--types``, avro-sr, protobuf-sr and json-sr: the same avro, protobuf and json orders in
the Schema Registry wire format (frame, schema id), their schemas served by the
Schema Registry REST subset of ``tests/schema_registry.py`` on this machine and read
through confluent-kafka's client (each id fetched once, then cached). For each type,
in one run on one broker (the embedded Apache Kafka unless ``KAFKA_BOOTSTRAP_SERVERS``
names one):

* **ingest**: N messages over K keys, keyed by SowKey as kafka-sow publishers write them,
  produced into a fresh input topic, then applied by the real processor (decode, SowKey,
  changelog envelope, Kafka transaction, RocksDB): messages applied per second from the
  first batch, and the wall time from building the processor to the last record applied;
* **scan**: R records of the type in the read replica (through its changelog apply
  path, no broker), then a filter over all of them (``QueryEngine.run``): the first scan
  decodes every record into memo columns (what the type costs), the later ones read the
  columns;
* **decode**: microseconds to decode one message (``codec.decode``).

An untimed json ingest of 20,000 messages runs first, so no type pays the fresh broker's
warm-up (its coordinators, its page cache) for the others.

Run: ``python bench/message_types.py [--messages 100000] [--keys 10000] [--records 200000]
[--types json,avro,...] [--json-out bench/results/kafka/message_types.json]``. Progress on
stderr, the Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
import timeit
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Producer

from processor import changelog
from processor.app import build_processor, topic_specs
from processor.config import Settings
from processor.keys import key_function, partition_for
from processor.log.broker import start_broker
from processor.log.broker.maven import kafka_version
from processor.log.kafka.settings import ensure_topics
from processor.log.memory.broker import MemoryRecord
from processor.messages import Codec, codec_for
from processor.query.sow import QueryEngine, SowQuery
from processor.replica.replica import Replica
from processor.topology.model import MessagePart, SchemaRegistry, SowTopic, Topology

TYPES = ("json", "avro", "fix", "nvfix", "xml", "bson", "bflat", "msgpack", "protobuf",
         "composite-local")  # fmt: skip
PROTO = """
syntax = "proto3";
package bench;
message Order {
  int64 orderId = 1;
  string clientId = 2;
  string symbol = 3;
  string region = 4;
  double price = 5;
  int64 qty = 6;
  string side = 7;
}
"""
REGIONS = ("EU", "US", "APAC", "LATAM")
#: FIX tags for the order's fields (numeric tags as FIX has them).
FIX_TAGS = {"orderId": "11", "clientId": "1", "symbol": "55", "region": "207", "price": "44",
            "qty": "38", "side": "54"}  # fmt: skip
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "orderId", "type": "long"},
        {"name": "clientId", "type": "string"},
        {"name": "symbol", "type": "string"},
        {"name": "region", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "qty", "type": "long"},
        {"name": "side", "type": "string"},
    ],
}


def progress(text: str) -> None:
    print(f"[message_types {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def order(i: int) -> dict[str, Any]:
    return {
        "orderId": i,
        "clientId": f"C{i % 100_000}",
        "symbol": f"SYM{i % 500}",
        "region": REGIONS[i % 4],
        "price": (i * 7919 % 100_000) / 100 + 0.5,
        "qty": i % 1000,
        "side": "buy" if i % 2 else "sell",
    }


def shaped(message_type: str, record: dict[str, Any]) -> dict[str, Any]:
    """The record as the type holds it (fix: numeric tags; xml: under a root element)."""
    if message_type == "fix":
        return {FIX_TAGS[name]: value for name, value in record.items()}
    if message_type == "xml":
        return {"order": record}
    if message_type == "composite-local":
        return {"0": record}
    return record


def path(message_type: str, field: str) -> str:
    if message_type == "fix":
        return f"/{FIX_TAGS[field]}"
    if message_type == "xml":
        return f"/order/{field}"
    if message_type == "composite-local":
        return f"/0/{field}"
    return f"/{field}"


#: The Schema Registry of the *-sr types (``start_registry``): its URL.
REGISTRY: dict[str, str] = {}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "orderId": {"type": "integer"},
        "clientId": {"type": "string"},
        "symbol": {"type": "string"},
        "region": {"type": "string"},
        "price": {"type": "number"},
        "qty": {"type": "integer"},
        "side": {"type": "string"},
    },
    "required": ["orderId", "symbol"],
}


def start_registry(schema: Path) -> Any:
    """The tests' Schema Registry on a free port, the orders' schemas registered under
    ``bench-<type>-value``."""
    import base64

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from processor.messages.protobuf import _descriptor_set
    from tests.schema_registry import SchemaRegistryServer

    server = SchemaRegistryServer().start()
    proto = _descriptor_set(str(schema.with_name("order.proto"))).file[0].SerializeToString()
    server.register("bench-avro-sr-value", json.dumps(AVRO_SCHEMA))
    server.register("bench-protobuf-sr-value", base64.b64encode(proto).decode(), "PROTOBUF")
    server.register("bench-json-sr-value", json.dumps(JSON_SCHEMA), "JSON")
    REGISTRY["url"] = server.url
    return server


def topic_for(message_type: str, name: str, schema: Path, **fields: Any) -> SowTopic:
    """The topic of the type (``schema``: the .avsc, beside it order.proto)."""
    fmt: dict[str, Any] = {}
    if message_type.endswith("-sr"):
        fmt["schema_registry"] = SchemaRegistry(REGISTRY["url"], f"bench-{message_type}-value")
    elif message_type == "avro":
        fmt["schema"] = str(schema)
    elif message_type == "protobuf":
        fmt["schema"], fmt["proto_type"] = str(schema.with_name("order.proto")), "bench.Order"
    elif message_type == "composite-local":
        fmt["parts"] = (MessagePart("msgpack"),)
    return SowTopic(
        name, message_type=message_type, keys=(path(message_type, "orderId"),), **fmt, **fields
    )


def ingest(
    message_type: str, bootstrap: str, schema: Path, messages: int, keys: int, partitions: int
) -> dict[str, Any]:
    """Produce ``messages`` in the type, apply them with the real processor, time it."""
    name = f"mt-{message_type}-{uuid.uuid4().hex[:6]}"
    topic = topic_for(message_type, "BENCH", schema, kafka_topic=name, partitions=partitions)
    topology = Topology({"BENCH": topic})
    codec = codec_for(topic)
    key_of = key_function(topic)
    assert key_of is not None
    state_dir = Path(tempfile.mkdtemp(prefix=f"mt-{message_type}-"))
    settings = Settings.from_env(state_dir=state_dir, group_id=f"{name}-g", instance_id="bench")
    ensure_topics(bootstrap, [*topic_specs(topology, settings.dead_letter_topic)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    progress(f"{message_type}: producing {messages:,} messages over {keys:,} keys into {name}")
    for i in range(messages):
        value = codec.encode_json(shaped(message_type, order(i % keys) | {"qty": i % 1000}))
        sow_key = key_of(codec.decode(value)).encode()
        while True:
            try:
                producer.produce(name, value, sow_key, partition_for(sow_key, partitions))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    started = time.perf_counter()
    engine = build_processor(settings, bootstrap, topology)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while engine.applied < messages:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{message_type}: the processor stopped at {engine.applied:,}")
        time.sleep(0.005)
    finished = time.perf_counter()
    assert engine.first_batch_at is not None
    steady = messages / (finished - engine.first_batch_at)
    wall = finished - started
    engine.stop()
    thread.join(30)
    progress(f"{message_type}: {steady:,.0f} msg/s applied; {wall:.1f}s from build to done")
    return {"applied_per_s": steady, "wall_s": wall, "dead_lettered": engine.dead_lettered}


def scan(message_type: str, schema: Path, records: int) -> dict[str, Any]:
    """Fill a replica with ``records`` of the type, then time a cold and a warm scan."""
    topic = topic_for(message_type, "ORDERS", schema, partitions=2)
    topology = Topology({"ORDERS": topic})
    replica = Replica(topology, tail=cast(Any, None))
    codec = codec_for(topic)
    key_of = key_function(topic)
    assert key_of is not None
    writers = [changelog.EnvelopeWriter("ORDERS", message_type, "ORDERS", p) for p in range(2)]
    offsets = [0, 0]
    batch: list[Any] = []
    for i in range(records):
        value = codec.encode_json(shaped(message_type, order(i)))
        sow_key = key_of(codec.decode(value)).encode()
        partition = partition_for(sow_key, 2)
        envelope = writers[partition].encode(i, sow_key, value, 1, 1)
        batch.append(
            MemoryRecord(
                topic.changelog_topic, partition, offsets[partition], sow_key, envelope, None, 0
            )
        )
        offsets[partition] += 1
        if len(batch) == 10_000:
            replica.apply(batch)
            batch = []
    replica.apply(batch)
    engine = QueryEngine(topology, replica)
    text = f"{path(message_type, 'region')} = 'EU' AND {path(message_type, 'qty')} > 990"
    started = time.perf_counter()
    first = engine.run(SowQuery("ORDERS", filter=text))
    cold = time.perf_counter() - started
    warm = min(_timed(lambda: engine.run(SowQuery("ORDERS", filter=text))) for _ in range(3))
    matched = first.stats.matches if first.stats else 0
    progress(
        f"{message_type}: scan of {records:,}: first {records / cold:,.0f} rec/s, "
        f"then {records / warm:,.0f} rec/s ({matched} matches)"
    )
    return {"first_scan_per_s": records / cold, "warm_scan_per_s": records / warm,
            "matches": matched}  # fmt: skip


def _timed(function: Any) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def decode_us(codec: Codec, message_type: str) -> float:
    value = codec.encode_json(shaped(message_type, order(12345)))
    n = 50_000
    return timeit.timeit(lambda: codec.decode(value), number=n) / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--rounds", type=int, default=1, help="ingest rounds per type (median)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    work = Path(tempfile.mkdtemp(prefix="message-types-"))
    schema = work / "order.avsc"
    schema.write_text(json.dumps(AVRO_SCHEMA))
    schema.with_name("order.proto").write_text(PROTO)
    registry = start_registry(schema) if any(t.endswith("-sr") for t in types) else None
    progress("starting the broker")
    broker = start_broker(embedded="kafka")
    results: dict[str, Any] = {"args": vars(args) | {"json_out": str(args.json_out)}, "types": {}}
    try:
        progress(f"broker at {broker.bootstrap_servers}")
        # The first processor on a fresh broker pays its warm-up (group coordinator,
        # transaction coordinator, page cache): an untimed json run takes it for all.
        ingest("json", broker.bootstrap_servers, schema, 20_000, 1_000, args.partitions)
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in types}
        # Rounds interleave the types, so a noisy minute of the shared machine falls on
        # every type alike; each type's median round is its figure.
        for done in range(args.rounds):
            progress(f"round {done + 1} of {args.rounds}")
            for message_type in types:
                run = ingest(
                    message_type,
                    broker.bootstrap_servers,
                    schema,
                    args.messages,
                    args.keys,
                    args.partitions,
                )
                runs[message_type].append(run)
        for message_type in types:
            codec = codec_for(topic_for(message_type, "X", schema))
            rounds = sorted(runs[message_type], key=lambda run: run["applied_per_s"])
            row = {"decode_us": decode_us(codec, message_type)} | rounds[len(rounds) // 2]
            row["rounds_applied_per_s"] = [run["applied_per_s"] for run in runs[message_type]]
            row |= scan(message_type, schema, args.records)
            results["types"][message_type] = row
        results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        results["broker"] = (
            f"embedded Apache Kafka {kafka_version()} (KRaft, one node) at "
            f"{broker.bootstrap_servers}"
        )
    finally:
        broker.stop()
        if registry is not None:
            registry.stop()
    base = results["types"].get("json")
    print(
        "| type | decode µs | ingest msg/s | vs json | wall s | first scan rec/s | vs json "
        "| warm scan rec/s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for message_type, row in results["types"].items():
        ingest_ratio = row["applied_per_s"] / base["applied_per_s"] if base else float("nan")
        scan_ratio = row["first_scan_per_s"] / base["first_scan_per_s"] if base else float("nan")
        row["ingest_vs_json"], row["first_scan_vs_json"] = ingest_ratio, scan_ratio
        print(
            f"| {message_type} | {row['decode_us']:.2f} | {row['applied_per_s']:,.0f} | "
            f"{ingest_ratio:.2f}x | {row['wall_s']:.1f} | {row['first_scan_per_s']:,.0f} | "
            f"{scan_ratio:.2f}x | {row['warm_scan_per_s']:,.0f} |"
        )
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
