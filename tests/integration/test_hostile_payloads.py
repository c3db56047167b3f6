"""Hostile payloads from any Kafka producer (issue 31 point 10), on the real broker: each
payload the trials found, written straight to an input topic, is dead-lettered as
``undecodable`` at once, the next valid message is applied, the process's memory stays
flat, and every query of the topic (plain, filtered, text form) is still answered; ``sow
publish --via kafka`` refuses such a line with one line of error and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from processor.changelog.commands import DELTA_HEADER, DELTA_NATIVE, DELTA_TEXT
from processor.cli.guards import record_served
from processor.expr import extract
from processor.keys import parse_path
from processor.messages import codec_for
from processor.messages.bflat import BflatCodec
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow
from tests.integration.test_dead_letters import _header

TOPICS = (
    SowTopic("BF", message_type="bflat", keys=("/id",)),
    SowTopic("NV", message_type="nvfix", keys=("/id",)),
    SowTopic("FX", message_type="fix", keys=("/11",)),
    SowTopic("XM", message_type="xml", keys=("/O/id",)),
    SowTopic("JS", message_type="json", keys=("/id",)),
    SowTopic("BS", message_type="bson", keys=("/id",)),
)
#: A valid message of each topic with the given id, and a filter on it.
VALID = {
    "BF": (lambda i: BflatCodec().encode_json({"id": i, "v": "ok"}), "/id > 0"),
    "NV": (lambda i: b"id=%d\x01v=ok\x01" % i, "/id > 0"),
    "FX": (lambda i: b"11=%d\x0155=ok\x01" % i, "/11 > 0"),
    "XM": (lambda i: b"<O><id>%d</id><v>ok</v></O>" % i, "/O/id > 0"),
    "JS": (lambda i: b'{"id": %d, "v": "ok"}' % i, "/id > 0"),
    "BS": (lambda i: bytes(bson.encode({"id": i, "v": "ok"})), "/id > 0"),
}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"z": 1}
    for _ in range(depth):
        value = {"x": value}
    return value


def hostile() -> list[tuple[str, bytes, list[tuple[str, bytes]]]]:
    """(topic, payload, headers) of every payload of the issue's trials (each under the
    broker's 1 MB message limit)."""
    deep_json = b'{"id": 9, "d": ' + b'{"a":' * 500 + b"1" + b"}" * 500 + b"}"
    return [
        ("BF", bytes.fromhex("1a 69 64 33 81 6e ff ff ff ff ff ff ff ff 7f"), []),
        ("BF", bytes.fromhex("1a 69 64 33 49 6e") + b"\x80" * 9 + b"\x02", []),  # 2**64
        ("NV", b"id=1\x01" + b"a=1\x01" * 150_000, []),
        ("NV", b"id=1\x01p=18446744073709551616\x01", []),
        ("NV", b"id=1\x01p=" + b"9" * 5000 + b"\x01", []),
        ("FX", b"11=1\x01" + b"58=x\x01" * 100_000, []),
        ("FX", b"11=1\x0144=" + b"1" * 4301 + b"\x01", []),
        ("XM", b"<O><id>1</id><p>" + b"9" * 5000 + b"</p></O>", []),
        ("XM", b"<O><id>1</id><p>-9223372036854775809</p></O>", []),
        ("XM", b"<O " + b" ".join(b'a%d="1"' % i for i in range(80_000)) + b"><id>1</id></O>", []),
        ("XM", b"<O><id>1</id>" + b"<a>" * 200 + b"</a>" * 200 + b"</O>", []),
        ("JS", deep_json, []),
        ("JS", b'{"id": ' + b'{"a":' * 400 + b"1" + b"}" * 400 + b"}", []),  # a deep key
        ("JS", deep_json, [(DELTA_HEADER, DELTA_NATIVE)]),
        ("BS", bytes(bson.encode({"id": 1, "d": _nested(300)})), []),
        ("BS", bytes(bson.encode({"id": 1, "d": _nested(400)})), [(DELTA_HEADER, DELTA_NATIVE)]),
        (
            "BS",
            b'{"id": 1, "d": ' + b'{"a":' * 1000 + b"1" + b"}" * 1001,
            [(DELTA_HEADER, DELTA_TEXT)],
        ),
    ]


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _tail(bootstrap: str, topic: str) -> Any:
    """A consumer of the committed records of a one-partition topic, from its start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _queries_answered(client: Any, topic: SowTopic, wanted: set[int], position: Any) -> None:
    """Plain, filtered and text-form queries of ``topic`` hold the ``wanted`` ids."""
    condition = VALID[topic.name][1]
    for options in ({}, {"filter": condition}, {"text_form": True}):
        records, _, _ = client.query(topic.name, min_position=[position], **options)
        assert len(records) == len(wanted), (topic.name, options, records)
    records, _, _ = client.query(topic.name, filter=condition)
    codec = codec_for(topic)
    ids = {int(extract(codec.decode(r.data), parse_path(condition.split()[0]))) for r in records}
    assert ids == wanted, (topic.name, ids)


def test_hostile_payloads_are_dead_lettered_and_the_topics_still_served(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, *TOPICS)
    payloads = hostile()
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        for name, (valid, _) in VALID.items():  # every topic holds a record already
            client.publish(name, valid(1), ack="processed")
        rss = _rss_mb()
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        dead_letters = _tail(bootstrap, f"{unique}.dead-letter")
        dead: list[Any] = []
        try:
            for at, (name, payload, headers) in enumerate(payloads):
                started = time.monotonic()
                producer.produce(
                    topology.topic(name).kafka_topic, payload, b"k%d" % at, headers=headers
                )
                assert producer.flush(30) == 0
                while len(dead) <= at and time.monotonic() - started < 30:
                    message = dead_letters.poll(0.05)
                    if message is not None and not message.error():
                        dead.append(message)
                elapsed = time.monotonic() - started
                assert len(dead) == at + 1, f"payload {at} ({name}) was not dead-lettered"
                reason = _header(dead[at], "sow.error.reason")
                assert reason == "undecodable", (at, _header(dead[at], "sow.error.message"))
                assert elapsed < 1.0, f"payload {at} ({name}) took {elapsed:.2f} s"
        finally:
            dead_letters.close()
        # The next valid message of each topic, after the hostile ones in its partition.
        positions = [
            client.publish(name, valid(2), ack="processed").position
            for name, (valid, _) in VALID.items()
        ]
        growth = _rss_mb() - rss
        assert growth < 300, f"the process grew {growth:.0f} MB"
        for (name, _), position in zip(VALID.items(), positions, strict=True):
            _queries_answered(client, topology.topic(name), {1, 2}, position)
        assert app.processor is not None
        assert app.processor.dead_lettered == len(payloads)
        assert not app.errors


@pytest.mark.parametrize(
    "line",
    [b"id=1\x01p=" + b"9" * 5000, b"id=1\x01" + b"a=1\x01" * 20_000],
    ids=["a 5000-digit number", "20000 repeats"],
)
def test_sow_publish_via_kafka_refuses_a_hostile_line_in_one_line(
    bootstrap: str, tmp_path: Path, unique: str, line: bytes
) -> None:
    """Straight to Kafka, the CLI decodes each line itself: a hostile one is a one-line
    error and a non-zero exit, not a traceback."""
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        "topics:\n  - name: NV\n    message_type: nvfix\n    key: /id\n"
        f"    kafka_topic: {unique}.NV\n"
    )
    beside = tmp_path / "beside"
    beside.mkdir()
    topology = namespaced(unique, TOPICS[1])
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, _):
        record_served(beside, app.grpc_address, None, bootstrap, topology_file)
        process = subprocess.run(
            [sys.executable, "-m", "processor.cli", "publish", "NV", "--via", "kafka"],
            input=line.decode("latin-1") + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "SOW_STATE_DIR": str(beside)},
            check=False,
        )
    assert process.returncode != 0
    assert "Traceback" not in process.stderr
    assert len(process.stderr.strip().splitlines()) == 1, process.stderr
    assert "limit" in process.stderr
