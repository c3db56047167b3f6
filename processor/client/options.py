"""The client's security settings, defined once: each
:class:`~processor.client.credentials.ClientSecurity` field's
``sow`` option, environment variable and meaning. The command line (which imports no
gRPC to parse), :meth:`ClientSecurity.from_env` and the table of docs/security.md
(:func:`options_table`) come from here.
"""

from __future__ import annotations

from typing import NamedTuple


class ClientOption(NamedTuple):
    """One client security setting: its ``ClientSecurity`` field, its ``sow`` option
    ("": none, the environment only) and environment variable, and what it means."""

    field: str
    flag: str
    env: str
    meaning: str


OPTIONS = (
    ClientOption(
        "ca",
        "--tls-ca",
        "SOW_TLS_CA",
        "PEM file of the CA certificates that signed the query service's certificate; "
        "with it the channel is TLS (a system bundle such as /etc/ssl/certs/ca-certificates.crt "
        "for a public CA)",
    ),
    ClientOption(
        "cert",
        "--tls-cert",
        "SOW_TLS_CERT",
        "this client's certificate (PEM, its chain after it) for mutual TLS; with --tls-key",
    ),
    ClientOption("key", "--tls-key", "SOW_TLS_KEY", "the unencrypted PEM key of --tls-cert"),
    ClientOption(
        "server_name",
        "--tls-server-name",
        "SOW_TLS_SERVER_NAME",
        "the name the service's certificate must carry when it is not the address's host",
    ),
    ClientOption(
        "token",
        "--token",
        "SOW_TOKEN",
        "a bearer token (JWT), sent as `authorization: Bearer`; other users of the host "
        "see a command line: prefer the variable or the file",
    ),
    ClientOption(
        "token_file",
        "--token-file",
        "SOW_TOKEN_FILE",
        "a file holding the bearer token, read again whenever it changes",
    ),
    ClientOption("username", "--user", "SOW_USER", "a user name, sent as `authorization: Basic`"),
    ClientOption(
        "password_file", "--password-file", "SOW_PASSWORD_FILE", "a file holding its password"
    ),
    ClientOption("password", "", "SOW_PASSWORD", "its password (never on a command line)"),
)

#: The fields that say who the client is; the command line's replace the environment's.
AUTHENTICATION = ("token", "token_file", "username", "password", "password_file")


def named(field_name: str) -> str:
    """How a setting is named to the user: its option and environment variable."""
    option = next(o for o in OPTIONS if o.field == field_name)
    return f"{option.flag} ({option.env})" if option.flag else option.env


def options_table() -> str:
    """The settings as the markdown table of docs/security.md ("Clients")."""
    rows = [
        "| `sow` option | environment variable | `ClientSecurity` field | meaning |",
        "| --- | --- | --- | --- |",
    ]
    rows += [
        f"| {f'`{o.flag}`' if o.flag else '(none)'} | `{o.env}` | `{o.field}` | {o.meaning} |"
        for o in OPTIONS
    ]
    return "\n".join(rows) + "\n"
