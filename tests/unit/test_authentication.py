"""Authentication below the transports (processor/security/authentication.py, tokens.py):
password hashes and the users file, JWT bearer tokens (key, secret, JWKS), client
certificate identities. Each refusal names its cause and never the secret."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from processor.errors import AuthenticationError, ConfigurationError
from processor.security import Principal
from processor.security.authentication import (
    FailureThrottle,
    PasswordFile,
    basic_credentials,
    certificate_principal,
    hash_password,
)
from processor.security.tokens import TokenVerifier

AUDIENCE = "kafka-sow"
ISSUER = "https://issuer.example"


class _Refusal:
    """Expects an AuthenticationError with ``reason``; ``error`` is the one raised."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.error: AuthenticationError | None = None

    def __enter__(self) -> _Refusal:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        assert isinstance(exc, AuthenticationError), f"not refused: {exc!r}"
        assert exc.reason == self.reason, (exc.reason, str(exc))
        self.error = exc
        return True


def _refused(reason: str) -> _Refusal:
    return _Refusal(reason)


# ---- passwords ----


def test_a_hash_is_salted_and_checks_only_its_password(tmp_path: Path) -> None:
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first != second  # a random salt each time
    assert first.startswith("scrypt$16384$8$1$")
    users = tmp_path / "users"
    users.write_text(f"# traders\nalice:{first}:traders,desk-fx\n\nbob:{second}\n")
    passwords = PasswordFile.load(users)
    assert passwords.authenticate("alice", "s3cret") == Principal(
        "alice", frozenset({"traders", "desk-fx"}), "password"
    )
    assert passwords.authenticate("bob", "s3cret").roles == frozenset()
    with _refused("bad-password") as refused:
        passwords.authenticate("alice", "S3cret", "ipv4:10.0.0.1")
    assert "S3cret" not in str(refused.error)
    assert "s3cret" not in str(refused.error)
    with _refused("bad-password"):
        passwords.authenticate("mallory", "s3cret", "ipv4:10.0.0.2")


def test_the_users_file_may_be_yaml(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(
        "users:\n"
        f"  alice: {{password: '{hash_password('pw')}', roles: [traders]}}\n"
        "  svc-reporting: {roles: [readers]}\n"
    )
    passwords = PasswordFile.load(users)
    assert passwords.authenticate("alice", "pw").roles == frozenset({"traders"})
    assert passwords.roles_of("svc-reporting") == frozenset({"readers"})
    with _refused("bad-password"):  # roles only: no password logon
        passwords.authenticate("svc-reporting", "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alice\n", "line 1: expected user:hash[:roles]"),
        ("alice:md5$abc\n", "line 1: the password hash is not one `sow hash-password` makes"),
        ("alice:scrypt$3$8$1$AA$AA\n", "scrypt parameters N=3 r=8 p=1 are out of range"),
        ("users: [alice]\n", "`users` must map user names to their entries"),
    ],
)
def test_a_bad_users_file_is_refused_naming_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    users = tmp_path / "users"
    users.write_text(text)
    with pytest.raises(ConfigurationError, match="SOW_USERS_FILE") as caught:
        PasswordFile.load(users)
    assert message in str(caught.value)


def test_a_good_password_is_checked_once_then_remembered(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw')}\n")
    passwords = PasswordFile.load(users)
    began = time.perf_counter()
    passwords.authenticate("alice", "pw")
    first = time.perf_counter() - began
    began = time.perf_counter()
    for _ in range(1000):
        passwords.authenticate("alice", "pw")
    later = (time.perf_counter() - began) / 1000
    assert later < first / 20, (first, later)  # scrypt once, then a dictionary hit
    print(f"password check: first {first * 1e3:.1f} ms, remembered {later * 1e6:.1f} us")


def test_failed_logons_are_throttled_per_source_and_user(tmp_path: Path) -> None:
    now = [0.0]
    throttle = FailureThrottle(per_user=3, per_source=5, window_s=30, clock=lambda: now[0])
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw')}\n")
    passwords = PasswordFile(PasswordFile.load(users)._users, throttle)
    for _ in range(3):
        with _refused("bad-password"):
            passwords.authenticate("alice", "guess", "ipv4:10.0.0.9")
    with _refused("throttled"):  # no hash computed: refused at once
        passwords.authenticate("alice", "pw", "ipv4:10.0.0.9")
    assert passwords.authenticate("alice", "pw", "ipv4:10.0.0.7").name == "alice"
    for user in ("bob", "carol"):
        with _refused("bad-password"):
            passwords.authenticate(user, "guess", "ipv4:10.0.0.9")
    with _refused("throttled"):  # five failures from that source, whoever the user
        passwords.authenticate("dave", "guess", "ipv4:10.0.0.9")
    now[0] = 31.0
    assert passwords.authenticate("alice", "pw", "ipv4:10.0.0.9").name == "alice"


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("not base64!", "malformed-credentials"),
        (base64.b64encode(b"no-colon").decode(), "malformed-credentials"),
        ("A" * 20_000, "malformed-credentials"),
        (base64.b64encode(b"\xff\xfe:x").decode(), "malformed-credentials"),
    ],
)
def test_basic_credentials_refuse_garbage(given: str, reason: str) -> None:
    with _refused(reason):
        basic_credentials(given)


def test_basic_credentials_split_at_the_first_colon() -> None:
    text = base64.b64encode(b"alice:pa:ss").decode()
    assert basic_credentials(text) == ("alice", "pa:ss")


def test_absurd_user_names_are_refused_before_hashing(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw')}\n")
    passwords = PasswordFile.load(users)
    began = time.perf_counter()
    for name, password in (("", "pw"), ("a" * 10_000, "pw"), ("alice", "p" * 100_000)):
        with _refused("malformed-credentials"):
            passwords.authenticate(name, password)
    assert time.perf_counter() - began < 0.01


# ---- tokens ----


def _ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _public_pem(key: Any, path: Path) -> Path:
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def _token(key: Any, algorithm: str = "ES256", headers: Any = None, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "exp": now + 300, "iat": now}
    payload.update(claims)
    payload = {k: v for k, v in payload.items() if v is not None}
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


@pytest.fixture
def signer(tmp_path: Path) -> tuple[ec.EllipticCurvePrivateKey, TokenVerifier]:
    key = _ec_key()
    verifier = TokenVerifier.from_key_file(
        _public_pem(key, tmp_path / "issuer.pem"), AUDIENCE, issuer=ISSUER
    )
    return key, verifier


def test_a_valid_token_names_its_subject_and_roles(signer: Any) -> None:
    key, verifier = signer
    principal = verifier.verify(_token(key, roles=["traders", "ops"]))
    assert principal == Principal("alice", frozenset({"traders", "ops"}), "token")
    assert verifier.verify(_token(key, sub="bob", roles="a b,c")).roles == {"a", "b", "c"}


def test_roles_may_come_from_a_nested_claim(tmp_path: Path) -> None:
    key = _ec_key()
    verifier = TokenVerifier.from_key_file(
        _public_pem(key, tmp_path / "k.pem"), AUDIENCE, roles_claim="realm_access.roles"
    )
    token = _token(key, realm_access={"roles": ["traders"]})
    assert verifier.verify(token).roles == frozenset({"traders"})


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": int(time.time()) - 3600}, "expired-token"),
        ({"nbf": int(time.time()) + 3600}, "token-not-yet-valid"),
        ({"aud": "another-service"}, "wrong-audience"),
        ({"iss": "https://elsewhere.example"}, "wrong-issuer"),
        ({"exp": None}, "missing-claim"),
        ({"sub": None}, "missing-claim"),
        ({"aud": None}, "missing-claim"),
        ({"iss": None}, "missing-claim"),
    ],
)
def test_tokens_are_refused_for_their_claims(signer: Any, claims: Any, reason: str) -> None:
    key, verifier = signer
    token = _token(key, **claims)
    with _refused(reason) as refused:
        verifier.verify(token)
    assert token not in str(refused.error)


def test_a_token_signed_by_another_key_is_refused(signer: Any) -> None:
    _, verifier = signer
    with _refused("bad-signature"):
        verifier.verify(_token(_ec_key()))


def test_alg_none_and_other_algorithms_are_refused(signer: Any, tmp_path: Path) -> None:
    _, verifier = signer
    unsigned = jwt.encode(
        {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "exp": int(time.time()) + 60},
        None,
        algorithm="none",
    )
    with _refused("disallowed-algorithm"):
        verifier.verify(unsigned)
    with _refused("disallowed-algorithm"):
        verifier.verify(unsigned + "c2ln")
    # the public key as an HMAC secret: the algorithm-confusion attack
    public = (tmp_path / "issuer.pem").read_bytes()
    forged = _forged_hs256(public)
    with _refused("disallowed-algorithm"):
        verifier.verify(forged)
    with _refused("disallowed-algorithm"):
        verifier.verify(_token(rsa.generate_private_key(65537, 2048), algorithm="RS256"))


def _forged_hs256(secret: bytes) -> str:
    """A token signed HS256 with ``secret`` (PyJWT refuses to sign with a PEM)."""
    import hashlib
    import hmac

    def part(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    claims = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "exp": int(time.time()) + 60}
    signed = part(b'{"alg":"HS256","typ":"JWT"}') + b"." + part(json.dumps(claims).encode())
    signature = hmac.new(secret, signed, hashlib.sha256).digest()
    return (signed + b"." + part(signature)).decode()


@pytest.mark.parametrize(
    "garbage",
    ["", "x", "a.b", "a.b.c.d", "...", "é.é.é", "eyJ.eyJ.sig", "A" * 1_000_000, "\x00.\x01.\x02"],
)
def test_garbage_tokens_are_refused_cleanly(signer: Any, garbage: str) -> None:
    _, verifier = signer
    began = time.perf_counter()
    with pytest.raises(AuthenticationError) as caught:
        verifier.verify(garbage)
    assert caught.value.reason in ("malformed-token", "disallowed-algorithm")
    assert time.perf_counter() - began < 0.05


def test_an_hs256_secret_file_verifies_hs256_only(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    verifier = TokenVerifier.from_key_file(secret, AUDIENCE)
    token = _token("0123456789abcdef0123456789abcdef", algorithm="HS256", iss=None)
    assert verifier.verify(token).name == "alice"
    with _refused("bad-signature"):
        verifier.verify(_token("another secret of thirty-two bytes!!", algorithm="HS256"))
    short = tmp_path / "short"
    short.write_text("tiny")
    with pytest.raises(ConfigurationError, match="HMAC secret of at least 32 bytes"):
        TokenVerifier.from_key_file(short, AUDIENCE)


def test_a_private_key_is_refused_as_the_verification_key(tmp_path: Path) -> None:
    private = tmp_path / "private.pem"
    private.write_bytes(
        _ec_key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigurationError, match="holds a private key"):
        TokenVerifier.from_key_file(private, AUDIENCE)


def _jwks(path: Path, keys: dict[str, Any]) -> Path:
    entries = []
    for kid, key in keys.items():
        entry = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
        entry.update(kid=kid, use="sig", alg="ES256")
        entries.append(entry)
    path.write_text(json.dumps({"keys": entries}))
    return path


def test_a_jwks_file_picks_the_key_by_kid_and_follows_rotation(tmp_path: Path) -> None:
    one, two, three = _ec_key(), _ec_key(), _ec_key()
    path = _jwks(tmp_path / "jwks.json", {"k1": one, "k2": two})
    verifier = TokenVerifier.from_jwks_file(path, AUDIENCE)
    assert verifier.verify(_token(one, headers={"kid": "k1"})).name == "alice"
    assert verifier.verify(_token(two, headers={"kid": "k2"}, sub="bob")).name == "bob"
    with _refused("bad-signature"):
        verifier.verify(_token(one, headers={"kid": "k2"}, sub="carol"))
    with _refused("unknown-key"):
        verifier.verify(_token(three, headers={"kid": "k3"}))
    with _refused("unknown-key"):  # several keys: a token must say which
        verifier.verify(_token(one, sub="dave"))
    time.sleep(1.1)  # the file is checked again at most once a second
    _jwks(path, {"k3": three})
    assert verifier.verify(_token(three, headers={"kid": "k3"}, sub="erin")).name == "erin"


def test_a_remembered_token_still_expires(signer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.security import tokens

    monkeypatch.setattr(tokens, "TOKEN_LEEWAY_S", 0)
    key, verifier = signer
    token = _token(key, exp=int(time.time()) + 1)
    assert verifier.verify(token).name == "alice"
    time.sleep(1.2)
    with _refused("expired-token"):
        verifier.verify(token)


# ---- certificates ----


def test_a_certificate_names_its_cn_else_its_first_san() -> None:
    roles = {"svc-a": frozenset({"readers"})}
    principal = certificate_principal(
        ["svc-a"], ["svc-a.example"], lambda name: roles.get(name, frozenset())
    )
    assert principal == Principal("svc-a", frozenset({"readers"}), "certificate")
    assert certificate_principal([], ["spiffe://x/y", "b"]).name == "spiffe://x/y"
    with _refused("untrusted-certificate"):
        certificate_principal([], [])
