"""A secured embedded Apache Kafka: TLS everywhere, SCRAM and certificate authentication,
and ACLs denied by default (:class:`KafkaSecurity`, given to ``EmbeddedKafka(security=...)``).

Listeners, all on loopback:

- ``SASL_SSL``: TLS with the broker's certificate, then SCRAM-SHA-512 with the users of
  :attr:`KafkaSecurity.users` (created when the log is formatted, ``--add-scram``, and
  upserted through the Admin API at later starts); the principal is ``User:<name>``.
- ``SSL`` (mTLS): TLS that requires a client certificate signed by :attr:`KafkaSecurity.ca`;
  the principal is ``User:<the certificate's CN>`` (``ssl.principal.mapping.rules``).
- ``CONTROLLER``: the KRaft controller, also TLS with client certificates: the broker's own
  certificate (principal ``User:<broker CN>``, a super user) is the only one it needs.
  The broker talks to itself over the ``SSL`` listener with that certificate too.

Authorization: the StandardAuthorizer, ``allow.everyone.if.no.acl.found=false`` (a
resource without ACLs is denied), super users: :attr:`KafkaSecurity.admin` and the broker.
Key stores are PEM files (KIP-651): the broker's certificate chain and its unencrypted
PKCS#8 key, and the CA's certificate as the trust store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The SASL mechanism of the SASL_SSL listener.
SCRAM = "SCRAM-SHA-512"
#: Maps a certificate's subject ``CN=<name>[,...]`` to the principal ``User:<name>``.
CN_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"


@dataclass(frozen=True)
class KafkaSecurity:
    """What the secured embedded broker needs: its TLS files, its SCRAM users, its super
    user. ``users`` maps names to passwords and must hold ``admin``; ``broker_cn`` is the
    CN of ``cert`` (the broker's own principal, a super user)."""

    ca: Path
    cert: Path
    key: Path
    users: Mapping[str, str]
    admin: str = "admin"
    broker_cn: str = "broker"
    #: Super users besides the admin and the broker (``User:<name>`` each).
    super_users: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.admin not in self.users:
            raise ValueError(f"the admin user {self.admin!r} must be one of the SCRAM users")

    def keystore(self, directory: Path) -> Path:
        """Write the broker's PEM key store (its key, then its certificate chain) into
        ``directory``; returns its path."""
        path = directory / "broker-keystore.pem"
        path.write_bytes(self.key.read_bytes() + b"\n" + self.cert.read_bytes())
        path.chmod(0o600)
        return path

    def server_properties(
        self, directory: Path, port: int, mtls_port: int, controller_port: int
    ) -> dict[str, str]:
        """The broker properties that secure it (added over the plain ones)."""
        keystore = self.keystore(directory)
        supers = [f"User:{self.admin}", f"User:{self.broker_cn}", *self.super_users]
        return {
            "listeners": (
                f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{mtls_port},"
                f"CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{mtls_port}",
            "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL,SSL:SSL",
            "inter.broker.listener.name": "SSL",
            "sasl.enabled.mechanisms": SCRAM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            # SSL listeners (the mTLS one, the controller) require a certificate; a
            # SASL_SSL listener takes this only with its listener prefix (KIP-684).
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": CN_RULES,
            "ssl.endpoint.identification.algorithm": "",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(supers),
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users (KIP-900)."""
        arguments: list[str] = []
        for name, password in self.users.items():
            arguments += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
        return arguments

    def sasl_properties(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka properties of a client that logs on as SCRAM user ``user`` (its
        password from ``users`` unless given) at the SASL_SSL listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": SCRAM,
            "sasl.username": user,
            "sasl.password": self.users[user] if password is None else password,
            "ssl.ca.location": str(self.ca),
        }

    def admin_properties(self) -> dict[str, str]:
        """The super user's client properties (readiness probe, ACLs, tests)."""
        return self.sasl_properties(self.admin)

    def mtls_properties(self, cert: Path, key: Path) -> dict[str, str]:
        """librdkafka properties of a client of the mTLS listener with this certificate."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }


def properties_text(properties: Mapping[str, str]) -> str:
    """Client properties as ``SOW_KAFKA_PROPERTIES`` takes them (``key=value;...``)."""
    return ";".join(f"{key}={value}" for key, value in properties.items())
