"""The client's security settings (processor/client/credentials.py): what a combination
means or why it is refused, where the environment comes in, the authorization each call
carries (a token file read again when it changes), and the one-line failures."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from processor.cli import exits
from processor.cli.parser import parse
from processor.client.credentials import ClientSecurity, is_loopback
from processor.client.failures import translate
from processor.client.options import OPTIONS, options_table
from processor.errors import ChannelSecurityError, ConfigurationError, ServiceError


def _authorization(security: ClientSecurity) -> str:
    """The ``authorization`` value every call of ``security``'s channels carries."""
    return security._authorization().value()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"ca": Path("ca.pem"), "cert": Path("c.pem")}, "both a certificate and its key"),
        ({"cert": Path("c.pem"), "key": Path("k.pem")}, "a client certificate is for TLS"),
        ({"server_name": "sow.example"}, "--tls-server-name"),
        ({"token": "a.b.c", "token_file": Path("t")}, "one bearer token"),
        ({"token": "a.b.c", "username": "u", "password": "p"}, "not both"),
        ({"username": "alice"}, "needs a password: --password-file"),
        ({"password": "secret"}, "a password needs its user: give --user"),
        ({"username": "a:b", "password": "p"}, "contains ':'"),
        ({"username": "u", "password": "p", "password_file": Path("f")}, "one password"),
    ],
)
def test_a_combination_that_cannot_work_is_refused_naming_the_options(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ClientSecurity(**given)


def test_the_default_is_plaintext_without_credentials() -> None:
    security = ClientSecurity()
    assert not security.tls
    assert not security.authenticates
    assert security.describe() == "plaintext"


def test_the_environment_fills_what_the_command_line_does_not_give(tmp_path: Path) -> None:
    env = {
        "SOW_TLS_CA": "/pki/ca.pem",
        "SOW_TLS_SERVER_NAME": "sow.internal",
        "SOW_USER": "alice",
        "SOW_PASSWORD": "secret",
    }
    security = ClientSecurity.from_env(env)
    assert security.ca == Path("/pki/ca.pem")
    assert security.server_name == "sow.internal"
    assert security.describe() == "TLS, user 'alice'"
    # A credential on the command line replaces the environment's credentials whole.
    given = ClientSecurity.from_env(env, token="a.b.c", ca=None, username=None)
    assert given.token == "a.b.c"
    assert given.username == given.password == ""
    assert given.ca == Path("/pki/ca.pem")  # TLS settings still come from the environment
    with pytest.raises(ConfigurationError, match="unknown client security settings"):
        ClientSecurity.from_env({}, tls=True)


def test_every_option_has_one_variable_and_the_docs_show_them() -> None:
    variables = [option.env for option in OPTIONS]
    assert len(set(variables)) == len(variables)
    assert {option.field for option in OPTIONS} == set(ClientSecurity.__dataclass_fields__)
    assert options_table() in Path("docs/security.md").read_text()


def test_a_bearer_token_and_a_password_become_the_authorization_header(tmp_path: Path) -> None:
    assert _authorization(ClientSecurity(token=" a.b.c\n")) == "Bearer a.b.c"
    secret = tmp_path / "password"
    secret.write_text("pa:ss wörd\n")
    basic = _authorization(ClientSecurity(username="alice", password_file=secret))
    assert basic.startswith("Basic ")
    assert base64.b64decode(basic.removeprefix("Basic ")).decode() == "alice:pa:ss wörd"
    with pytest.raises(ConfigurationError, match="the token alone"):
        _authorization(ClientSecurity(token="Bearer a.b.c"))


def test_a_token_file_is_read_again_when_it_changes_and_not_before(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first.token.x\n")
    plugin = ClientSecurity(token_file=path)._authorization()
    assert plugin.value() == "Bearer first.token.x"
    assert plugin.value() == "Bearer first.token.x"
    assert plugin.reads == 1  # type: ignore[union-attr]
    renewed = tmp_path / "token.new"
    renewed.write_text("second.token.y\n")
    os.replace(renewed, path)  # as a refreshed Kubernetes secret or an atomic rewrite
    assert plugin.value() == "Bearer second.token.y"
    path.unlink()
    with pytest.raises(ConfigurationError, match="cannot read the token file"):
        plugin.value()  # the call fails with this message, before anything is sent


def test_unreadable_files_are_said_when_the_channel_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read .*missing\.pem \(--tls-ca"):
        ClientSecurity(ca=tmp_path / "missing.pem").channel("127.0.0.1:1")
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(ConfigurationError, match="is not a PEM file"):
        ClientSecurity(ca=tmp_path / "ca.pem").channel("127.0.0.1:1")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigurationError, match="is empty"):
        ClientSecurity(token_file=tmp_path / "empty").channel("127.0.0.1:1")


def test_credentials_go_in_clear_text_to_a_loopback_address_only() -> None:
    security = ClientSecurity(token="a.b.c")
    with pytest.raises(ConfigurationError, match=r"in clear text: give --tls-ca \(SOW_TLS_CA\)"):
        security.channel("sow.example.com:50051")
    security.channel("127.0.0.1:50051").close()
    security.channel("localhost:50051").close()
    ClientSecurity().channel("sow.example.com:50051").close()  # nothing secret to send


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.9.9.9:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("ipv4:127.0.0.1:5", True),
        ("dns:///localhost:5", True),
        ("10.0.0.1:50051", False),
        ("sow.example.com:50051", False),
        ("[2001:db8::1]:50051", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


class _Failure(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


WRONG_CA = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:4: Tls "
    "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL "
    "routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer "
    "certificate: OK"
)
WRONG_NAME = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:4: Custom "
    "verification check failed with error: UNAUTHENTICATED: Hostname Verification Check failed."
)
CLOSED = (
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:4: Socket closed"
)


@pytest.mark.parametrize(
    ("details", "security", "kind", "says"),
    [
        (WRONG_CA, ClientSecurity(ca=Path("ca.pem")), ChannelSecurityError, "not signed by the CA"),
        (WRONG_NAME, ClientSecurity(ca=Path("ca.pem")), ChannelSecurityError, "--tls-server-name"),
        (CLOSED, ClientSecurity(ca=Path("ca.pem")), ChannelSecurityError, "client certificate"),
        (CLOSED, ClientSecurity(), ServiceError, "if it serves TLS only, give --tls-ca"),
        (
            "Getting metadata from plugin failed with error: cannot read the token file /t",
            ClientSecurity(token="x"),
            ChannelSecurityError,
            "cannot send this client's credentials: cannot read the token file /t",
        ),
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:4: "
            "SSL_ERROR_SSL: error:1000045c:SSL routines:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA",
            ClientSecurity(ca=Path("ca.pem")),
            ChannelSecurityError,
            "refused this client's certificate",
        ),
        ("failed to connect to all addresses; Connection refused", None, ServiceError, "refused"),
    ],
)
def test_a_failure_of_the_channel_says_what_to_fix_in_one_line(
    details: str, security: ClientSecurity | None, kind: type[ServiceError], says: str
) -> None:
    error = translate(_Failure(grpc.StatusCode.UNAVAILABLE, details), "127.0.0.1:4", security)
    assert type(error) is kind
    assert error.code == "UNAVAILABLE"
    assert says in str(error)
    assert "\n" not in str(error)
    expected = exits.DENIED if kind is ChannelSecurityError else exits.UNAVAILABLE
    assert exits.code_for(error) == expected


def test_a_publish_is_sent_again_after_an_outage_but_not_after_a_failed_handshake() -> None:
    from processor.client.sow_client import _retryable

    assert _retryable(ServiceError("UNAVAILABLE", "Connection refused"))
    assert not _retryable(ChannelSecurityError("UNAVAILABLE", "handshake failed"))
    assert not _retryable(ServiceError("UNAUTHENTICATED", "no credentials"))


def test_refusals_by_the_service_say_what_to_do_and_exit_denied() -> None:
    anonymous = translate(
        _Failure(grpc.StatusCode.UNAUTHENTICATED, "no credentials"), "h:1", ClientSecurity()
    )
    assert anonymous.code == "UNAUTHENTICATED"
    assert "no credentials were sent: give a token (--token-file" in str(anonymous)
    refused = translate(
        _Failure(grpc.StatusCode.UNAUTHENTICATED, "the token expired\nat 12:00"),
        "h:1",
        ClientSecurity(token="a.b.c"),
    )
    assert "refused the credentials sent (plaintext, bearer token)" in str(refused)
    assert "\n" not in str(refused)
    denied = translate(
        _Failure(grpc.StatusCode.PERMISSION_DENIED, "alice may not read ORDERS"),
        "h:1",
        ClientSecurity(username="alice", password="x"),
    )
    assert "does not entitle it" in str(denied)
    for error in (anonymous, refused, denied):
        assert exits.code_for(error) == exits.DENIED
    plain = translate(_Failure(grpc.StatusCode.NOT_FOUND, "no topic X"))
    assert str(plain) == "NOT_FOUND: no topic X"


def test_the_commands_take_the_options_and_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from processor.cli.connect import security

    monkeypatch.setenv("SOW_TLS_CA", "/env/ca.pem")
    monkeypatch.setenv("SOW_TOKEN", "env.token.x")
    args = parse(["query", "ORDERS", "--tls-server-name", "sow.internal"])
    assert security(args) == ClientSecurity(
        ca=Path("/env/ca.pem"), server_name="sow.internal", token="env.token.x"
    )
    token = tmp_path / "token"
    args = parse(
        ["subscribe", "ORDERS", "--tls-ca", "/x/ca.pem", "--tls-cert", "c.pem", "--tls-key",
         "k.pem", "--user", "bob", "--password-file", str(token)]
    )  # fmt: skip
    assert security(args) == ClientSecurity(
        ca=Path("/x/ca.pem"),
        cert=Path("c.pem"),
        key=Path("k.pem"),
        username="bob",
        password_file=token,
    )
    for command in (["publish", "T", "{}"], ["consume", "Q"], ["queue-ack", "Q", "b"]):
        assert parse([*command, "--token-file", "/t"]).security_token_file == "/t"
