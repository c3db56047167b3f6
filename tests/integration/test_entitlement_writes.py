"""Write entitlements at the gateway (issue 32): a publish outside the caller's write
filter is refused alone in its batch (message by message, columns form, delta), a topic
it may not write is refused whole, and a sow_delete removes only records its write filter
matches, by SowKeys, by filter and by message data. On the memory log."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest

from processor.app import Application
from processor.errors import NotEntitledError
from processor.publish.gateway import Gateway
from processor.publish.requests import PublishColumns
from processor.query.sow import SowQuery
from processor.security import Principal, RequestContext
from processor.security.entitlements import Definitions
from processor.testing import start_memory
from processor.topology.yaml_loader import parse_yaml
from processor.wire import sow_pb2

TOPOLOGY = """\
topics:
  - {name: orders, key: [/id], partitions: 2}
  - {name: audit, key: [/id]}
"""
FX_ONLY = Definitions.parse(
    {
        "principals": {
            "fx": {
                "logon": True,
                "read": [".*"],
                "write": [{"topic": "orders", "filter": "/desk = 'FX'"}],
            }
        }
    },
    "test",
)
FX = RequestContext(Principal("fx"), FX_ONLY.rights_for(Principal("fx")))


@pytest.fixture(scope="module")
def sow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Application, Gateway]]:
    app = start_memory(parse_yaml(TOPOLOGY, "writes.yaml"), tmp_path_factory.mktemp("writes"))
    deadline = time.monotonic() + 30
    while app.readiness() is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert app.log_writer is not None
    try:
        yield app, Gateway(app.topology, app.log_writer, app.replica)
    finally:
        app.stop()


def _ids(app: Application) -> set[int]:
    hub = app.subscriptions
    assert hub is not None
    hub.engine.replica.wait_caught_up(10)
    result = hub.engine.run(SowQuery(topic="orders", batch_size=1000, filter="1=1"))
    return {orjson.loads(e.data)["id"] for batch in result.batches for e in batch}


def _request(id_: int, desk: str, **fields: object) -> sow_pb2.PublishRequest:
    return sow_pb2.PublishRequest(
        topic="orders", data=orjson.dumps({"id": id_, "desk": desk, **fields})
    )


def _settled(app: Application, gateway: Gateway, wanted: set[int]) -> None:
    deadline = time.monotonic() + 10
    while _ids(app) != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ids(app) == wanted


def test_publishes_outside_the_write_filter_are_refused_one_by_one(
    sow: tuple[Application, Gateway],
) -> None:
    app, gateway = sow
    pending = gateway.publish_many([_request(1, "FX"), _request(2, "EQ"), _request(3, "FX")], FX)
    assert pending.wait(10)
    results = pending.results()
    assert isinstance(results[1], NotEntitledError)
    assert "write filter" in str(results[1])
    assert not isinstance(results[0], Exception)
    assert not isinstance(results[2], Exception)

    columns = PublishColumns(
        "orders",
        [orjson.dumps({"id": 4, "desk": "RATES"}), orjson.dumps({"id": 5, "desk": "FX"})],
        False,
        "",
        0,
        0.0,
        "",
        [],
        False,
    )
    pending = gateway.publish_columns(columns, FX)
    assert pending.wait(10)
    first, second = pending.results()
    assert isinstance(first, NotEntitledError)
    assert not isinstance(second, Exception)

    delta = sow_pb2.PublishRequest(
        topic="orders", data=orjson.dumps({"id": 5, "desk": "EQ"}), delta=True
    )
    with pytest.raises(NotEntitledError):
        gateway.publish(delta, 10, FX)
    with pytest.raises(NotEntitledError, match="not entitled to write 'audit'"):
        gateway.publish(sow_pb2.PublishRequest(topic="audit", data=b'{"id": 1}'), 10, FX)
    _settled(app, gateway, {1, 3, 5})


def test_a_delete_removes_only_what_the_write_filter_matches(
    sow: tuple[Application, Gateway],
) -> None:
    app, gateway = sow
    for id_, desk in [(10, "FX"), (11, "EQ"), (12, "FX"), (13, "EQ"), (14, "FX")]:
        gateway.publish(_request(id_, desk), 10)  # an unrestricted publisher
    _settled(app, gateway, {1, 3, 5, 10, 11, 12, 13, 14})
    keys = {
        id_: gateway.sow_key_for(app.topology.topic("orders"), orjson.dumps({"id": id_}))
        for id_ in (10, 11)
    }
    deleted = gateway.delete("orders", list(keys.values()), 10, FX)
    assert deleted.records_deleted == 1  # 11 is EQ: outside the write filter
    deleted = gateway.delete_by_filter("orders", "/id IN (12, 13)", 10, FX)
    assert deleted.records_deleted == 1
    gateway.delete_by_data("orders", orjson.dumps({"id": 14, "desk": "FX"}), 10, False, FX)
    _settled(app, gateway, {1, 3, 5, 11, 13})
