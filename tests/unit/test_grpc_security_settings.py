"""The gRPC security settings (processor/server/auth.py server_security): what fits
together, what is refused with which message, and the two commands that use them
(`sow hash-password`, `sow check-config`)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from processor.config import Settings
from processor.errors import ConfigurationError
from processor.security import EVERYONE
from processor.security.authentication import PasswordFile
from processor.server.audit import Audit
from processor.server.auth import server_security
from tests.pki import issue, make_ca


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("files")
    ca = make_ca("c", directory)
    server = issue(ca, "srv", server=True, ips=["127.0.0.1"])
    secret = directory / "secret"
    secret.write_text("x" * 40)
    users = directory / "users"
    users.write_text("")
    return {
        "cert": server.chain,
        "key": server.key,
        "ca": ca.cert,
        "secret": secret,
        "users": users,
    }


def test_no_setting_means_plaintext_and_no_logon() -> None:
    security = server_security(Settings())
    assert (security.contexts, security.credentials) == (None, None)
    assert security.summary == []


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"grpc_tls_cert": "cert"}, "SOW_GRPC_TLS_CERT is set but SOW_GRPC_TLS_KEY is not"),
        ({"grpc_tls_key": "key"}, "SOW_GRPC_TLS_KEY is set but SOW_GRPC_TLS_CERT is not"),
        ({"grpc_tls_client_ca": "ca"}, "client certificates (SOW_GRPC_TLS_CLIENT_CA"),
        (
            {"grpc_tls_cert": "cert", "grpc_tls_key": "key", "grpc_client_certs": "require"},
            "SOW_GRPC_CLIENT_CERTS=require needs SOW_GRPC_TLS_CLIENT_CA",
        ),
        ({"auth": "password"}, "SOW_AUTH includes password but SOW_USERS_FILE is not set"),
        ({"auth": "token"}, "neither SOW_JWT_KEY nor SOW_JWKS_FILE is set"),
        ({"auth": "token", "jwt_key": "secret"}, "SOW_JWT_AUDIENCE is not set"),
        (
            {"auth": "token", "jwt_key": "secret", "jwks_file": "secret", "jwt_audience": "a"},
            "both SOW_JWT_KEY and SOW_JWKS_FILE are set",
        ),
        ({"auth": "certificate"}, "SOW_GRPC_CLIENT_CERTS is 'none': set it to require"),
        ({"auth": "kerberos"}, "SOW_AUTH takes certificate, token, password; kerberos"),
        ({"entitlements": "users"}, "SOW_ENTITLEMENTS is set but no logon is (SOW_AUTH)"),
        (
            {"auth": "password", "users_file": "missing"},
            "SOW_USERS_FILE names {missing}, which is not a file",
        ),
        (
            {"grpc_tls_cert": "secret", "grpc_tls_key": "key"},
            "SOW_GRPC_TLS_CERT ({secret}) is not PEM",
        ),
    ],
)
def test_settings_that_do_not_fit_are_refused_naming_them(
    files: dict[str, Path], given: dict[str, str], message: str
) -> None:
    paths = {**files, "missing": files["ca"].parent / "missing"}
    values = {
        name: (paths[value] if name not in ("auth", "jwt_audience") and value in paths else value)
        for name, value in given.items()
    }
    with pytest.raises(ConfigurationError) as caught:
        server_security(Settings(**values))  # type: ignore[arg-type]
    assert message.format(**{k: str(v) for k, v in paths.items()}) in str(caught.value)


def test_tls_with_client_certificates_and_every_logon(files: dict[str, Path]) -> None:
    settings = Settings(
        grpc_tls_cert=files["cert"],
        grpc_tls_key=files["key"],
        grpc_tls_client_ca=files["ca"],
        grpc_client_certs="require",
        auth="certificate, token,password",
        users_file=files["users"],
        jwt_key=files["secret"],
        jwt_audience="kafka-sow",
    )
    security = server_security(settings)
    assert security.credentials is not None
    assert security.contexts is not None
    assert security.contexts.rights is EVERYONE
    assert security.summary == [
        "gRPC TLS: on, client certificates required (mutual TLS)",
        "gRPC logon: certificate, token, password",
    ]


def test_sow_hash_password_prints_a_line_the_users_file_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from processor.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse\n"))
    assert main(["hash-password", "alice", "--roles", "traders, ops"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("alice:scrypt$")
    assert line.endswith(":traders,ops\n")
    users = tmp_path / "users"
    users.write_text(line)
    principal = PasswordFile.load(users).authenticate("alice", "correct horse")
    assert principal.roles == frozenset({"traders", "ops"})
    assert main(["hash-password", "a:b"]) != 0
    assert "must be non-empty, without ':'" in capsys.readouterr().err


def test_the_audit_logs_a_principal_and_reason_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    audit = Audit(interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="processor.audit"):
        for _ in range(10_000):
            audit.refused("mallory", "bad-password", "wrong user name or password")
        audit.refused("mallory", "expired-token", "the bearer token has expired")
        audit.refused("bob", "not-entitled", "may not read orders")
        now[0] = 61.0
        audit.refused("mallory", "bad-password", "wrong user name or password")
        audit.refused("eve\n\x1b[31m", "bad-password", "x")
        audit.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:3] == [
        "refused mallory (bad-password): wrong user name or password",
        "refused mallory (expired-token): the bearer token has expired",
        "refused bob (not-entitled): may not read orders",
    ]
    assert "refused mallory (bad-password) 9999 more times in the last 60s" in lines
    assert "refused eve\\n\\x1b[31m (bad-password): x" in lines  # no control characters
    assert len(lines) == 6, lines
    assert audit.counts() == {"bad-password": 10_002, "expired-token": 1, "not-entitled": 1}
