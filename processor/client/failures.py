"""The client's one translation of a gRPC failure into its :class:`ServiceError`.

A failure of the channel's security (a TLS handshake that failed, a token file that
cannot be read) becomes a :class:`ChannelSecurityError` naming the cause and the setting
to fix; UNAUTHENTICATED and PERMISSION_DENIED keep their code and say what to do. Every
message is one line.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from processor.client.credentials import ClientSecurity
from processor.client.options import named
from processor.errors import ChannelSecurityError, ServiceError

#: A client's translation, bound to its address and security.
Translate = Callable[[grpc.RpcError], ServiceError]

#: Handshake failures gRPC reports (in an UNAVAILABLE's details) -> what they mean.
_HANDSHAKE = (
    (
        "Hostname Verification",
        "its certificate is not for the name used: connect by a name the certificate "
        f"carries, or give that name with {named('server_name')}",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "its certificate is not signed by the CA given (or expired): give the CA that "
        f"signed it with {named('ca')}",
    ),
    (
        "ALERT_",  # the service's TLS alert: unknown CA, bad or missing client certificate
        "it refused this client's certificate, or wants one: give one its client CAs "
        f"signed with {named('cert')} and {named('key')}",
    ),
    (
        "WRONG_VERSION_NUMBER",
        f"it does not speak TLS (a plaintext port?): drop {named('ca')}, or use its TLS port",
    ),
)


def translate(
    exc: grpc.RpcError, address: str = "", security: ClientSecurity | None = None
) -> ServiceError:
    """A gRPC failure as the client's ServiceError (its status code's name, details), a
    ChannelSecurityError for a failure of the channel's security. ``address`` and
    ``security`` (the call's) let the message say where and what to fix."""
    status = exc.code()
    code = status.name if status else "UNKNOWN"
    details = " ".join((exc.details() or "").split())  # one line
    security = security or ClientSecurity()
    where = f"the query service at {address}" if address else "the query service"
    if code == "UNAUTHENTICATED":
        if security.authenticates:
            hint = (
                f"{where} refused the credentials sent ({security.describe()}): a token "
                "may have expired or be for another service, a password may be wrong"
            )
        else:
            hint = (
                f"{where} asks who you are and no credentials were sent: give a token "
                f"({named('token_file')} or {named('token')}) or a user and password "
                f"({named('username')} with {named('password_file')} or {named('password')})"
            )
        return ServiceError(code, f"{details} ({hint})")
    if code == "PERMISSION_DENIED":
        return ServiceError(
            code,
            f"{details} ({where} authenticated this client ({security.describe()}) but "
            "does not entitle it to this: ask its administrator for the right)",
        )
    if code != "UNAVAILABLE":
        return ServiceError(code, details)
    if "Getting metadata from plugin failed" in details:
        cause = details.split("failed with error:", 1)[-1].strip()
        return ChannelSecurityError(code, f"cannot send this client's credentials: {cause}")
    for marker, meaning in _HANDSHAKE:
        if marker in details:
            return ChannelSecurityError(
                code, f"the TLS handshake with {where} failed: {meaning} [{_last(details)}]"
            )
    if "failed to connect" in details and details.endswith("Socket closed"):
        if security.tls:
            return ChannelSecurityError(
                code,
                f"{where} closed the connection during the TLS handshake: it probably "
                f"requires a client certificate ({named('cert')} and {named('key')}) or "
                "does not trust the one given (signed by a CA it does not know, or expired)",
            )
        return ServiceError(
            code,
            f"{details} ({where} closed the connection at once: if it serves TLS only, "
            f"give {named('ca')})",
        )
    return ServiceError(code, details)


def _last(details: str) -> str:
    """gRPC's own words for the handshake failure, without its preamble."""
    tail = details.rsplit("ipv4:", 1)[-1].rsplit("ipv6:", 1)[-1]
    return tail.split(": ", 1)[-1] if ": " in tail else tail


def bound(address: str, security: ClientSecurity) -> Translate:
    """:func:`translate` for the calls of one client."""
    return lambda exc: translate(exc, address, security)
