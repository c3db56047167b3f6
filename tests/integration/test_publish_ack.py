"""AMPS's ack types on publish (issue 18 item 2): a ``processed`` acknowledgement arrives
once the message is applied, so a query by its SowKey right after the ack finds it,
through unary gRPC, the gRPC stream, the direct Kafka publisher and the CLI (through the
service, and straight to Kafka beside a `sow serve`); ``persisted`` stays the default."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.cli.guards import record_served
from processor.client.direct import DirectPublisher
from processor.client.sow_client import ServiceError, SowClient
from processor.errors import ConfigurationError, InvalidRequestError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic(name="ORDERS", keys=("/orderId",), partitions=2)


def found(client: SowClient, sow_key: str, version: int) -> bool:
    """Whether the SOW holds ``sow_key`` at ``version``, asked with no wait at all."""
    records, _, _ = client.query("ORDERS", sow_keys=[sow_key])
    return [orjson.loads(r.data)["v"] for r in records] == [version]


def test_a_processed_unary_publish_is_found_right_after_its_ack(
    backend: str, tmp_path: Path, unique: str
) -> None:
    missed: list[int] = []
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):

        def publisher(first: int) -> None:
            for i in range(first, 1000, 8):
                message = orjson.dumps({"orderId": i, "v": 1})
                reply = client.publish("ORDERS", message, ack="processed", timeout=30)
                if not found(client, reply.sow_key, 1):
                    missed.append(i)

        threads = [threading.Thread(target=publisher, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not any(t.is_alive() for t in threads)
    assert missed == [], f"{len(missed)} of 1000 not found right after their ack: {missed[:10]}"


def test_a_processed_stream_batch_is_found_right_after_its_ack(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (_, client):
        messages = (orjson.dumps({"orderId": i, "v": 2}) for i in range(1000))
        replies = client.publish_stream("ORDERS", messages, batch_size=100, ack="processed")
        missed = [r.sow_key for r in replies if not found(client, r.sow_key, 2)]
    assert missed == []


def test_the_cli_publishes_with_processed_acks(backend: str, tmp_path: Path, unique: str) -> None:
    with running_sow(backend, namespaced(unique, ORDERS), tmp_path, unique) as (app, client):
        command = [sys.executable, "-m", "processor.cli", "publish", "ORDERS", "--ack"]
        process = subprocess.Popen(
            [*command, "processed", "--server", app.grpc_address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("".join(f'{{"orderId": {i}, "v": 3}}\n' for i in range(1000)))
        process.stdin.close()
        missed = []
        for line in process.stdout:  # each line is an ack, printed as it arrives
            sow_key = orjson.loads(line)["sow_key"]
            if not found(client, sow_key, 3):
                missed.append(sow_key)
        assert process.wait(60) == 0
        # One message per command: the ack is the command's output.
        for i in range(20):
            done = subprocess.run(
                [
                    *command,
                    "processed",
                    "--server",
                    app.grpc_address,
                    f'{{"orderId": {i}, "v": 4}}',
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            if not found(client, orjson.loads(done.stdout)["sow_key"], 4):
                missed.append(f"unary {i}")
    assert missed == []


def test_an_unknown_ack_type_is_refused_before_anything_is_sent() -> None:
    client: Any = SowClient("127.0.0.1:1")
    try:
        with pytest.raises(InvalidRequestError, match="use one of persisted, processed"):
            client.publish("ORDERS", b"{}", ack="received")
    finally:
        client.close()


def test_a_processed_direct_publish_is_found_right_after_its_ack(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    missed: list[str] = []
    with (
        running_sow(bootstrap, topology, tmp_path, unique) as (app, client),
        DirectPublisher(bootstrap, topology, server=app.grpc_address) as publisher,
    ):
        for i in range(300):
            message = orjson.dumps({"orderId": i, "v": 5})
            published = publisher.publish("ORDERS", message, ack="processed", timeout=30)
            if not found(client, published.sow_key, 5):
                missed.append(f"unary {i}")
        messages = (orjson.dumps({"orderId": i, "v": 6}) for i in range(1000))
        for result in publisher.publish_stream("ORDERS", messages, batch_size=100, ack="processed"):
            assert not isinstance(result, Exception), result
            if not found(client, result.sow_key, 6):
                missed.append(result.sow_key)
    assert missed == []


def test_a_processed_direct_publish_says_when_the_service_cannot_be_asked(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """The message is in the log; the error says so, with the service's own status."""
    topology = namespaced(unique, ORDERS)
    with (
        running_sow(bootstrap, topology, tmp_path, unique) as (_, client),
        DirectPublisher(bootstrap, topology, server="127.0.0.1:1") as publisher,
    ):
        with pytest.raises(ServiceError, match="in the log at") as raised:
            publisher.publish("ORDERS", b'{"orderId": 1, "v": 8}', ack="processed", timeout=5)
        assert raised.value.code == "UNAVAILABLE"
        deadline = time.monotonic() + 30  # and the processor applies it as any other
        while not client.query("ORDERS")[0]:
            assert time.monotonic() < deadline, "the publish never reached the SOW"
            time.sleep(0.05)
        records, _, _ = client.query("ORDERS")
        assert [orjson.loads(r.data) for r in records] == [{"orderId": 1, "v": 8}]


def test_a_processed_direct_publish_needs_the_service_address(bootstrap: str) -> None:
    with DirectPublisher(bootstrap, namespaced("unused", ORDERS)) as publisher:
        with pytest.raises(ConfigurationError, match="server="):
            publisher.publish("ORDERS", b'{"orderId": 1}', ack="processed")
        with pytest.raises(InvalidRequestError, match="not an ack type"):
            publisher.publish("ORDERS", b'{"orderId": 1}', ack="committed")


def test_the_cli_publishes_straight_to_kafka_with_processed_acks(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Beside a `sow serve` (its record in the state directory names its broker, topology
    and gRPC address), `sow publish --ack processed` writes to Kafka itself and asks the
    service only whether each batch is applied."""
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        "topics:\n  - name: ORDERS\n    key: /orderId\n    partitions: 2\n"
        f"    kafka_topic: {unique}.ORDERS\n"
    )
    beside = tmp_path / "beside"
    beside.mkdir()
    topology = namespaced(unique, ORDERS)
    with running_sow(bootstrap, topology, tmp_path / "state", unique) as (app, client):
        record_served(beside, app.grpc_address, None, bootstrap, topology_file)
        command = [sys.executable, "-m", "processor.cli", "publish", "ORDERS"]
        process = subprocess.Popen(
            [*command, "--via", "kafka", "--ack", "processed"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "SOW_STATE_DIR": str(beside)},
        )
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("".join(f'{{"orderId": {i}, "v": 7}}\n' for i in range(1000)))
        process.stdin.close()
        missed = [
            key
            for key in (orjson.loads(line)["sow_key"] for line in process.stdout)
            if not found(client, key, 7)
        ]
        assert process.wait(60) == 0
    assert missed == []
