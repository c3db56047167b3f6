"""How a client reaches a secured query service: TLS, mutual TLS, and the credentials
sent with every call (docs/security.md, "Clients").

:class:`ClientSecurity` is the one place the product opens a gRPC channel
(:meth:`ClientSecurity.channel`): :class:`~processor.client.sow_client.SowClient`, the
:class:`~processor.client.failover.FailoverClient`, the queue client, the
:class:`~processor.client.direct.DirectPublisher`'s processed acknowledgements and every
``sow`` command that calls the service go through it.

- With a CA (``ca``) the channel is TLS, and the service's certificate must be signed by
  it and carry the address's host (or ``server_name``); with ``cert`` and ``key`` too it
  is mutual TLS. Without a CA it is plaintext.
- With a token (``token``, or ``token_file``, read again whenever the file changes, since
  tokens expire) every call carries ``authorization: Bearer <token>``; with ``username``
  and a password, ``authorization: Basic <base64(user:password)>``. gRPC sends them only
  over a secure channel; on a plaintext one they are refused (a ConfigurationError),
  except to a loopback address, where they never leave the host (gRPC's local
  credentials).

:data:`~processor.client.options.OPTIONS` names each field's ``sow`` option and
environment variable, once: the command line, :meth:`ClientSecurity.from_env` and the
docs table come from it.
"""

from __future__ import annotations

import base64
import collections
import ipaddress
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import grpc

from processor.client.options import AUTHENTICATION, OPTIONS, named
from processor.errors import ConfigurationError


@dataclass(frozen=True)
class ClientSecurity:
    """TLS and credentials of a client (see the module doc); the default is plaintext
    with no credentials. Validated when built (ConfigurationError naming the setting);
    files are read when a channel is made, the token file whenever it changes."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str = ""
    token: str = ""
    token_file: Path | None = None
    username: str = ""
    password: str = ""
    password_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigurationError(
                f"mutual TLS needs both a certificate and its key: give {named('cert')} "
                f"and {named('key')}"
            )
        if self.ca is None and (self.cert is not None or self.server_name):
            what = "a client certificate" if self.cert is not None else named("server_name")
            raise ConfigurationError(
                f"{what} is for TLS, and the channel is TLS only with a CA: give "
                f"{named('ca')}, the CA that signed the query service's certificate"
            )
        if self.token and self.token_file is not None:
            raise ConfigurationError(
                f"give one bearer token: {named('token')} or {named('token_file')}, not both"
            )
        bearer = bool(self.token) or self.token_file is not None
        secret = bool(self.password) or self.password_file is not None
        if bearer and (self.username or secret):
            raise ConfigurationError(
                "give a bearer token or a user and password, not both (a call carries one "
                "authorization)"
            )
        if self.password and self.password_file is not None:
            raise ConfigurationError(
                f"give one password: {named('password')} or {named('password_file')}"
            )
        if self.username and not secret:
            raise ConfigurationError(
                f"user {self.username!r} needs a password: {named('password_file')} or "
                f"{named('password')}"
            )
        if secret and not self.username:
            raise ConfigurationError(f"a password needs its user: give {named('username')}")
        if ":" in self.username:
            raise ConfigurationError(
                f"user name {self.username!r} contains ':', which Basic authentication cannot carry"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> ClientSecurity:
        """The environment's settings (:data:`OPTIONS`), then the non-empty ``given``
        (fields by name, e.g. from the command line). Credentials given replace the
        environment's whole (a ``--user`` is not mixed with a ``SOW_TOKEN``)."""
        env = os.environ if environ is None else environ
        chosen = {k: v for k, v in given.items() if v not in (None, "")}
        unknown = set(chosen) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigurationError(f"unknown client security settings {sorted(unknown)}")
        values: dict[str, Any] = {}
        for option in OPTIONS:
            if any(name in chosen for name in AUTHENTICATION) and option.field in AUTHENTICATION:
                continue
            raw = env.get(option.env, "").strip()
            if raw:
                values[option.field] = raw
        values.update(chosen)
        paths = {"ca", "cert", "key", "token_file", "password_file"}
        typed: dict[str, Any] = {k: Path(v) if k in paths else str(v) for k, v in values.items()}
        return cls(**typed)

    @property
    def tls(self) -> bool:
        """Whether channels are TLS."""
        return self.ca is not None

    @property
    def authenticates(self) -> bool:
        """Whether calls carry credentials."""
        return bool(self.token or self.token_file or self.username)

    def describe(self) -> str:
        """What the channel is, for messages: e.g. "mutual TLS, bearer token"."""
        transport = "mutual TLS" if self.cert else "TLS" if self.tls else "plaintext"
        if self.token or self.token_file:
            return f"{transport}, bearer token"
        return f"{transport}, user {self.username!r}" if self.username else transport

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A channel to the query service at ``address`` (``host:port``), secured as
        configured. ConfigurationError when a file cannot be read, or when credentials
        would go in clear text to another host."""
        settings = list(options)
        if self.server_name:
            settings.append(("grpc.ssl_target_name_override", self.server_name))
        channel_credentials = None
        if self.ca is not None:
            channel_credentials = grpc.ssl_channel_credentials(
                _pem(self.ca, "ca"),
                None if self.key is None else _pem(self.key, "key"),
                None if self.cert is None else _pem(self.cert, "cert"),
            )
        if self.authenticates and channel_credentials is None:
            channel_credentials = _local(address)  # refuses another host in clear text
        if channel_credentials is None:
            return grpc.insecure_channel(address, options=settings)
        channel = grpc.secure_channel(address, channel_credentials, options=settings)
        if not self.authenticates:
            return channel
        # An interceptor, not call credentials: gRPC runs a metadata plugin on a thread
        # of its own per call, which cost a 1-record query 0.45 ms (bench/security.py).
        return grpc.intercept_channel(channel, _Authorize(self._authorization()))

    def _authorization(self) -> _Authorization | _TokenFile:
        if self.username:
            password = self.password
            if self.password_file is not None:
                password = _secret(self.password_file, "password_file")
            pair = f"{self.username}:{password}".encode()
            return _Authorization(f"Basic {base64.b64encode(pair).decode()}")
        if self.token_file is not None:
            return _TokenFile(self.token_file)
        return _Authorization(f"Bearer {_token(self.token, named('token'))}")


def with_client_name(channel: grpc.Channel, client_name: str) -> grpc.Channel:
    """``channel`` with every call naming its client ``client_name`` (metadata
    ``sow-client-name``): the name the service's client-status events give it."""
    return grpc.intercept_channel(channel, _Authorize(_Authorization(client_name), CLIENT_NAME))


#: The metadata entry a client names itself with (processor/requests/events.py).
CLIENT_NAME = "sow-client-name"


class _Authorization:
    """One fixed ``authorization`` value for every call."""

    def __init__(self, value: str) -> None:
        self._value = value

    def value(self) -> str:
        return self._value


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    """A call's details with the ``authorization`` entry added."""


class _Authorize(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg]
):
    """Adds ``authorization`` to every call's metadata (the channel is TLS, or local);
    with another ``key``, that entry (``sow-client-name``: :func:`with_client_name`)."""

    def __init__(self, source: _Authorization | _TokenFile, key: str = "authorization") -> None:
        self._source = source
        self._key = key

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), (self._key, self._source.value())]
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


class _TokenFile:
    """Sends ``authorization: Bearer`` with the token in ``path``, read again whenever
    the file changes (its inode, size or modification time: a rewrite, or a renamed or
    re-linked new file, as Kubernetes mounts a refreshed secret). Thread-safe: gRPC calls
    it from its own threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._value = ""
        self.reads = 0
        self.value()  # an unreadable file is said now, not at the first call

    def value(self) -> str:
        """The ``authorization`` value, from the file as it is now."""
        try:
            status = os.stat(self.path)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the token file {self.path} ({named('token_file')}): "
                f"{exc.strerror or exc}"
            ) from None
        seen = (status.st_ino, status.st_size, status.st_mtime_ns)
        with self._lock:
            if seen != self._seen:
                token = _token(_secret(self.path, "token_file"), f"the token file {self.path}")
                self._value, self._seen = f"Bearer {token}", seen
                self.reads += 1
            return self._value


def _secret(path: Path, field_name: str) -> str:
    """The text of a secret's file, without its surrounding whitespace."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigurationError(f"cannot read {path} ({named(field_name)}): {reason}") from None


def _token(token: str, source: str) -> str:
    token = token.strip()
    if not token:
        raise ConfigurationError(f"{source} is empty: it must hold the bearer token")
    if any(c.isspace() for c in token):
        raise ConfigurationError(
            f"{source} holds more than one word: give the token alone (no 'Bearer ')"
        )
    return token


def _pem(path: Path, field_name: str) -> bytes:
    """A PEM file's bytes, or a ConfigurationError naming the setting."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {path} ({named(field_name)}): {exc.strerror or exc}"
        ) from None
    if b"-----BEGIN" not in data:
        raise ConfigurationError(f"{path} ({named(field_name)}) is not a PEM file")
    if field_name == "key" and b"ENCRYPTED" in data:
        raise ConfigurationError(
            f"{path} ({named('key')}) is encrypted; gRPC needs the key unencrypted "
            "(openssl pkey -in KEY -out PLAIN)"
        )
    return data


def _local(address: str) -> grpc.ChannelCredentials:
    """gRPC's local credentials, which carry call credentials over plaintext to a
    loopback address only; a ConfigurationError for any other address."""
    if address.startswith("unix:"):
        return grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
    if not is_loopback(address):
        raise ConfigurationError(
            f"credentials would go to {address} in clear text: give {named('ca')} for a "
            "TLS channel (plaintext carries credentials only to a loopback address)"
        )
    return grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``host:port``, ``[v6]:port``, with or without a ``dns:``,
    ``ipv4:`` or ``ipv6:`` scheme) names this host's loopback interface."""
    target = address
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        target = target.removeprefix(scheme)
    host = target.rsplit(":", 1)[0] if target.count(":") == 1 or "]" in target else target
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
