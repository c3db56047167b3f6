"""Authentication, independent of transports: who a caller is, from what it presents.

Three ways to prove it, each returning a :class:`~processor.security.context.Principal`
or raising :class:`~processor.errors.AuthenticationError` with a ``reason`` the audit
counts and a message naming the cause (never the secret):

* :class:`PasswordFile`: a user name and password checked against a users file of
  salted, slow scrypt hashes (:func:`hash_password` makes them; ``sow hash-password``).
  A check that succeeded is remembered for :data:`PASSWORD_CACHE_S` (keyed by a hash of
  the credentials), so a client sending its password on every call costs one scrypt a
  minute, not one per call; failed checks are throttled per source and user
  (:class:`FailureThrottle`), so a flood of wrong passwords costs little CPU.
* :class:`TokenVerifier`: a JWT bearer token verified with PyJWT against a public key,
  an HMAC secret or a JWKS file; the algorithms allowed follow from the keys (never
  ``none``); expiry, not-before, audience and issuer are checked; the principal is the
  ``sub`` claim, its roles a configurable claim.
* :func:`certificate_principal`: the identity of a client certificate the transport
  has verified (its CN, else its first SAN).

Absurd input (a megabyte token, garbage) is refused by its size and shape before any
expensive work. Every class here is thread-safe.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import yaml
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from cryptography.x509 import load_pem_x509_certificate

from processor.errors import AuthenticationError, ConfigurationError
from processor.security.context import Principal

#: The longest credential (a token, a Basic header's text) looked at; longer is refused.
MAX_CREDENTIAL_BYTES = 8192
#: The longest user name and password accepted.
MAX_NAME_CHARS = 256
MAX_PASSWORD_CHARS = 1024
#: How long a successful password check or token verification is remembered.
PASSWORD_CACHE_S = 60.0
TOKEN_CACHE_S = 300.0
#: Entries the caches hold at most (they are emptied when full).
CACHE_ENTRIES = 10_000
#: Clock skew tolerated on a token's exp and nbf.
TOKEN_LEEWAY_S = 10
#: scrypt's parameters for new hashes: 16 MiB and ~50 ms per check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024
#: Password checks running at once at most: the others wait (a core stays free).
HASHING_SLOTS = 1
#: Failed logons tolerated per (source, user) and per source within a window.
FAILURES_PER_USER, FAILURES_PER_SOURCE, FAILURE_WINDOW_S = 5, 50, 30.0

_TOKEN_SHAPE = re.compile(rb"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
_HMAC = ("HS256", "HS384", "HS512")


def _digest(*parts: str | bytes) -> bytes:
    """A cache key: the SHA-256 of the parts (the credentials themselves are not kept)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.digest()


class _Remembered:
    """Successful checks, by the digest of their credentials, until they expire."""

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[Principal, float]] = {}

    def get(self, key: bytes, now: float) -> Principal | None:
        found = self._entries.get(key)
        if found is None or found[1] <= now:
            return None
        return found[0]

    def put(self, key: bytes, principal: Principal, until: float) -> None:
        if len(self._entries) >= CACHE_ENTRIES:
            self._entries.clear()
        self._entries[key] = (principal, until)


# ---- passwords ----


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """A salted scrypt hash of ``password`` as stored in a users file:
    ``scrypt$N$r$p$salt$hash`` (salt and hash in unpadded Base64)."""
    salt = os.urandom(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(key)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


@dataclass(frozen=True, slots=True)
class _Hash:
    n: int
    r: int
    p: int
    salt: bytes
    key: bytes

    @classmethod
    def parse(cls, text: str, where: str) -> _Hash:
        parts = text.split("$")
        try:
            if len(parts) != 6 or parts[0] != "scrypt":
                raise ValueError("not scrypt$N$r$p$salt$hash")
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            if n < 2**10 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16:
                raise ValueError(f"scrypt parameters N={n} r={r} p={p} are out of range")
            return cls(n, r, p, _unb64(parts[4]), _unb64(parts[5]))
        except ValueError as exc:
            raise ConfigurationError(
                f"{where}: the password hash is not one `sow hash-password` makes ({exc})"
            ) from None

    def matches(self, password: str) -> bool:
        key = hashlib.scrypt(
            password.encode(),
            salt=self.salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=_SCRYPT_MAXMEM,
            dklen=len(self.key),
        )
        return hmac.compare_digest(key, self.key)


@dataclass(frozen=True, slots=True)
class _User:
    hash: _Hash | None
    roles: frozenset[str]


class FailureThrottle:
    """Failed logons per (source, user) and per source in a sliding window: past the
    limits, further attempts from there are refused without checking anything."""

    def __init__(
        self,
        per_user: int = FAILURES_PER_USER,
        per_source: int = FAILURES_PER_SOURCE,
        window_s: float = FAILURE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = (per_user, per_source)
        self._window = window_s
        self._clock = clock
        self._failures: dict[tuple[str, str | None], list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str | None], now: float) -> list[float]:
        times = self._failures.get(key, [])
        while times and times[0] <= now - self._window:
            times.pop(0)
        return times

    def check(self, source: str, user: str) -> None:
        """Raise AuthenticationError (``throttled``) while ``source`` or ``source`` and
        ``user`` are over their limits."""
        now = self._clock()
        with self._lock:
            for key, limit in (((source, user), self._limits[0]), ((source, None), self._limits[1])):
                if len(self._recent(key, now)) >= limit:
                    raise AuthenticationError(
                        f"too many failed logons from {source}; retry in {self._window:g}s",
                        "throttled",
                    )

    def failed(self, source: str, user: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._failures) >= CACHE_ENTRIES:
                self._failures = {k: v for k, v in self._failures.items() if self._recent(k, now)}
            for key in ((source, user), (source, None)):
                self._failures.setdefault(key, []).append(now)
                del self._failures[key][: -max(self._limits)]


class PasswordFile:
    """The users file: each user's scrypt hash and roles.

    YAML (``users: {alice: {password: "scrypt$...", roles: [traders]}}``; a user without
    a password has roles only, for a certificate or token of that name) or lines of
    ``user:hash`` or ``user:hash:role,role`` (``#`` starts a comment)."""

    def __init__(self, users: Mapping[str, _User], throttle: FailureThrottle | None = None) -> None:
        self._users = dict(users)
        self._throttle = throttle or FailureThrottle()
        self._remembered = _Remembered()
        self._slots = threading.BoundedSemaphore(HASHING_SLOTS)
        self._lock = threading.Lock()
        self._dummy = _Hash.parse(hash_password("not a password"), "the dummy hash")

    @classmethod
    def load(cls, path: Path, setting: str = "SOW_USERS_FILE") -> PasswordFile:
        """Read a users file; ConfigurationError naming ``setting``, the file and the line."""
        where = f"{setting} ({path})"
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigurationError(f"{where} cannot be read: {exc.strerror}") from None
        if re.search(r"^users\s*:", text, re.MULTILINE):
            return cls(_yaml_users(text, where))
        users: dict[str, _User] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, rest = line.partition(":")
            hashed, _, roles = rest.partition(":")
            if not name or not hashed:
                raise ConfigurationError(f"{where} line {number}: expected user:hash[:roles]")
            users[name] = _User(_Hash.parse(hashed, f"{where} line {number}"), _roles(roles))
        return cls(users)

    def __len__(self) -> int:
        return len(self._users)

    def roles_of(self, name: str) -> frozenset[str]:
        """The roles the file gives ``name`` (none when it does not list it)."""
        user = self._users.get(name)
        return user.roles if user is not None else frozenset()

    def authenticate(self, name: str, password: str, source: str = "") -> Principal:
        """The principal ``name`` if ``password`` is its password; else
        AuthenticationError (``bad-password``, ``throttled``, ``malformed-credentials``)."""
        if not name or len(name) > MAX_NAME_CHARS or len(password) > MAX_PASSWORD_CHARS:
            raise AuthenticationError(
                "the user name or password is empty or too long", "malformed-credentials"
            )
        key = _digest(name, password)
        now = time.monotonic()
        with self._lock:
            known = self._remembered.get(key, now)
        if known is not None:
            return known
        self._throttle.check(source, name)
        user = self._users.get(name)
        with self._slots:
            # An unknown user costs a hash too: the time taken says nothing of who exists.
            ok = (user.hash if user is not None and user.hash else self._dummy).matches(password)
        if user is None or user.hash is None or not ok:
            self._throttle.failed(source, name)
            raise AuthenticationError(f"wrong user name or password for {name!r}", "bad-password")
        principal = Principal(name, user.roles, "password")
        with self._lock:
            self._remembered.put(key, principal, now + PASSWORD_CACHE_S)
        return principal


def _roles(text: Any) -> frozenset[str]:
    if isinstance(text, str):
        return frozenset(r.strip() for r in re.split(r"[,\s]+", text) if r.strip())
    if isinstance(text, list):
        return frozenset(str(r) for r in text)
    return frozenset()


def _yaml_users(text: str, where: str) -> dict[str, _User]:
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{where} is not valid YAML: {exc}") from None
    entries = loaded.get("users") if isinstance(loaded, dict) else None
    if not isinstance(entries, dict):
        raise ConfigurationError(f"{where}: `users` must map user names to their entries")
    users: dict[str, _User] = {}
    for name, entry in entries.items():
        entry = entry or {}
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where}: users.{name} must be a mapping")
        hashed = entry.get("password")
        parsed = _Hash.parse(str(hashed), f"{where}: users.{name}") if hashed else None
        users[str(name)] = _User(parsed, _roles(entry.get("roles")))
    return users


def basic_credentials(text: str) -> tuple[str, str]:
    """``user`` and ``password`` from the Base64 text of a Basic authorization."""
    if len(text) > MAX_CREDENTIAL_BYTES:
        raise AuthenticationError("the Basic credentials are too long", "malformed-credentials")
    try:
        decoded = base64.b64decode(text.strip(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationError(
            "the Basic credentials are not Base64 of user:password", "malformed-credentials"
        ) from None
    name, colon, password = decoded.partition(":")
    if not colon:
        raise AuthenticationError(
            "the Basic credentials are not Base64 of user:password", "malformed-credentials"
        )
    return name, password


# ---- tokens ----


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
        self._remembered = _Remembered()
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
        key = _digest(raw)
        now = time.time()
        with self._lock:
            known = self._remembered.get(key, now)
        if known is not None:
            return known
        claims = self._claims(token)
        principal = Principal(claims["sub"], self._roles(claims), "token")
        until = min(float(claims["exp"]), now + TOKEN_CACHE_S)
        with self._lock:
            self._remembered.put(key, principal, until)
        return principal

    def _claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise AuthenticationError("the bearer token's header is not JSON", "malformed-token")
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

    def _roles(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value: Any = claims
        for part in self._roles_claim:
            value = value.get(part) if isinstance(value, Mapping) else None
        return _roles(value)


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
        try:
            if b"CERTIFICATE-----" in data:
                public = load_pem_x509_certificate(data).public_key()
            else:
                public = load_pem_public_key(data)
        except ValueError as exc:
            raise ConfigurationError(f"SOW_JWT_KEY ({path}) is not a PEM key: {exc}") from None
        kind = type(public).__name__
        if "RSA" in kind:
            return public, _ASYMMETRIC[:6]
        if "EllipticCurve" in kind:
            return public, _ASYMMETRIC[6:]
        if "Ed25519" in kind or "Ed448" in kind:
            return public, ("EdDSA",)
        raise ConfigurationError(f"SOW_JWT_KEY ({path}): a {kind} cannot verify tokens")
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


# ---- certificates ----


def certificate_principal(
    common_names: Iterable[str],
    alternative_names: Iterable[str],
    roles_of: Callable[[str], frozenset[str]] | None = None,
) -> Principal:
    """The principal a verified client certificate names: its CN, else its first SAN;
    AuthenticationError (``untrusted-certificate``) when it names none."""
    for name in (*common_names, *alternative_names):
        if name and len(name) <= MAX_NAME_CHARS:
            roles = roles_of(name) if roles_of is not None else frozenset()
            return Principal(name, roles, "certificate")
    raise AuthenticationError(
        "the client certificate names no subject (no CN, no SAN)", "untrusted-certificate"
    )
