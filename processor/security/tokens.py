"""JWT bearer tokens: :class:`TokenVerifier` (see :mod:`processor.security.authentication`).

The signature is checked with the configured keys, and only with the algorithms those
keys are for (an RSA or EC public key, an Ed25519 key, an HMAC secret of 32 bytes or more,
or each key of a JWKS file): never ``none``, never an HMAC keyed with a public key. Then
exp and nbf (with :data:`TOKEN_LEEWAY_S` of clock skew), aud (always: a service accepts
only tokens issued for it) and iss (when configured). The principal is the ``sub`` claim;
its roles a configurable claim (``a.b`` for a nested one), a list or a space- or
comma-separated string. A verified token is remembered until it expires or for
:data:`TOKEN_CACHE_S`, whichever is first. Thread-safe.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from cryptography.x509 import load_pem_x509_certificate

from processor.errors import AuthenticationError, ConfigurationError
from processor.security.authentication import (
    MAX_CREDENTIAL_BYTES,
    Remembered,
    credential_digest,
    roles_from,
)
from processor.security.context import Principal

#: How long a verified token is remembered at most (never past its exp).
TOKEN_CACHE_S = 300.0
#: Clock skew tolerated on a token's exp and nbf.
TOKEN_LEEWAY_S = 10

_TOKEN_SHAPE = re.compile(rb"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_HMAC = ("HS256", "HS384", "HS512")


class TokenVerifier:
    """Verifies JWT bearer tokens: signature with the configured keys (algorithms
    allowed: those the keys are for), then exp, nbf, aud and iss. Construct with
    :meth:`from_key_file` or :meth:`from_jwks_file`."""

    def __init__(
        self,
        keys: Callable[[str | None], tuple[Any, tuple[str, ...]]],
        audience: str,
        issuer: str | None = None,
        roles_claim: str = "roles",
    ) -> None:
        """``keys(kid)``: the key for a token's ``kid`` and the algorithms it may sign
        with (AuthenticationError ``unknown-key`` when there is none)."""
        self._keys = keys
        self._audience = audience
        self._issuer = issuer or None
        self._roles_claim = roles_claim.split(".")
        self._remembered = Remembered()
        self._lock = threading.Lock()

    @classmethod
    def from_key_file(cls, path: Path, audience: str, **options: Any) -> TokenVerifier:
        """A public key (or certificate) PEM file, or an HMAC secret file (32 bytes or more)."""
        key, algorithms = _read_key(path)
        return cls(lambda _kid: (key, algorithms), audience, **options)

    @classmethod
    def from_jwks_file(cls, path: Path, audience: str, **options: Any) -> TokenVerifier:
        """A JWKS file (``{"keys": [...]}``); re-read when a token names a key it lacks
        and the file has changed (key rotation without a restart)."""
        return cls(_JwksFile(path).key, audience, **options)

    def verify(self, token: str) -> Principal:
        """The principal a valid token names; AuthenticationError otherwise."""
        raw = token.encode("ascii", "replace")
        if len(raw) > MAX_CREDENTIAL_BYTES or not _TOKEN_SHAPE.match(raw):
            raise AuthenticationError(
                "the bearer token is not a JWT (three Base64url parts, at most "
                f"{MAX_CREDENTIAL_BYTES} bytes)",
                "malformed-token",
            )
        key = credential_digest(raw)
        now = time.time()
        with self._lock:
            known = self._remembered.get(key, now)
        if known is not None:
            return known
        claims = self._claims(token)
        principal = Principal(claims["sub"], self.roles_from(claims), "token")
        until = min(float(claims["exp"]), now + TOKEN_CACHE_S)
        with self._lock:
            self._remembered.put(key, principal, until)
        return principal

    def _claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise AuthenticationError(
                "the bearer token's header is not JSON", "malformed-token"
            ) from None
        kid = header.get("kid")
        key, algorithms = self._keys(kid if isinstance(kid, str) else None)
        algorithm = header.get("alg")
        if algorithm not in algorithms:
            raise AuthenticationError(
                f"the bearer token is signed with {str(algorithm)[:16]!r}; this service "
                f"accepts {', '.join(algorithms)}",
                "disallowed-algorithm",
            )
        required = ["exp", "sub", "aud"] + (["iss"] if self._issuer else [])
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self._issuer,
                leeway=TOKEN_LEEWAY_S,
                options={"require": required},
            )
        except jwt.InvalidTokenError as exc:
            raise _token_refusal(exc) from None
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise AuthenticationError("the bearer token's sub is not a name", "missing-claim")
        return claims

    def roles_from(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value: Any = claims
        for part in self._roles_claim:
            value = value.get(part) if isinstance(value, Mapping) else None
        return roles_from(value)


#: PyJWT's refusals -> (audit reason, what the caller is told).
_TOKEN_REFUSALS: tuple[tuple[type[Exception], str, str], ...] = (
    (jwt.ExpiredSignatureError, "expired-token", "the bearer token has expired"),
    (jwt.ImmatureSignatureError, "token-not-yet-valid", "the bearer token is not valid yet"),
    (jwt.InvalidAudienceError, "wrong-audience", "the bearer token is for another audience"),
    (jwt.InvalidIssuerError, "wrong-issuer", "the bearer token is from another issuer"),
    (jwt.InvalidSignatureError, "bad-signature", "the bearer token's signature is not valid"),
    (jwt.MissingRequiredClaimError, "missing-claim", "the bearer token lacks a claim"),
    (jwt.InvalidAlgorithmError, "disallowed-algorithm", "the bearer token's algorithm"),
    (jwt.DecodeError, "malformed-token", "the bearer token cannot be decoded"),
)


def _token_refusal(exc: jwt.InvalidTokenError) -> AuthenticationError:
    for kind, reason, text in _TOKEN_REFUSALS:
        if isinstance(exc, kind):
            detail = f": {exc}" if reason in ("missing-claim", "disallowed-algorithm") else ""
            return AuthenticationError(text + detail, reason)
    return AuthenticationError(f"the bearer token is not valid: {type(exc).__name__}", "bad-token")


def _read_key(path: Path) -> tuple[Any, tuple[str, ...]]:
    """The verification key in ``path`` and the algorithms it allows."""
    data = _read(path, "SOW_JWT_KEY")
    if b"PRIVATE KEY-----" in data:
        raise ConfigurationError(
            f"SOW_JWT_KEY ({path}) holds a private key: give the issuer's public key "
            "(or its certificate), which is all verifying needs"
        )
    if data.lstrip().startswith(b"-----BEGIN"):
        public: Any
        try:
            if b"CERTIFICATE-----" in data:
                public = load_pem_x509_certificate(data).public_key()
            else:
                public = load_pem_public_key(data)
        except ValueError as exc:
            raise ConfigurationError(f"SOW_JWT_KEY ({path}) is not a PEM key: {exc}") from None
        if isinstance(public, rsa.RSAPublicKey):
            return public, _RSA
        if isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name in _EC:
            return public, (_EC[public.curve.name],)
        if isinstance(public, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
            return public, ("EdDSA",)
        raise ConfigurationError(
            f"SOW_JWT_KEY ({path}): a {type(public).__name__} cannot verify tokens (give an "
            "RSA, P-256/384/521 or Ed25519 public key)"
        )
    secret = data.strip()
    if len(secret) < 32:
        raise ConfigurationError(
            f"SOW_JWT_KEY ({path}) is neither a PEM public key nor an HMAC secret of at "
            f"least 32 bytes (it has {len(secret)})"
        )
    return secret, _HMAC


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{setting} ({path}) cannot be read: {exc.strerror}") from None


class _JwksFile:
    """The keys of a JWKS file, by ``kid``; re-read when an unknown kid arrives and the
    file changed since (at most once a second)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp, self._keys = self._load()

    def _load(self) -> tuple[float, dict[str | None, tuple[Any, tuple[str, ...]]]]:
        data = _read(self._path, "SOW_JWKS_FILE")
        stamp = self._path.stat().st_mtime
        try:
            keys = jwt.PyJWKSet.from_dict(json.loads(data)).keys
        except (ValueError, jwt.PyJWTError) as exc:
            raise ConfigurationError(
                f"SOW_JWKS_FILE ({self._path}) is not a JWKS with a usable key: {exc}"
            ) from None
        found: dict[str | None, tuple[Any, tuple[str, ...]]] = {}
        for key in keys:
            if key.algorithm_name == "none" or key.public_key_use not in (None, "sig"):
                continue
            found[key.key_id] = (key, (key.algorithm_name,))
        if not found:
            raise ConfigurationError(f"SOW_JWKS_FILE ({self._path}) has no signing key")
        return stamp, found

    def key(self, kid: str | None) -> tuple[Any, tuple[str, ...]]:
        keys = self._keys
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        if kid in keys:
            return keys[kid]
        self._reload()
        if kid in self._keys:
            return self._keys[kid]
        raise AuthenticationError(
            "the bearer token names no key of this service's JWKS"
            if kid
            else "the bearer token has no kid, and the JWKS has several keys",
            "unknown-key",
        )

    def _reload(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._checked < 1.0:
                return
            self._checked = now
            try:
                if self._path.stat().st_mtime == self._stamp:
                    return
                self._stamp, self._keys = self._load()
            except (OSError, ConfigurationError):  # a half-written file: keep the old keys
                return
