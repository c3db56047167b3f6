"""The direct Kafka publisher (issue 18 item 1): keys, partitions, headers and duplicate
detection exactly as the gateway's, with no gRPC hop; what it publishes is applied."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from processor.client.direct import DirectPublisher
from processor.errors import DecodeError, MissingKeyError
from processor.topology.model import SowTopic, Topology
from tests.integration.harness import namespaced, running_sow

ORDERS = SowTopic(name="ORDERS", keys=("/orderId",), partitions=2)


@pytest.fixture
def topology(unique: str) -> Topology:
    return namespaced(unique, ORDERS)


def test_a_direct_publish_lands_where_the_gateway_puts_it_and_is_applied(
    bootstrap: str, tmp_path: Path, unique: str, topology: Topology
) -> None:
    with (
        running_sow(bootstrap, topology, tmp_path, unique) as (_, client),
        DirectPublisher(bootstrap, topology) as direct,
    ):
        through_grpc = client.publish("ORDERS", orjson.dumps({"orderId": 7, "v": 0}))
        published = direct.publish("ORDERS", orjson.dumps({"orderId": 7, "v": 1}))
        assert published.sow_key == through_grpc.sow_key
        assert published.position[:2] == (
            through_grpc.position.topic,
            through_grpc.position.partition,
        )
        assert published.position[2] > through_grpc.position.offset
        messages = (orjson.dumps({"orderId": i, "v": 2}) for i in range(1000))
        results = list(direct.publish_stream("ORDERS", messages, batch_size=100))
        assert len(results) == 1000
        last = {}
        for result in results:
            assert not isinstance(result, Exception), result
            topic, partition, offset = result.position
            last[(topic, partition)] = max(offset, last.get((topic, partition), -1))
        wait = [{"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]
        records, _, _ = client.query("ORDERS", min_position=wait, timeout=60)
        assert sorted(orjson.loads(r.data)["orderId"] for r in records) == list(range(1000))
        assert {orjson.loads(r.data)["v"] for r in records} == {2}


def test_a_bad_message_is_refused_alone_with_the_gateways_error(
    bootstrap: str, topology: Topology
) -> None:
    with DirectPublisher(bootstrap, topology) as direct:
        results = list(
            direct.publish_stream("ORDERS", [b'{"orderId": 1}', b"{not json", b'{"x": 1}'])
        )
        assert not isinstance(results[0], Exception)
        assert isinstance(results[1], DecodeError)
        assert isinstance(results[2], MissingKeyError)
        with pytest.raises(MissingKeyError, match="/orderId"):
            direct.publish("ORDERS", b'{"x": 1}')


def test_a_message_sent_again_with_its_sequence_is_applied_once(
    bootstrap: str, tmp_path: Path, unique: str, topology: Topology
) -> None:
    """Two publishers under one name resend the same sequences (as a publisher that
    restarted and replays its unacknowledged messages): the second copies are
    discarded by the processor."""
    with running_sow(bootstrap, topology, tmp_path, unique) as (_, client):
        with DirectPublisher(bootstrap, topology, publisher=f"{unique}-p") as first:
            first.publish("ORDERS", orjson.dumps({"orderId": 1, "v": "first"}))
        with DirectPublisher(bootstrap, topology, publisher=f"{unique}-p") as again:
            resent = again.publish("ORDERS", orjson.dumps({"orderId": 1, "v": "again"}))
        wait = [
            {"topic": resent.position[0], "partition": resent.position[1], "offset": o}
            for o in (resent.position[2],)
        ]
        records, _, _ = client.query("ORDERS", min_position=wait, timeout=60)
        assert [orjson.loads(r.data)["v"] for r in records] == ["first"]
