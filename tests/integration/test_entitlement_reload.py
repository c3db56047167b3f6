"""Entitlements reloaded without a restart (issue 32): a client whose rights shrink
loses, on its open subscription, the records it may no longer see (OOF, never their
body), sees nothing outside its new rights afterwards, and a client whose read right is
taken away has its subscription ended with PERMISSION_DENIED. Over TLS with password
logon, on the memory log."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson

from processor.wire import sow_pb2, sow_pb2_grpc
from tests.integration.grpc_auth_helpers import basic, channel, make_secrets, secured_service

WIDE = """\
principals:
  alice: {logon: true, read: [{topic: orders}], write: [{topic: orders}]}
"""
NARROW = """\
principals:
  alice: {logon: true, read: [{topic: orders, filter: "/desk = 'FX'"}], write: [{topic: orders}]}
"""
NONE = """\
principals:
  alice: {logon: true, write: [{topic: orders}]}
"""


def _rewrite(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = time.time_ns() + 2_000_000_000  # a change the watcher cannot miss
    os.utime(path, ns=(stamp, stamp))


def _reader(call: Any) -> tuple[queue.Queue[Any], threading.Thread]:
    messages: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for message in call:
                messages.put(message)
        except grpc.RpcError as exc:
            messages.put(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return messages, thread


def _drain(messages: queue.Queue[Any], until: float) -> Iterator[Any]:
    while time.monotonic() < until:
        try:
            yield messages.get(timeout=0.1)
        except queue.Empty:
            continue


def _changes(message: Any) -> list[Any]:
    part = message.WhichOneof("part")
    if part == "change":
        return [message.change]
    if part == "changes":
        return list(message.changes.changes)
    return []


def test_shrunk_rights_turn_into_oofs_and_revoked_ones_end_the_subscription(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path)
    _rewrite(secrets.entitlements, WIDE)
    auth = basic("alice", "alice-pw")
    with secured_service(secrets, tmp_path / "state") as app:
        stub = sow_pb2_grpc.SowStub(channel(app.grpc_address, secrets))
        subscriptions = sow_pb2_grpc.SubscriptionsStub(channel(app.grpc_address, secrets))
        for n, desk in enumerate(["FX", "EQ", "FX", "RATES"]):
            message = {"orderId": n, "desk": desk}
            stub.Publish(
                sow_pb2.PublishRequest(
                    topic="orders", data=orjson.dumps(message), ack=sow_pb2.PROCESSED
                ),
                metadata=auth,
                timeout=10,
            )
        call = subscriptions.SowAndSubscribe(
            sow_pb2.SubscribeRequest(topic="orders", sub_id="s", oof=True),
            metadata=auth,
            timeout=60,
        )
        messages, _ = _reader(call)
        held: set[int] = set()
        for message in _drain(messages, time.monotonic() + 10):
            assert not isinstance(message, Exception), message
            if message.WhichOneof("part") == "batch":
                held |= {orjson.loads(r.data)["orderId"] for r in message.batch.records}
            if message.WhichOneof("part") == "group_end":
                break
        assert held == {0, 1, 2, 3}

        _rewrite(secrets.entitlements, NARROW)
        left: set[int] = set()
        for message in _drain(messages, time.monotonic() + 15):
            assert not isinstance(message, Exception), message
            for change in _changes(message):
                assert change.kind == sow_pb2.CHANGE_OOF, change
                body = orjson.loads(change.record.data)
                left.add(body["orderId"])
                assert not change.HasField("current")
            if left == {1, 3}:
                break
        assert left == {1, 3}

        # After the reload: an EQ record stays out of sight, an FX one comes through.
        for n, desk in [(4, "EQ"), (5, "FX")]:
            stub.Publish(
                sow_pb2.PublishRequest(
                    topic="orders", data=orjson.dumps({"orderId": n, "desk": desk})
                ),
                metadata=auth,
                timeout=10,
            )
        seen: list[int] = []
        for message in _drain(messages, time.monotonic() + 10):
            assert not isinstance(message, Exception), message
            seen += [orjson.loads(c.record.data)["orderId"] for c in _changes(message)]
            if 5 in seen:
                break
        assert seen == [5]

        _rewrite(secrets.entitlements, NONE)
        ended = None
        for message in _drain(messages, time.monotonic() + 15):
            if isinstance(message, grpc.RpcError):
                ended = message
                break
            assert not _changes(message), message
        assert ended is not None
        assert ended.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not entitled to read 'orders'" in (ended.details() or "")


QUEUE_WIDE = """\
principals:
  alice:
    logon: true
    read: [{topic: work}]
    write: [{topic: jobs}]
    acknowledge: [{topic: work}]
"""
QUEUE_NARROW = QUEUE_WIDE.replace(
    "read: [{topic: work}]", "read: [{topic: work, filter: '/n < 2'}]"
)


def test_a_queue_consumer_whose_rights_change_is_ended_and_its_leases_return(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path)
    _rewrite(secrets.entitlements, QUEUE_WIDE)
    auth = basic("alice", "alice-pw")
    with secured_service(secrets, tmp_path / "state") as app:
        stub = sow_pb2_grpc.SowStub(channel(app.grpc_address, secrets))
        queues = sow_pb2_grpc.QueuesStub(channel(app.grpc_address, secrets))
        done = threading.Event()

        def commands() -> Iterator[Any]:
            subscribe = sow_pb2.QueueSubscribe(queue="work", sub_id="c")
            yield sow_pb2.QueueCommand(subscribe=subscribe)
            done.wait(60)

        call = queues.Consume(commands(), metadata=auth, timeout=60)
        messages, _ = _reader(call)
        for n in (1, 2):
            stub.Publish(
                sow_pb2.PublishRequest(topic="jobs", data=orjson.dumps({"n": n})),
                metadata=auth,
                timeout=10,
            )
        leased = set()
        for message in _drain(messages, time.monotonic() + 15):
            assert not isinstance(message, Exception), message
            if message.WhichOneof("part") == "lease":
                leased.add(orjson.loads(message.lease.record.data)["n"])
            if leased:
                break
        assert leased == {1}  # held, not acknowledged (a backlog of one)

        _rewrite(secrets.entitlements, QUEUE_NARROW)
        ended = None
        for message in _drain(messages, time.monotonic() + 15):
            if isinstance(message, grpc.RpcError):
                ended = message
                break
        done.set()
        assert ended is not None
        assert ended.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "subscribe again" in (ended.details() or "")

        # Subscribed again under the new rights: the lease of 1 it held came back to the
        # queue, and 2 is outside the new entitlement filter.
        again = threading.Event()

        def more() -> Iterator[Any]:
            yield sow_pb2.QueueCommand(subscribe=sow_pb2.QueueSubscribe(queue="work", sub_id="d"))
            again.wait(60)

        messages, _ = _reader(queues.Consume(more(), metadata=auth, timeout=60))
        seen = []
        for message in _drain(messages, time.monotonic() + 20):
            assert not isinstance(message, Exception), message
            if message.WhichOneof("part") == "lease":
                seen.append(orjson.loads(message.lease.record.data)["n"])
                break
        again.set()
        assert seen == [1]
