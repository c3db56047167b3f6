"""Publishing through the gateway: unary and streaming, size limits, concurrency, the CLI."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from processor.client.sow_client import ServiceError
from processor.topology.model import SowTopic
from tests.integration.harness import namespaced, running_sow

#: Also run on the fallback Tansu broker in CI (pyproject.toml's smoke marker).
pytestmark = pytest.mark.smoke


def orders(unique: str) -> object:
    return namespaced(unique, SowTopic(name="ORDERS", keys=("/orderId",), partitions=2))


def count(client: object, positions: dict[tuple[str, int], int]) -> int:
    from processor.wire import sow_pb2

    wait = [sow_pb2.Position(topic=t, partition=p, offset=o) for (t, p), o in positions.items()]
    records, _, _ = client.query("ORDERS", min_position=wait)  # type: ignore[attr-defined]
    return len(records)


def test_stream_acks_every_message_in_order_and_refuses_bad_ones_alone(
    backend: str, tmp_path: Path, unique: str
) -> None:
    messages = [orjson.dumps({"orderId": i, "n": i}) for i in range(3000)]
    messages[1000] = b'{"orderId": '  # not JSON
    messages[2000] = orjson.dumps({"orderId": 2000, "blob": "x" * 1_500_000})  # too large
    messages[2500] = b'{"symbol": "no key"}'
    with running_sow(backend, orders(unique), tmp_path, unique) as (_, client):
        replies = list(client.publish_stream("ORDERS", iter(messages), batch_size=128, window=4))
        assert len(replies) == 3000
        refused = {i: r for i, r in enumerate(replies) if r.error_code}
        assert sorted(refused) == [1000, 2000, 2500]
        assert all(r.error_code == "INVALID_ARGUMENT" for r in refused.values())
        assert "not valid JSON" in refused[1000].error
        assert "1,500,0" in refused[2000].error
        assert "accepts at most" in refused[2000].error
        assert "/orderId" in refused[2500].error
        vector: dict[tuple[str, int], int] = {}
        for reply in replies:
            if not reply.error_code:
                p = reply.position
                assert p.offset > vector.get((p.topic, p.partition), -1)  # in order
                vector[(p.topic, p.partition)] = p.offset
        assert count(client, vector) == 2997


def test_stream_takes_both_batch_forms_and_refuses_a_batch_that_mixes_them(
    backend: str, tmp_path: Path, unique: str
) -> None:
    from processor.wire import sow_pb2

    def one(i: int) -> bytes:
        return orjson.dumps({"orderId": i})

    batches = [
        sow_pb2.PublishBatch(  # the form of one PublishRequest per message
            batch_id=1,
            messages=[sow_pb2.PublishRequest(topic="ORDERS", data=one(i)) for i in range(3)],
        ),
        sow_pb2.PublishBatch(  # the columnar form, with duplicate detection
            batch_id=2,
            topic="ORDERS",
            data=[one(i) for i in range(3, 6)],
            publisher="p",
            first_sequence=1,
        ),
        sow_pb2.PublishBatch(  # both forms: refused whole
            batch_id=3,
            topic="ORDERS",
            data=[one(6)],
            messages=[sow_pb2.PublishRequest(topic="ORDERS", data=one(7))],
        ),
        sow_pb2.PublishBatch(batch_id=4, topic="NOPE", data=[one(8), one(9)]),
        sow_pb2.PublishBatch(  # a publisher with no sequence: the options are wrong
            batch_id=5, topic="ORDERS", data=[one(10)], publisher="p"
        ),
    ]
    with running_sow(backend, orders(unique), tmp_path, unique) as (_, client):
        acks = list(client._stub.PublishStream(iter(batches), timeout=30))
        assert [a.batch_id for a in acks] == [1, 2, 3, 4, 5]
        for ack in acks[:2]:
            assert not ack.refused
            assert len(ack.offsets) == 3
            assert ack.log_topic.endswith("ORDERS")
            assert not ack.log_topics
        assert [r.index for r in acks[2].refused] == [0, 1]
        assert "both messages and columns" in acks[2].refused[0].error
        assert [r.error_code for r in acks[3].refused] == ["NOT_FOUND", "NOT_FOUND"]
        assert "sequence number above 0" in acks[4].refused[0].error
        wait = [
            sow_pb2.Position(topic=acks[1].log_topic, partition=p, offset=o)
            for p, o in zip(acks[1].partitions, acks[1].offsets, strict=True)
        ]
        records, _, _ = client.query("ORDERS", min_position=wait)
        assert sorted(orjson.loads(r.data)["orderId"] for r in records) == list(range(6))


def test_a_message_over_the_limit_is_refused_at_publish(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, orders(unique), tmp_path, unique) as (_, client):
        big = orjson.dumps({"orderId": 1, "blob": "x" * 1_500_000})
        with pytest.raises(ServiceError) as caught:
            client.publish("ORDERS", big)
        assert caught.value.code == "INVALID_ARGUMENT"
        assert "accepts at most" in caught.value.details
        # Just under the limit goes through and is applied.
        limit = 999_000
        fits = orjson.dumps({"orderId": 2, "blob": "y" * (limit - 40)})
        position = client.publish("ORDERS", fits).position
        records, _, _ = client.query("ORDERS", min_position=[position])
        assert [orjson.loads(r.data)["orderId"] for r in records] == [2]


def test_concurrent_unary_publishes_all_land_and_apply(
    backend: str, tmp_path: Path, unique: str
) -> None:
    with running_sow(backend, orders(unique), tmp_path, unique) as (_, client):
        positions: list[tuple[str, int, int]] = []
        lock = threading.Lock()

        def publisher(k: int) -> None:
            for i in range(50):
                p = client.publish("ORDERS", orjson.dumps({"orderId": k * 100 + i})).position
                with lock:
                    positions.append((p.topic, p.partition, p.offset))

        threads = [threading.Thread(target=publisher, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(positions)) == 400
        vector: dict[tuple[str, int], int] = {}
        for topic, partition, offset in positions:
            vector[(topic, partition)] = max(offset, vector.get((topic, partition), -1))
        assert count(client, vector) == 400


def test_cli_publish_streams_stdin_and_waits_until_applied(
    backend: str, tmp_path: Path, unique: str
) -> None:
    lines = "\n".join(orjson.dumps({"orderId": i % 700, "n": i}).decode() for i in range(2000))
    lines += '\n{"orderId": \n'  # one bad line at the end
    with running_sow(backend, orders(unique), tmp_path, unique) as (app, client):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "publish",
                "ORDERS",
                "--wait",
                "--server",
                app.grpc_address,
            ],
            check=False,
            input=lines,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr  # one message was refused
        assert "message 2001 refused" in done.stderr
        out = [orjson.loads(line) for line in done.stdout.splitlines()]
        summary = out[-1]
        assert summary["published"] == 2000
        assert summary["refused"] == 1
        assert len(out) == 2001
        # The summary's positions are what a reader passes as min_position.
        assert set(summary["applied"]) <= {r["position"] for r in out[:-1]}
        records, _, _ = client.query("ORDERS")
        assert len(records) == 700
        latest = {orjson.loads(r.data)["orderId"]: orjson.loads(r.data)["n"] for r in records}
        assert latest[0] == 1400  # the last message for key 0 won


def test_a_resent_publish_is_applied_once_also_after_a_restart(
    backend: str, tmp_path: Path, unique: str
) -> None:
    """What a client does after a timeout: send the same (publisher, sequence) again."""
    import grpc

    from processor.wire import sow_pb2, sow_pb2_grpc

    def send(address: str, sequence: int, value: str) -> object:
        with grpc.insecure_channel(address) as channel:
            stub = sow_pb2_grpc.SowStub(channel)  # type: ignore[no-untyped-call]
            request = sow_pb2.PublishRequest(
                topic="ORDERS",
                data=orjson.dumps({"orderId": 1, "v": value}),
                publisher="desk-7",
                sequence=sequence,
            )
            return stub.Publish(request, timeout=30).position

    def value(client: object, position: object) -> str:
        records, _, _ = client.query("ORDERS", min_position=[position])  # type: ignore[attr-defined]
        return str(orjson.loads(records[0].data)["v"])

    topology = orders(unique)
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        assert value(client, send(app.grpc_address, 1, "first")) == "first"
        assert value(client, send(app.grpc_address, 1, "resent")) == "first"
        assert value(client, send(app.grpc_address, 2, "second")) == "second"
    with running_sow(backend, topology, tmp_path, unique) as (app, client):
        assert value(client, send(app.grpc_address, 2, "resent after restart")) == "second"
        assert value(client, send(app.grpc_address, 3, "third")) == "third"
