"""gRPC logon, table-driven (issue 32): every RPC of the Sow, Subscriptions and Queues
services x {no credentials, bad password, expired token, wrong audience, a certificate
from another CA, authenticated but not entitled, entitled} gets the right status, and
not one record unless entitled. The service runs over TLS with token and password logon
and entitlements (and, for the certificate column, with client certificates required),
on the memory log."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from processor.app import Application
from tests.integration.grpc_auth_helpers import (
    RPCS,
    Metadata,
    Secrets,
    basic,
    bearer,
    call,
    channel,
    make_secrets,
    secured_service,
    seed,
    token,
)


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("secrets"))


@pytest.fixture(scope="module")
def service(secrets: Secrets, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Application]:
    with secured_service(
        secrets, tmp_path_factory.mktemp("state"), metrics_address="127.0.0.1:0"
    ) as app:
        seed(app.grpc_address, secrets)
        yield app


@pytest.fixture(scope="module")
def mutual(secrets: Secrets, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Application]:
    with secured_service(secrets, tmp_path_factory.mktemp("mutual"), mutual=True) as app:
        yield app


def _columns(secrets: Secrets) -> dict[str, tuple[Metadata, str]]:
    """Each column: the call's metadata and the status every RPC must get."""
    past = int(time.time()) - 3600
    return {
        "no credentials": ((), "UNAUTHENTICATED"),
        "bad password": (basic("carol", "not-carols"), "UNAUTHENTICATED"),
        "expired token": (bearer(token(secrets, exp=past, iat=past - 60)), "UNAUTHENTICATED"),
        "wrong audience": (bearer(token(secrets, aud="another-service")), "UNAUTHENTICATED"),
        "not entitled": (bearer(token(secrets, sub="bob")), "PERMISSION_DENIED"),
        "entitled": (basic("alice", "alice-pw"), "OK"),
    }


COLUMNS = [
    "no credentials",
    "bad password",
    "expired token",
    "wrong audience",
    "not entitled",
    "entitled",
]


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("rpc", sorted(RPCS))
def test_every_rpc_gets_the_status_of_its_credentials(
    service: Application, secrets: Secrets, rpc: str, column: str
) -> None:
    metadata, expected = _columns(secrets)[column]
    with channel(service.grpc_address, secrets) as ch:
        outcome = call(rpc, ch, metadata)
    assert outcome.code == expected, (rpc, column, outcome)
    if expected != "OK":
        assert outcome.records == 0, (rpc, column, outcome)
    elif rpc in ("Sow/SowQuery", "Subscriptions/SowAndSubscribe", "Subscriptions/Session"):
        assert outcome.records >= 3, (rpc, outcome)  # the seeded records


@pytest.mark.parametrize("rpc", sorted(RPCS))
def test_a_certificate_from_another_ca_gets_no_connection(
    mutual: Application, secrets: Secrets, rpc: str
) -> None:
    """Client certificates required: a certificate the client CA did not sign fails the
    TLS handshake (UNAVAILABLE: no call reaches the service), as does none at all; a
    certificate of the client CA logs on as its CN (alice, a trader by the users file)."""
    with channel(mutual.grpc_address, secrets, secrets.mallory_cert) as ch:
        assert call(rpc, ch).code == "UNAVAILABLE"
    with channel(mutual.grpc_address, secrets) as ch:
        assert call(rpc, ch).code == "UNAVAILABLE"
    with channel(mutual.grpc_address, secrets, secrets.alice_cert) as ch:
        assert call(rpc, ch).code == "OK"
        # a bad authorization is refused even over a valid certificate
        assert call(rpc, ch, basic("alice", "wrong")).code == "UNAUTHENTICATED"


def test_plaintext_to_the_tls_port_is_refused(service: Application) -> None:
    with grpc.insecure_channel(service.grpc_address) as ch:
        assert call("Sow/SowQuery", ch, basic("alice", "alice-pw")).code == "UNAVAILABLE"


def test_a_principal_without_logon_is_refused_at_the_door(
    service: Application, secrets: Secrets
) -> None:
    """A valid token of a principal the entitlements do not let log on (no entry, no
    role with logon): PERMISSION_DENIED on every RPC, before anything is read."""
    metadata = bearer(token(secrets, sub="dave", roles=["nobody"]))
    with channel(service.grpc_address, secrets) as ch:
        for rpc in RPCS:
            outcome = call(rpc, ch, metadata)
            assert (outcome.code, outcome.records) == ("PERMISSION_DENIED", 0), rpc


def test_refusals_are_counted_per_reason(service: Application, secrets: Secrets) -> None:
    with channel(service.grpc_address, secrets) as ch:
        call("Sow/SowQuery", ch)
        call("Sow/SowQuery", ch, bearer(token(secrets, aud="elsewhere")))
    assert service.observer is not None
    url = f"http://{service.observer.address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    counted = {
        line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sow_refused_calls_total{")
    }
    assert counted.get("no-credentials", 0) >= 1, counted
    assert counted.get("wrong-audience", 0) >= 1, counted


def test_the_users_file_and_the_tls_files_are_checked_at_start(
    secrets: Secrets, tmp_path: Path
) -> None:
    from processor.errors import ConfigurationError

    for settings, message in (
        ({"users_file": tmp_path / "missing"}, "SOW_USERS_FILE names"),
        ({"grpc_tls_key": None}, "SOW_GRPC_TLS_CERT is set but SOW_GRPC_TLS_KEY is not"),
        ({"jwt_audience": ""}, "SOW_JWT_AUDIENCE is not set"),
        ({"auth": "token,password,certificate"}, "SOW_GRPC_CLIENT_CERTS is 'none'"),
    ):
        with (
            pytest.raises(ConfigurationError, match=message),
            secured_service(secrets, tmp_path / "state", **settings),
        ):
            pass
