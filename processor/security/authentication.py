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
* :class:`~processor.security.tokens.TokenVerifier`: a JWT bearer token verified with
  PyJWT against a public key, an HMAC secret or a JWKS file; the algorithms allowed follow
  from the keys (never ``none``); expiry, not-before, audience and issuer are checked;
  the principal is the ``sub`` claim, its roles a configurable claim.
* :func:`certificate_principal`: the identity of a client certificate the transport
  has verified (its CN, else its first SAN).

Absurd input (a megabyte token, garbage) is refused by its size and shape before any
expensive work. Every class here is thread-safe.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from processor.errors import AuthenticationError, ConfigurationError
from processor.security.context import Principal

#: The longest credential (a token, a Basic header's text) looked at; longer is refused.
MAX_CREDENTIAL_BYTES = 8192
#: The longest user name and password accepted.
MAX_NAME_CHARS = 256
MAX_PASSWORD_CHARS = 1024
#: How long a successful password check is remembered.
PASSWORD_CACHE_S = 60.0
#: Entries the caches hold at most (they are emptied when full).
CACHE_ENTRIES = 10_000
#: scrypt's parameters for new hashes: 16 MiB and ~50 ms per check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024
#: Password checks running at once at most: the others wait (a core stays free).
HASHING_SLOTS = 1
#: Failed logons tolerated per (source, user) and per source within a window.
FAILURES_PER_USER, FAILURES_PER_SOURCE, FAILURE_WINDOW_S = 5, 50, 30.0


#: Keys the cache keys: what the caches hold is no unsalted hash of a password.
_PEPPER = os.urandom(32)


def credential_digest(*parts: str | bytes) -> bytes:
    """A cache key: a keyed SHA-256 of the parts (the credentials themselves are not kept)."""
    h = hashlib.sha256(_PEPPER)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.digest()


class Remembered:
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
            for key, limit in (
                ((source, user), self._limits[0]),
                ((source, None), self._limits[1]),
            ):
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
        self._remembered = Remembered()
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
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, _, rest = line.partition(":")
            hashed, _, roles = rest.partition(":")
            if not name or not hashed:
                raise ConfigurationError(f"{where} line {number}: expected user:hash[:roles]")
            users[name] = _User(_Hash.parse(hashed, f"{where} line {number}"), roles_from(roles))
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
        key = credential_digest(name, password)
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


def roles_from(text: Any) -> frozenset[str]:
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
    for name, given in entries.items():
        entry = given or {}
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where}: users.{name} must be a mapping")
        hashed = entry.get("password")
        parsed = _Hash.parse(str(hashed), f"{where}: users.{name}") if hashed else None
        users[str(name)] = _User(parsed, roles_from(entry.get("roles")))
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
