"""The clients with a logon (issue 32 item 2): a bearer token (given, or from a file read
again when it changes) and a user name and password reach a query service whose logon
is processor/server/auth.py; a missing or refused credential and a principal that may not
log on end in one line saying what to do, and FailoverClient never moves on for them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
import yaml

from processor.app import Application
from processor.cli import exits
from processor.client.credentials import ClientSecurity
from processor.client.direct import DirectPublisher
from processor.client.failover import FailoverClient
from processor.client.sow_client import SowClient
from processor.config import Settings
from processor.errors import ServiceError
from tests.conftest import MEMORY
from tests.integration.harness import running_sow
from tests.integration.security_helpers import Pki, Subscriber, lines, make_pki, serving, sow
from tests.integration.security_helpers import topology as make_topology

auth = pytest.importorskip(
    "processor.server.auth",
    reason="the server's logon (processor/server/auth.py, issue 32) is not in this tree yet",
)

AUDIENCE = "kafka-sow"
SECRET = "a test HMAC secret of more than 32 bytes, never a real one"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def logon_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The users file (alice and carol, password "secret-<name>"), the JWT key and the
    entitlements (alice may do everything, carol may not log on)."""
    from processor.security.authentication import hash_password

    directory = tmp_path_factory.mktemp("logon")
    users = directory / "users"
    users.write_text("".join(f"{n}:{hash_password(f'secret-{n}')}\n" for n in ("alice", "carol")))
    key = directory / "jwt.key"
    key.write_text(SECRET)
    rights = directory / "entitlements.yaml"
    everything = [{"topic": ".*"}]
    rights.write_text(
        yaml.safe_dump(
            {
                "principals": {
                    "alice": {
                        "logon": True,
                        "read": everything,
                        "write": everything,
                        "acknowledge": everything,
                    },
                    "carol": {"logon": False},
                }
            }
        )
    )
    return {
        "SOW_AUTH": "token,password",
        "SOW_USERS_FILE": str(users),
        "SOW_JWT_KEY": str(key),
        "SOW_JWT_AUDIENCE": AUDIENCE,
        "SOW_ENTITLEMENTS": str(rights),
    }


def token(subject: str = "alice", expires_in: float = 600) -> str:
    claims = {"sub": subject, "aud": AUDIENCE, "exp": int(time.time() + expires_in)}
    return jwt.encode(claims, SECRET, algorithm="HS256")


@contextlib.contextmanager
def secured(app: Application, env: dict[str, str], pki: Pki | None) -> Iterator[str]:
    """A logon (and, with ``pki``, TLS) server over ``app``, from the settings ``env``."""
    if pki is not None:
        env = {
            **env,
            "SOW_GRPC_TLS_CERT": str(pki.server.chain),
            "SOW_GRPC_TLS_KEY": str(pki.server.key),
        }
    security = auth.server_security(Settings.from_env(env))
    with serving(app, security.credentials, security.contexts) as address:
        yield address


@pytest.fixture
def app(tmp_path: Path, unique: str) -> Iterator[Application]:
    with running_sow(MEMORY, make_topology(unique), tmp_path, unique) as (started, _):
        yield started


@pytest.fixture
def address(app: Application, logon_files: dict[str, str], pki: Pki) -> Iterator[str]:
    with secured(app, logon_files, pki) as served:
        yield served


def _tls(pki: Pki, **credentials: Any) -> ClientSecurity:
    return ClientSecurity(ca=pki.ca.cert, **credentials)


def _works(client: SowClient, order: int) -> None:
    reply = client.publish("ORDERS", orjson.dumps({"orderId": order}))
    records, _, _ = client.query("ORDERS", sow_keys=[reply.sow_key], min_position=[reply.position])
    assert [orjson.loads(r.data) for r in records] == [{"orderId": order}]


def test_a_bearer_token_and_a_password_log_on_over_tls(address: str, pki: Pki) -> None:
    with SowClient(address, security=_tls(pki, token=token())) as client:
        _works(client, 1)
        with client.subscribe("ORDERS") as stream:
            messages = iter(stream)
            assert next(messages).WhichOneof("part") == "registered"
            client.publish("ORDERS", b'{"orderId": 2}')
            assert orjson.loads(next(messages).change.record.data) == {"orderId": 2}
    with SowClient(address, security=_tls(pki, username="alice", password="secret-alice")) as c:
        _works(c, 3)
        with c.consume("Q") as stream:
            c.publish("orders", b'{"id": 1}')
            lease = next(stream.leases())
            assert c.queue_act("Q", "ack", bookmarks=[lease.bookmark]).commands >= 1


def test_a_token_file_is_read_again_when_the_token_is_renewed(
    address: str, pki: Pki, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text(token())
    with SowClient(address, security=_tls(pki, token_file=path)) as client:
        _works(client, 1)
        _replace(path, token(expires_in=-3600))
        with pytest.raises(ServiceError) as expired:
            client.query("ORDERS")
        assert expired.value.code == "UNAUTHENTICATED"
        assert "refused the credentials sent (TLS, bearer token)" in str(expired.value)
        _replace(path, token())
        _works(client, 2)


def _replace(path: Path, text: str) -> None:
    """Write a new token as a secret's refresh does: a new file renamed over the old."""
    new = path.with_suffix(".new")
    new.write_text(text + "\n")
    os.replace(new, path)


def test_a_missing_or_refused_credential_says_what_to_do(address: str, pki: Pki) -> None:
    cases = [
        (_tls(pki), "UNAUTHENTICATED", "no credentials were sent: give a token (--token-file"),
        (_tls(pki, username="alice", password="wrong"), "UNAUTHENTICATED", "refused"),
        (_tls(pki, token=token("alice", -3600)), "UNAUTHENTICATED", "refused the credentials"),
        (_tls(pki, username="carol", password="secret-carol"), "PERMISSION_DENIED", "entitle"),
    ]
    for security, code, says in cases:
        with SowClient(address, security=security) as client, pytest.raises(ServiceError) as e:
            client.query("ORDERS")
        assert e.value.code == code
        assert says in str(e.value)
        assert exits.code_for(e.value) == exits.DENIED


def test_failover_never_moves_on_for_a_refused_logon(
    app: Application, logon_files: dict[str, str], pki: Pki
) -> None:
    with (
        secured(app, logon_files, pki) as first,
        secured(app, logon_files, pki) as second,
    ):
        for security in (_tls(pki), _tls(pki, username="carol", password="secret-carol")):
            with FailoverClient([first, second], "refused", security=security) as client:
                with pytest.raises(ServiceError, match=r"UNAUTHENTICATED|PERMISSION_DENIED"):
                    client.query("ORDERS")
                subscription = client.subscribe("ORDERS", "feed", bookmark="")
                with pytest.raises(ServiceError, match=r"UNAUTHENTICATED|PERMISSION_DENIED"):
                    next(iter(subscription))
                assert client.failovers == 0
                assert subscription.attempts == 1
        with FailoverClient([first, second], "ok", security=_tls(pki, token=token())) as client:
            records, _, _ = client.query("ORDERS")
            assert records == []


def test_a_token_goes_in_clear_text_to_a_loopback_service_only(
    app: Application, logon_files: dict[str, str]
) -> None:
    with secured(app, {**logon_files, "SOW_AUTH": "token"}, None) as address:
        with SowClient(address, security=ClientSecurity(token=token())) as client:
            _works(client, 1)
        with SowClient(address) as anonymous, pytest.raises(ServiceError) as refused:
            anonymous.query("ORDERS")
        assert refused.value.code == "UNAUTHENTICATED"


def test_direct_publisher_processed_acks_with_a_token_over_tls(
    bootstrap: str, tmp_path: Path, unique: str, pki: Pki, logon_files: dict[str, str]
) -> None:
    topology = make_topology(unique)
    with (
        running_sow(bootstrap, topology, tmp_path, unique) as (started, _),
        secured(started, logon_files, pki) as address,
    ):
        security = _tls(pki, token=token())
        with DirectPublisher(bootstrap, topology, server=address, security=security) as direct:
            published = direct.publish("ORDERS", b'{"orderId": 9}', ack="processed")
            with SowClient(address, security=security) as client:
                records, _, _ = client.query("ORDERS", sow_keys=[published.sow_key])
                assert len(records) == 1
        with (
            DirectPublisher(bootstrap, topology, server=address, security=_tls(pki)) as direct,
            pytest.raises(ServiceError, match="UNAUTHENTICATED"),
        ):
            direct.publish("ORDERS", b'{"orderId": 10}', ack="processed", timeout=10)


def test_the_commands_log_on_with_a_token_or_a_password(
    address: str, pki: Pki, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token())
    password_file = tmp_path / "password"
    password_file.write_text("secret-alice\n")
    tls = ["--server", address, "--tls-ca", str(pki.ca.cert)]
    with_token = [*tls, "--token-file", str(token_file)]
    password = {"SOW_USER": "alice", "SOW_PASSWORD": "secret-alice"}
    (published,) = lines(sow("publish", "ORDERS", '{"orderId": 1}', *tls, env=password))
    subscriber = Subscriber(
        "ORDERS", *tls, "--user", "alice", "--password-file", str(password_file)
    )
    try:
        assert "registered" in subscriber.lines.get(timeout=30)
        lines(sow("publish", "ORDERS", '{"orderId": 2}', *with_token))
        assert subscriber.lines.get(timeout=30)["data"] == {"orderId": 2}
    finally:
        code, _ = subscriber.stop()
    assert code == 0
    queried = lines(sow("query", "ORDERS", "--min-position", published["position"], *with_token))
    assert sorted(line["data"]["orderId"] for line in queried if "data" in line) == [1, 2]
    anonymous = sow("query", "ORDERS", *tls)
    assert anonymous.returncode == exits.DENIED
    assert anonymous.stderr.count("\n") == 1, anonymous.stderr
    assert "no credentials were sent" in anonymous.stderr
    unreadable = sow("query", "ORDERS", *tls, "--token-file", str(tmp_path / "missing"))
    assert unreadable.returncode == exits.INVALID
    assert "cannot read the token file" in unreadable.stderr


def test_the_clients_reach_sow_serves_own_secured_service(
    tmp_path: Path, unique: str, pki: Pki, logon_files: dict[str, str]
) -> None:
    """The service as ``sow serve`` starts it from its settings (TLS and token logon)."""
    from processor.testing import start_memory

    settings = Settings.from_env(
        {
            **logon_files,
            "SOW_AUTH": "token",
            "SOW_GRPC_TLS_CERT": str(pki.server.chain),
            "SOW_GRPC_TLS_KEY": str(pki.server.key),
        }
    )
    chosen = {
        name: getattr(settings, name)
        for name in ("auth", "jwt_key", "jwt_audience", "grpc_tls_cert", "grpc_tls_key")
    }
    app = start_memory(make_topology(unique), tmp_path, **chosen)
    try:
        deadline = time.monotonic() + 30
        while app.readiness() is not None:
            assert time.monotonic() < deadline, app.readiness()
            time.sleep(0.05)
        with SowClient(app.grpc_address, security=_tls(pki, token=token())) as client:
            _works(client, 1)
        with FailoverClient([app.grpc_address], "f", security=_tls(pki, token=token())) as f:
            assert len(f.query("ORDERS")[0]) == 1
        anonymous = sow(
            "query", "ORDERS", "--server", app.grpc_address, "--tls-ca", str(pki.ca.cert)
        )
        assert anonymous.returncode == exits.DENIED
        assert "no credentials were sent" in anonymous.stderr
    finally:
        app.stop()
