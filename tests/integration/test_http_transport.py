"""The HTTP transport answers exactly what gRPC answers: the same queries (filters,
ordering, top-n, select, aggregation, a bad filter's error) and the same
sow_and_subscribe (query phase, publishes, updates, OOFs, deletes), run by one test body
against both transports of one service, on both backends (issue 35).

gRPC's messages are put in the HTTP API's JSON form here (``grpc_record``,
``grpc_change``); the transports share the request code, so any field either gets
wrong or drops shows as a difference.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from processor.client.failures import ServiceError
from processor.topology.model import SowTopic, Topology
from processor.wire import sow_pb2
from tests.integration.harness import namespaced, running_sow

QUERIES: list[dict[str, Any]] = [
    {},
    {"filter": "/price > 20"},
    {"filter": "/price > 20", "order_by": "/price DESC", "top_n": 3},
    {"order_by": "/symbol ASC, /price DESC", "top_n": 4, "skip_n": 1},
    {"filter": "/symbol LIKE '^M'", "select": "/orderId,/price"},
    {"grouping": "/symbol", "projection": "/symbol, COUNT(/orderId) AS /n, SUM(/price) AS /total"},
    {"filter": "/price >"},  # refused: both answer the same error
]


def grpc_position(position: Any) -> str:
    return f"{position.topic}/{position.partition}/{position.offset}"


def grpc_record(record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sow_key": record.sow_key,
        "data": record.data.decode(),
        "topic": record.topic,
        "message_type": record.message_type,
        "position": grpc_position(record.position),
        "publish_time_ms": record.publish_time_ms,
        "apply_time_ms": record.apply_time_ms,
    }
    if record.expiration_ms:
        out["expiration_ms"] = record.expiration_ms
    if record.correlation_id:
        out["correlation_id"] = record.correlation_id
    return out


def grpc_change(change: Any) -> dict[str, Any]:
    kinds = {
        sow_pb2.CHANGE_PUBLISH: "publish",
        sow_pb2.CHANGE_DELETE: "delete",
        sow_pb2.CHANGE_OOF: "oof",
    }
    out: dict[str, Any] = {
        "kind": kinds.get(change.kind, str(change.kind)),
        "topic": change.topic,
        "sow_key": change.sow_key,
        "record": grpc_record(change.record),
        "changelog_position": grpc_position(change.changelog_position),
    }
    if change.oof_reason:
        out["oof_reason"] = change.oof_reason
    if change.HasField("current"):
        out["current"] = grpc_record(change.current)
    if change.delta:
        out["delta"] = True
    return out


class Grpc:
    """The test body's calls over gRPC (the product's client)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def query(self, topic: str, options: dict[str, Any]) -> dict[str, Any]:
        try:
            records, _, end = self.client.query(topic, text_form=True, **options)
        except ServiceError as exc:
            return {"error": " ".join(str(exc).split(": ", 1)[-1].split())}
        stats = {
            k: getattr(end, k) for k in ("topic_matches", "matches", "records_returned", "plan")
        }
        return {"records": [grpc_record(r) for r in records], "group_end": stats}

    def subscribe(self, topic: str, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        stream = self.client.sow_and_subscribe(topic, text_form=True, **options)
        try:
            for message in stream:
                part = message.WhichOneof("part")
                if part == "batch":
                    yield "records", [grpc_record(r) for r in message.batch.records]
                elif part == "group_end":
                    yield "group_end", message.group_end.records_returned
                elif part == "change":
                    yield "changes", [grpc_change(message.change)]
                elif part == "changes":
                    yield "changes", [grpc_change(c) for c in message.changes.changes]
        finally:
            stream.cancel()


class Http:
    """The test body's calls over the HTTP API (the console's)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, topic: str, options: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"topic": topic, **options}).encode()
        request = urllib.request.Request(self.base + "/api/query", body, method="POST")
        try:
            answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
        except urllib.error.HTTPError as exc:
            return {"error": " ".join(json.loads(exc.read())["error"].split())}
        end = answer["group_end"]
        stats = {k: end[k] for k in ("topic_matches", "matches", "records_returned", "plan")}
        return {"records": answer["records"], "group_end": stats}

    def subscribe(self, topic: str, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        params = urllib.parse.urlencode({"topic": topic, "sow": "1", **options})
        response = urllib.request.urlopen(f"{self.base}/api/subscribe?{params}", timeout=60)
        try:
            kind = ""
            for raw in response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind in ("records", "changes"):
                    yield kind, json.loads(line[6:])
                elif line.startswith("data: ") and kind == "group_end":
                    yield kind, json.loads(line[6:])["records_returned"]
        finally:
            response.close()


def collect(stream: Iterator[tuple[str, Any]], into: queue.Queue[tuple[str, Any]]) -> None:
    try:
        for item in stream:
            into.put(item)
    except Exception as exc:  # the stream ended (cancelled at the end of the test)
        into.put(("ended", repr(exc)))


def transcript(messages: queue.Queue[tuple[str, Any]], changes: int) -> list[Any]:
    """The query phase's records and group end (``changes`` 0), or the next
    ``changes`` changes."""
    out: list[Any] = []
    seen = 0
    deadline = time.monotonic() + 30
    while seen < changes or (not changes and not any(kind == "group_end" for kind, _ in out)):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{seen} of {changes} changes after 30s: {out}"
        try:
            kind, value = messages.get(timeout=remaining)
        except queue.Empty:
            raise AssertionError(f"{seen} of {changes} changes after 30s: {out}") from None
        assert kind != "ended", value
        if kind == "changes":
            out.extend(("change", change) for change in value)
            seen += len(value)
        else:
            out.append((kind, value))
    return out


ORDERS = SowTopic("ORDERS", keys=("/orderId",), partitions=2)


def publish_all(client: Any, topic: str, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        client.publish(topic, json.dumps(message).encode(), ack="processed")


def test_http_answers_what_grpc_answers(backend: str, tmp_path: Path, unique: str) -> None:
    topology: Topology = namespaced(unique, ORDERS)
    topic = next(iter(topology.topics))
    settings = {"metrics_address": "127.0.0.1:0"}
    with running_sow(backend, topology, tmp_path, unique, settings) as (app, client):
        assert app.observer is not None
        transports: dict[str, Any] = {
            "grpc": Grpc(client),
            "http": Http(f"http://{app.observer.address}"),
        }
        publish_all(
            client,
            topic,
            [
                {"orderId": i, "symbol": "MSFT" if i % 2 else "IBM", "price": 7 * i}
                for i in range(1, 9)
            ],
        )
        # Queries: the same answers, records in the same order.
        for options in QUERIES:
            answers = {name: t.query(topic, options) for name, t in transports.items()}
            if "grouping" in options:  # an aggregate's row is made, and timed, by each query
                for answer in answers.values():
                    for record in answer["records"]:
                        del record["publish_time_ms"], record["apply_time_ms"]
            assert answers["grpc"] == answers["http"], options
            if "error" not in answers["grpc"]:
                assert answers["grpc"]["records"] or options.get("filter"), options
        assert "error" in answers["grpc"]  # the last query's filter is refused

        # sow_and_subscribe on both, then one stream of changes: equal transcripts.
        options = {"filter": "/price > 30", "oof": True}
        streams: dict[str, queue.Queue[tuple[str, Any]]] = {}
        for name, transport in transports.items():
            streams[name] = queue.Queue()
            http_options = {"filter": options["filter"], "oof": "1"}
            stream = transport.subscribe(topic, options if name == "grpc" else http_options)
            threading.Thread(target=collect, args=(stream, streams[name]), daemon=True).start()
        opened = {name: transcript(q, 0) for name, q in streams.items()}
        assert opened["grpc"] == opened["http"]
        publish_all(
            client,
            topic,
            [
                {"orderId": 20, "symbol": "SAP", "price": 100},  # publish, in focus
                {"orderId": 20, "symbol": "SAP", "price": 110},  # update
                {"orderId": 8, "symbol": "IBM", "price": 3},  # out of focus: OOF match
            ],
        )
        client.delete(topic, filter="/orderId = 20")  # OOF deleted
        changed = {name: transcript(q, 4) for name, q in streams.items()}
        assert changed["grpc"] == changed["http"]
        kinds = [(c["kind"], c.get("oof_reason")) for _, c in changed["grpc"]]
        assert kinds == [("publish", None), ("publish", None), ("oof", "match"), ("oof", "deleted")]


def test_http_refuses_what_grpc_refuses_with_the_matching_status(
    backend: str, tmp_path: Path, unique: str
) -> None:
    topology = namespaced(unique, ORDERS)
    with running_sow(backend, topology, tmp_path, unique, {"metrics_address": "127.0.0.1:0"}) as (
        app,
        _,
    ):
        assert app.observer is not None
        base = f"http://{app.observer.address}"

        def status(path: str, body: dict[str, Any]) -> int:
            request = urllib.request.Request(base + path, json.dumps(body).encode(), method="POST")
            try:
                urllib.request.urlopen(request, timeout=30)
            except urllib.error.HTTPError as exc:
                return exc.code
            return 200

        assert status("/api/query", {"topic": "NOPE"}) == 404
        assert status("/api/query", {"topic": next(iter(topology.topics)), "filter": "(("}) == 400
        assert status("/api/publish", {"topic": next(iter(topology.topics))}) == 400


def test_the_console_takes_the_same_logon_as_grpc(tmp_path: Path) -> None:
    """Behind gRPC's logon, the HTTP API asks for the same credentials and gives the
    same rights: none is 401, a principal without the logon right 403, alice reads."""
    import base64

    from tests.integration.grpc_auth_helpers import make_secrets, secured_service

    secrets = make_secrets(tmp_path / "secrets")
    with secured_service(secrets, tmp_path / "state", metrics_address="127.0.0.1:0") as app:
        assert app.observer is not None
        base = f"http://{app.observer.address}"

        def query(user: str = "", password: str = "") -> tuple[int, Any]:
            headers = {}
            if user:
                pair = base64.b64encode(f"{user}:{password}".encode()).decode()
                headers["Authorization"] = f"Basic {pair}"
            body = json.dumps({"topic": "orders"}).encode()
            request = urllib.request.Request(base + "/api/query", body, headers, method="POST")
            try:
                return 200, json.loads(urllib.request.urlopen(request, timeout=30).read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, answer = query()
        assert status == 401, answer
        assert "needs a logon" in answer["error"]
        assert query("alice", "wrong")[0] == 401
        assert query("carol", "carol-pw")[0] == 403  # no role gives carol the logon right
        status, answer = query("alice", "alice-pw")
        assert status == 200, answer
        assert answer["group_end"]["records_returned"] == 0
