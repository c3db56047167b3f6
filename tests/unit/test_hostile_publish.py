"""A hostile message published through the query service (issue 31 point 10), over real
gRPC on loopback with the broker-free driver (memory log, RocksDB stores): refused with
INVALID_ARGUMENT and the limit it passed, on a unary publish and on one line of a publish
stream, whose later lines are still applied."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from processor.app import Application
from processor.client.sow_client import ServiceError, SowClient
from processor.messages.bflat import BflatCodec
from processor.testing import start_memory
from processor.topology.model import SowTopic, Topology

HOSTILE = {
    "NV": [
        b"id=9\x01p=" + b"9" * 5000,
        b"id=9\x01" + b"a=1\x01" * 20_000,
        b"id=9\x01p=-" + b"9" * 19,
    ],
    "XM": [
        b"<O><id>9</id><p>" + b"9" * 5000 + b"</p></O>",
        b"<O><id>9</id>" + b"<a>" * 150 + b"</a>" * 150 + b"</O>",
    ],
    "FX": [b"11=9\x0144=" + b"1" * 4301, b"11=9\x0144=18446744073709551616"],
    "JS": [b'{"id": 9, "d": ' + b'{"a":' * 500 + b"1" + b"}" * 501],
}
VALID = {
    "NV": lambda i: b"id=%d\x01v=ok" % i,
    "XM": lambda i: b"<O><id>%d</id></O>" % i,
    "FX": lambda i: b"11=%d\x0155=ok" % i,
    "JS": lambda i: b'{"id": %d}' % i,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Application, SowClient]]:
    topics = (
        SowTopic("NV", message_type="nvfix", keys=("/id",)),
        SowTopic("XM", message_type="xml", keys=("/O/id",)),
        SowTopic("FX", message_type="fix", keys=("/11",)),
        SowTopic("JS", keys=("/id",)),
        SowTopic("BF", message_type="bflat", keys=("/id",)),
    )
    topology = Topology({topic.name: topic for topic in topics})
    app = start_memory(topology, tmp_path_factory.mktemp("state"))
    client = SowClient(app.grpc_address)
    deadline = time.monotonic() + 30
    while app.readiness() is not None:
        assert time.monotonic() < deadline, app.readiness()
        time.sleep(0.05)
    try:
        yield app, client
    finally:
        client.close()
        app.stop()


CASES = [(topic, payload) for topic, payloads in HOSTILE.items() for payload in payloads]


@pytest.mark.parametrize(
    ("topic", "payload"), CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)]
)
def test_a_unary_publish_of_a_hostile_message_is_an_invalid_argument(
    served: tuple[Application, SowClient], topic: str, payload: bytes
) -> None:
    _, client = served
    with pytest.raises(ServiceError) as refused:
        client.publish(topic, payload)
    assert refused.value.code == "INVALID_ARGUMENT"
    assert "limit" in refused.value.details


@pytest.mark.parametrize("topic", sorted(HOSTILE))
def test_a_hostile_line_of_a_publish_stream_is_refused_alone(
    served: tuple[Application, SowClient], topic: str
) -> None:
    _, client = served
    lines = [VALID[topic](1), *HOSTILE[topic], VALID[topic](2), VALID[topic](3)]
    replies = list(client.publish_stream(topic, iter(lines), batch_size=2))
    assert len(replies) == len(lines)
    codes = [reply.error_code for reply in replies]
    bad = len(HOSTILE[topic])
    assert codes == ["", *["INVALID_ARGUMENT"] * bad, "", ""]
    assert all("limit" in reply.error for reply in replies[1 : 1 + bad])
    records, _, _ = client.query(topic, min_position=[replies[-1].position])
    assert len(records) == 3


def test_a_key_value_without_key_text_is_an_invalid_argument(
    served: tuple[Application, SowClient],
) -> None:
    """A Key field holding an array of binaries (orjson has no form for them) was a
    TypeError escaping the gateway: UNKNOWN, or INTERNAL ending a stream."""
    _, client = served
    payload = BflatCodec().encode_json({"id": [b"\x00", b"\xff"]})
    with pytest.raises(ServiceError) as refused:
        client.publish("BF", payload)
    assert refused.value.code == "INVALID_ARGUMENT"
    assert "no key text" in refused.value.details
    lines = [payload, BflatCodec().encode_json({"id": 1})]
    replies = list(client.publish_stream("BF", iter(lines)))
    assert [reply.error_code for reply in replies] == ["INVALID_ARGUMENT", ""]
