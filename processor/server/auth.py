"""gRPC TLS and logon: each call's :class:`~processor.security.RequestContext`.

:func:`server_security` builds, from the settings, what :func:`start_server` takes: the
server's TLS credentials (None: plaintext) and the ``contexts`` callable each RPC calls
once at its start (None: :func:`processor.server.calls.open_context`, anonymous with
every right, as with security off). With logon on (``SOW_AUTH``) that callable is an
:class:`Authenticator`:

1. the call's credentials: an ``authorization`` metadata entry, ``Bearer <jwt>`` or
   ``Basic <base64 user:password>``, checked by the configured method; without one, the
   client certificate the TLS handshake verified (``x509_common_name``, else
   ``x509_subject_alternative_name`` of ``context.auth_context()``). A call carrying a
   bad ``authorization`` is refused even over a valid certificate: never a silent fall
   back to another identity. No credentials at all: refused.
2. the principal's rights (``rights_source.rights_for``) and ``check_logon``.
3. a refusal aborts the call, UNAUTHENTICATED (PERMISSION_DENIED for a logon the
   entitlements refuse), before any data, and goes to the :class:`Audit`.

This module and :mod:`processor.server.audit` are the only places that read credentials
from gRPC; :mod:`processor.security.authentication` does the checking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from processor.config import AUTH_METHODS, Settings
from processor.errors import AuthenticationError, ConfigurationError, NotEntitledError
from processor.security import EVERYONE, Principal, RequestContext, RightsSource
from processor.security.authentication import (
    PasswordFile,
    basic_credentials,
    certificate_principal,
)
from processor.security.entitlements import Entitlements
from processor.security.tokens import TokenVerifier
from processor.server.audit import Audit
from processor.subscriptions.hub import SubscriptionHub
from processor.subscriptions.queues import QueueHub
from processor.subscriptions.rights import refresh_queue_rights, refresh_rights
from processor.topology.model import Topology

#: Names of the security settings, for messages.
_ENV = Settings.ENVIRONMENT


class Authenticator:
    """A ``ContextOf``: authenticates a call and resolves its rights (module docstring).
    Thread-safe; a successful check is cached by the checkers, so a call's cost is a
    metadata lookup, a dictionary hit and the rights lookup."""

    def __init__(
        self,
        rights: RightsSource,
        audit: Audit,
        *,
        passwords: PasswordFile | None = None,
        tokens: TokenVerifier | None = None,
        certificates: bool = False,
        roles_of: Callable[[str], frozenset[str]] | None = None,
    ) -> None:
        """``passwords``: Basic logon (None: refused); ``tokens``: Bearer logon;
        ``certificates``: the verified client certificate names the principal, with the
        roles ``roles_of`` gives its name (the users file's)."""
        self.rights = rights
        self.audit = audit
        self._passwords = passwords
        self._tokens = tokens
        self._certificates = certificates
        self._roles_of = roles_of

    def __call__(self, context: Any) -> RequestContext:
        claimed = ["unauthenticated"]
        try:
            principal = self._principal(context, claimed)
            generation = self.rights.generation
            rights = self.rights.rights_for(principal)
            rights.check_logon()
        except AuthenticationError as exc:
            self.audit.refused(claimed[0], exc.reason, f"{exc} (from {context.peer()})")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            raise  # abort raises; this line keeps the type checker sure of it
        except NotEntitledError as exc:
            self.audit.refused(claimed[0], "not-entitled", str(exc))
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            raise
        remaining: float | None = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        return RequestContext(principal, rights, deadline, generation)

    def _principal(self, context: Any, claimed: list[str]) -> Principal:
        """The caller's principal; ``claimed[0]`` is set to the name it claims."""
        given = [v for k, v in context.invocation_metadata() if k == "authorization"]
        if len(given) > 1:
            raise AuthenticationError(
                "the call carries several authorization entries; send one",
                "malformed-credentials",
            )
        if given:
            value = given[0]
            text = value if isinstance(value, str) else bytes(value).decode("latin-1")
            scheme, _, credentials = text.strip().partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer" and self._tokens is not None:
                principal = self._tokens.verify(credentials.strip())
                claimed[0] = principal.name
                return principal
            if scheme == "basic" and self._passwords is not None:
                name, password = basic_credentials(credentials)
                claimed[0] = name
                return self._passwords.authenticate(name, password, _host(context.peer()))
            raise AuthenticationError(
                f"the authorization is not one this service takes ({self._accepted()})",
                "unsupported-credentials",
            )
        if self._certificates:
            auth = context.auth_context()
            names = [n.decode("utf-8", "replace") for n in auth.get("x509_common_name", ())]
            sans = [
                n.decode("utf-8", "replace") for n in auth.get("x509_subject_alternative_name", ())
            ]
            if names or sans:
                principal = certificate_principal(names, sans, self._roles_of)
                claimed[0] = principal.name
                return principal
        raise AuthenticationError(
            f"this service needs a logon ({self._accepted()}); the call carried none",
            "no-credentials",
        )

    def _accepted(self) -> str:
        ways = []
        if self._tokens is not None:
            ways.append("authorization: Bearer <token>")
        if self._passwords is not None:
            ways.append("authorization: Basic <base64 user:password>")
        if self._certificates:
            ways.append("a client certificate")
        return " or ".join(ways)


def _host(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``ipv4:127.0.0.1`` (the throttle's source)."""
    return peer.rpartition(":")[0] or peer


@dataclass
class ServerSecurity:
    """What :func:`start_server` takes, and what is on (for ``sow check-config``)."""

    contexts: Authenticator | None = None
    credentials: Any = None
    audit: Audit = field(default_factory=Audit)
    #: Whose rights the calls get: EVERYONE, or the entitlements file loaded (its reload
    #: is the caller's to start: ``Entitlements.watch``).
    rights: RightsSource = EVERYONE
    #: One line per feature that is on, e.g. "gRPC TLS: on, client certificates required".
    summary: list[str] = field(default_factory=list)

    def follow(self, hub: SubscriptionHub | None, queues: QueueHub | None = None) -> None:
        """Reload the entitlements file when it changes, and move the open
        subscriptions onto their principals' new rights (records they may no longer see
        leave as OOFs: :mod:`processor.subscriptions.rights`)."""
        rights = self.rights
        if not isinstance(rights, Entitlements):
            return
        if hub is not None:
            rights.on_reload(lambda: refresh_rights(hub, rights))
        if queues is not None:
            rights.on_reload(lambda: refresh_queue_rights(queues, rights))
        rights.watch()

    def close(self) -> None:
        """Stop following the entitlements file."""
        if isinstance(self.rights, Entitlements):
            self.rights.close()


def server_security(
    settings: Settings, observer: Any = None, topology: Topology | None = None
) -> ServerSecurity:
    """TLS credentials and the logon from ``settings``; ConfigurationError naming the
    setting when they do not fit together or a file is missing. With ``observer``
    (:class:`processor.observability.metrics.Observer`) the refused calls are exported.
    With ``topology``, the entitlements file and logon it names fill in the settings left
    at their default (the settings win: :meth:`SecuritySpec.under`). With no security
    setting given this returns plaintext, no logon: ``sow serve``'s default."""
    named: list[str] = []
    given = settings
    if topology is not None and topology.security is not None:
        settings, named = topology.security.under(settings)
    methods = _methods(settings)
    security = ServerSecurity(summary=named)
    security.credentials = _credentials(settings, methods, security.summary)
    rights = security.rights = _rights(settings)
    if settings.entitlements is not None:
        security.summary.append(f"entitlements: {settings.entitlements}")
    if methods:
        passwords = None
        if settings.users_file is not None:
            passwords = PasswordFile.load(_existing(settings, "users_file"))
        tokens = _tokens(settings) if "token" in methods else None
        security.contexts = Authenticator(
            rights,
            security.audit,
            passwords=passwords if "password" in methods else None,
            tokens=tokens,
            certificates="certificate" in methods,
            roles_of=passwords.roles_of if passwords is not None else None,
        )
        security.summary.append(f"gRPC logon: {', '.join(methods)}")
    elif settings.entitlements is not None:
        named_by = (
            f"{_ENV['entitlements']} is set"
            if given.entitlements is not None
            else f"the topology names entitlements ({settings.entitlements})"
        )
        raise ConfigurationError(
            f"{named_by} but no logon is ({_ENV['auth']}): entitlements need to know who "
            "calls; set SOW_AUTH (or the topology's logon) to certificate, token and/or password"
        )
    if observer is not None:
        from processor.observability.metrics import RefusalCollector

        observer.registry.register(RefusalCollector(security.audit.counts))
    return security


def _methods(settings: Settings) -> list[str]:
    """The logon methods asked for, checked against what each needs."""
    methods = [m.strip().lower() for m in settings.auth.split(",") if m.strip()]
    wrong = sorted(set(methods) - set(AUTH_METHODS))
    if wrong:
        raise ConfigurationError(
            f"{_ENV['auth']} takes {', '.join(AUTH_METHODS)}; {', '.join(wrong)} is not one"
        )
    if "password" in methods and settings.users_file is None:
        raise ConfigurationError(
            f"{_ENV['auth']} includes password but {_ENV['users_file']} is not set: password "
            "logon needs a users file (make its lines with `sow hash-password`)"
        )
    if "token" in methods:
        if settings.jwt_key is None and settings.jwks_file is None:
            raise ConfigurationError(
                f"{_ENV['auth']} includes token but neither {_ENV['jwt_key']} nor "
                f"{_ENV['jwks_file']} is set: token logon needs the issuer's key"
            )
        if settings.jwt_key is not None and settings.jwks_file is not None:
            raise ConfigurationError(
                f"both {_ENV['jwt_key']} and {_ENV['jwks_file']} are set; give one"
            )
        if not settings.jwt_audience:
            raise ConfigurationError(
                f"{_ENV['auth']} includes token but {_ENV['jwt_audience']} is not set: "
                "tokens are accepted only for this service's audience"
            )
    if "certificate" in methods and settings.grpc_client_certs != "require":
        raise ConfigurationError(
            f"{_ENV['auth']} includes certificate but {_ENV['grpc_client_certs']} is "
            f"{settings.grpc_client_certs!r}: set it to require (with "
            f"{_ENV['grpc_tls_client_ca']})"
        )
    return methods


def _existing(settings: Settings, name: str) -> Path:
    """The file a path setting names; ConfigurationError when it is not there."""
    path = getattr(settings, name)
    if path is None or not Path(path).is_file():
        raise ConfigurationError(
            f"{_ENV[name]} names {path}, which is not a file"
            if path is not None
            else f"{_ENV[name]} is not set"
        )
    return Path(path)


def _credentials(settings: Settings, methods: list[str], summary: list[str]) -> Any:
    """grpc.ssl_server_credentials from the TLS settings (None: plaintext)."""
    cert, key, ca = settings.grpc_tls_cert, settings.grpc_tls_key, settings.grpc_tls_client_ca
    require = settings.grpc_client_certs == "require"
    if cert is None and key is None:
        if ca is not None or require:
            raise ConfigurationError(
                f"client certificates ({_ENV['grpc_tls_client_ca']}, "
                f"{_ENV['grpc_client_certs']}) need gRPC TLS: set {_ENV['grpc_tls_cert']} "
                f"and {_ENV['grpc_tls_key']}"
            )
        if "password" in methods or "token" in methods:
            summary.append("gRPC TLS: off (passwords and tokens cross the network in clear)")
        return None
    if cert is None or key is None:
        given, missing = (
            ("grpc_tls_cert", "grpc_tls_key") if key is None else ("grpc_tls_key", "grpc_tls_cert")
        )
        raise ConfigurationError(
            f"{_ENV[given]} is set but {_ENV[missing]} is not: gRPC TLS needs the "
            "certificate chain and its private key"
        )
    if require and ca is None:
        raise ConfigurationError(
            f"{_ENV['grpc_client_certs']}=require needs {_ENV['grpc_tls_client_ca']}: the CAs "
            "client certificates must chain to"
        )
    chain = _existing(settings, "grpc_tls_cert").read_bytes()
    private = _existing(settings, "grpc_tls_key").read_bytes()
    roots = _existing(settings, "grpc_tls_client_ca").read_bytes() if ca is not None else None
    for name, data, marker in (
        ("grpc_tls_cert", chain, b"CERTIFICATE-----"),
        ("grpc_tls_key", private, b"PRIVATE KEY-----"),
    ):
        if marker not in data:
            raise ConfigurationError(f"{_ENV[name]} ({getattr(settings, name)}) is not PEM")
    summary.append(
        "gRPC TLS: on, client certificates "
        + ("required (mutual TLS)" if require else "not asked for")
    )
    return grpc.ssl_server_credentials([(private, chain)], roots, require_client_auth=require)


def _tokens(settings: Settings) -> TokenVerifier:
    options = {"issuer": settings.jwt_issuer or None, "roles_claim": settings.jwt_roles_claim}
    if settings.jwks_file is not None:
        path = _existing(settings, "jwks_file")
        return TokenVerifier.from_jwks_file(path, settings.jwt_audience, **options)
    path = _existing(settings, "jwt_key")
    return TokenVerifier.from_key_file(path, settings.jwt_audience, **options)


def _rights(settings: Settings) -> RightsSource:
    """EVERYONE without an entitlements file; else the file, loaded."""
    if settings.entitlements is None:
        return EVERYONE
    from processor.security.entitlements import Entitlements

    return Entitlements.load(_existing(settings, "entitlements"))
