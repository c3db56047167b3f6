"""A secured kafka-sow for the gRPC logon tests: certificates, a users file, token keys
and entitlements made at run time, the service started on the memory log with TLS and
logon, and one caller per RPC of the Sow, Subscriptions and Queues services that reports
the status it got and how many records came back."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from processor.app import Application
from processor.security.authentication import hash_password
from processor.testing import start_memory
from processor.topology.yaml_loader import parse_yaml
from processor.wire import sow_pb2, sow_pb2_grpc
from tests.integration.security_helpers import make_pki
from tests.pki import CA, Issued

AUDIENCE = "kafka-sow"
ISSUER = "https://login.example"
#: Every call's deadline.
CALL_S = 10.0

TOPOLOGY = """\
topics:
  - {name: orders, key: [/orderId]}
  - {name: jobs, sow: false}
queues:
  - {name: work, message_type: json, underlying: jobs}
"""

ENTITLEMENTS = """\
roles:
  traders:
    logon: true
    read: [{topic: "orders|work"}]
    write: [{topic: "orders"}, {topic: "jobs"}]
    acknowledge: [{topic: "work"}]
principals:
  bob: {logon: true}
"""


@dataclass(frozen=True)
class Secrets:
    """Everything a secured service and its callers need, as files and values."""

    ca: CA
    server: Issued
    alice_cert: Issued
    other_ca: CA
    mallory_cert: Issued
    users: Path
    jwt_public: Path
    jwt_private: Any
    entitlements: Path


def make_secrets(directory: Path) -> Secrets:
    pki = make_pki(directory / "pki")
    users = directory / "users"
    users.write_text(
        f"alice:{hash_password('alice-pw')}:traders\ncarol:{hash_password('carol-pw')}\n"
    )
    key = ec.generate_private_key(ec.SECP256R1())
    public = directory / "issuer.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    entitlements = directory / "entitlements.yaml"
    entitlements.write_text(ENTITLEMENTS)
    return Secrets(
        pki.ca, pki.server, pki.alice, pki.other_ca, pki.mallory, users, public, key, entitlements
    )


def token(secrets: Secrets, sub: str = "alice", **claims: Any) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {"sub": sub, "aud": AUDIENCE, "iss": ISSUER, "exp": now + 600}
    payload.update(claims)
    return jwt.encode(payload, secrets.jwt_private, algorithm="ES256")


def bearer(text: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {text}"),)


def basic(user: str, password: str) -> tuple[tuple[str, str], ...]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return (("authorization", f"Basic {encoded}"),)


@contextlib.contextmanager
def secured_service(
    secrets: Secrets, state_dir: Path, *, mutual: bool = False, **settings: Any
) -> Iterator[Application]:
    """The service over TLS, with token and password logon and the entitlements; with
    ``mutual``, client certificates required (and certificate logon)."""
    tls = {
        "grpc_tls_cert": secrets.server.chain,
        "grpc_tls_key": secrets.server.key,
        "users_file": secrets.users,
        "jwt_key": secrets.jwt_public,
        "jwt_audience": AUDIENCE,
        "jwt_issuer": ISSUER,
        "entitlements": secrets.entitlements,
        "auth": "token,password",
    }
    if mutual:
        tls |= {
            "grpc_tls_client_ca": secrets.ca.cert,
            "grpc_client_certs": "require",
            "auth": "certificate,token,password",
        }
    app = start_memory(parse_yaml(TOPOLOGY, "auth.yaml"), state_dir, **(tls | settings))
    try:
        deadline = time.monotonic() + 30
        while app.readiness() is not None:
            assert time.monotonic() < deadline, app.readiness()
            time.sleep(0.02)
        yield app
    finally:
        app.stop()


def channel(address: str, secrets: Secrets, client: Issued | None = None) -> grpc.Channel:
    """A TLS channel trusting the service's CA, showing ``client``'s certificate."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=secrets.ca.pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.chain.read_bytes() if client else None,
    )
    return grpc.secure_channel(address, credentials)


@dataclass
class Outcome:
    """What a call got: its status code's name (a refused publish in a stream: the
    refusal's code) and the records that came back."""

    code: str
    records: int = 0


Metadata = tuple[tuple[str, str], ...]


def _held(first: Any) -> tuple[Iterator[Any], threading.Event]:
    """A request stream that sends ``first`` and stays open until the event is set."""
    done = threading.Event()

    def commands() -> Iterator[Any]:
        yield first
        done.wait(CALL_S)

    return commands(), done


def _records(message: Any) -> int:
    """The records a Subscriptions or Queues message carries."""
    part = message.WhichOneof("part")
    if part == "batch":
        return len(message.batch.records)
    if part in ("change", "lease"):
        return 1
    if part in ("changes", "leases"):
        return len(getattr(message, part).changes if part == "changes" else message.leases.leases)
    return 0


def _first_messages(call: Any, until: Callable[[Any], bool]) -> Outcome:
    """Read a streaming call until ``until`` says its opening is over."""
    records = 0
    for message in call:
        records += _records(message)
        if message.WhichOneof("part") == "ended":
            return Outcome(message.ended.code, records)
        if until(message):
            return Outcome("OK", records)
    return Outcome("OK", records)


def _publish(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SowStub(ch)  # type: ignore[no-untyped-call]
    data = orjson.dumps({"orderId": 99, "desk": "FX"})
    stub.Publish(sow_pb2.PublishRequest(topic="orders", data=data), metadata=md, timeout=CALL_S)
    return Outcome("OK")


def _publish_stream(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SowStub(ch)  # type: ignore[no-untyped-call]
    message = sow_pb2.PublishRequest(topic="orders", data=orjson.dumps({"orderId": 98}))
    batch = sow_pb2.PublishBatch(batch_id=1, messages=[message])
    for ack in stub.PublishStream(iter([batch]), metadata=md, timeout=CALL_S):
        if ack.refused:
            return Outcome(ack.refused[0].error_code)
    return Outcome("OK")


def _sow_query(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SowStub(ch)  # type: ignore[no-untyped-call]
    request = sow_pb2.SowQueryRequest(topic="orders")
    replies = stub.SowQuery(request, metadata=md, timeout=CALL_S)
    return Outcome("OK", sum(len(r.batch.records) for r in replies))


def _sow_delete(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SowStub(ch)  # type: ignore[no-untyped-call]
    request = sow_pb2.SowDeleteRequest(topic="orders", filter="/orderId = -1")
    stub.SowDelete(request, metadata=md, timeout=CALL_S)
    return Outcome("OK")


def _opening(call: Any, last: str) -> Outcome:
    """A subscription call's opening, up to its ``last`` message part."""
    try:
        return _first_messages(call, lambda m: m.WhichOneof("part") == last)
    finally:
        call.cancel()


def _subscribe(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SubscriptionsStub(ch)  # type: ignore[no-untyped-call]
    request = sow_pb2.SubscribeRequest(topic="orders", sub_id="s1")
    return _opening(stub.Subscribe(request, metadata=md, timeout=CALL_S), "registered")


def _sow_and_subscribe(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SubscriptionsStub(ch)  # type: ignore[no-untyped-call]
    request = sow_pb2.SubscribeRequest(topic="orders", sub_id="s2")
    return _opening(stub.SowAndSubscribe(request, metadata=md, timeout=CALL_S), "group_end")


def _session(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.SubscriptionsStub(ch)  # type: ignore[no-untyped-call]
    command = sow_pb2.SessionCommand(
        sow_and_subscribe=sow_pb2.SubscribeRequest(topic="orders", sub_id="s3")
    )
    commands, done = _held(command)
    call = stub.Session(commands, metadata=md, timeout=CALL_S)
    try:
        return _first_messages(call, lambda m: m.WhichOneof("part") == "group_end")
    finally:
        call.cancel()
        done.set()


def _consume(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.QueuesStub(ch)  # type: ignore[no-untyped-call]
    command = sow_pb2.QueueCommand(subscribe=sow_pb2.QueueSubscribe(queue="work", sub_id="c1"))
    commands, done = _held(command)
    call = stub.Consume(commands, metadata=md, timeout=CALL_S)
    try:
        return _first_messages(call, lambda m: m.WhichOneof("part") == "registered")
    finally:
        call.cancel()
        done.set()


def _act(ch: grpc.Channel, md: Metadata) -> Outcome:
    stub = sow_pb2_grpc.QueuesStub(ch)  # type: ignore[no-untyped-call]
    request = sow_pb2.QueueActionRequest(queue="work", action=sow_pb2.QUEUE_ACK, filter="/id = -1")
    stub.Act(request, metadata=md, timeout=CALL_S)
    return Outcome("OK")


#: Every RPC of the Sow, Subscriptions and Queues services, by its full name.
RPCS: dict[str, Callable[[grpc.Channel, Metadata], Outcome]] = {
    "Sow/Publish": _publish,
    "Sow/PublishStream": _publish_stream,
    "Sow/SowQuery": _sow_query,
    "Sow/SowDelete": _sow_delete,
    "Subscriptions/Subscribe": _subscribe,
    "Subscriptions/SowAndSubscribe": _sow_and_subscribe,
    "Subscriptions/Session": _session,
    "Queues/Consume": _consume,
    "Queues/Act": _act,
}


def call(rpc: str, ch: grpc.Channel, md: Metadata = ()) -> Outcome:
    """Make the call; a failed call is its status code, with no record."""
    try:
        return RPCS[rpc](ch, md)
    except grpc.RpcError as exc:
        return Outcome(exc.code().name)


def seed(address: str, secrets: Secrets, client: Issued | None = None) -> None:
    """Records in orders and messages in the work queue, published as alice (over a
    connection showing ``client``'s certificate)."""
    with channel(address, secrets, client) as ch:
        stub = sow_pb2_grpc.SowStub(ch)  # type: ignore[no-untyped-call]
        md = basic("alice", "alice-pw")
        for n in range(3):
            data = orjson.dumps({"orderId": n, "desk": "FX"})
            stub.Publish(
                sow_pb2.PublishRequest(topic="orders", data=data, ack=sow_pb2.PROCESSED),
                metadata=md,
                timeout=CALL_S,
            )
            stub.Publish(
                sow_pb2.PublishRequest(topic="jobs", data=orjson.dumps({"id": n})),
                metadata=md,
                timeout=CALL_S,
            )
