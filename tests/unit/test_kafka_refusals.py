"""What a refusal of Kafka's says (processor.log.kafka.settings): the errors librdkafka
reports, as the secured broker sent them (tests/integration/test_kafka_security.py runs
them for real), each turned into one KafkaSecurityError line naming the cause; ``sow acls``
prints the lines a platform team runs; the secured broker's properties."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from processor.cli.acls_command import cmd_acls
from processor.cli.parser import build_parser
from processor.errors import KafkaSecurityError
from processor.log.broker.embedded_kafka import server_properties
from processor.log.broker.secured import KafkaSecurity
from processor.log.kafka.settings import (
    Refusals,
    authentication_failure,
    client_name,
    refusal,
    use_client_properties,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sasl_user() -> Iterator[None]:
    use_client_properties({"security.protocol": "SASL_SSL", "sasl.username": "proc"})
    try:
        yield
    finally:
        use_client_properties({})


def test_a_missing_acl_names_the_permission(sasl_user: None) -> None:
    error = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = refusal(error, client_name("the processor's producer"), "Write", "sow-processor-0")
    assert isinstance(refused, KafkaSecurityError)
    assert str(refused).startswith(
        "Kafka refused the processor's producer (sasl user 'proc'): "
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED on TransactionalId 'sow-processor-0' -- grant "
        "Write on TransactionalId 'sow-processor-0' (docs/security.md"
    )
    assert refusal(KafkaError(KafkaError.NOT_COORDINATOR), "x", "Read", "g") is None


def test_a_clients_own_properties_name_it() -> None:
    assert client_name("the reader", {"sasl.username": "spark"}) == "the reader (sasl user 'spark')"
    assert (
        client_name("it", {"ssl.certificate.location": "/c.pem"}) == "it (the certificate /c.pem)"
    )
    assert "without credentials" in client_name("it")


def test_a_wrong_password(sasl_user: None) -> None:
    error = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-512",
    )
    text = str(authentication_failure(error))
    assert text.startswith(
        "Kafka authentication failed for sasl user 'proc' at 127.0.0.1:9093: wrong password "
        "or unknown user"
    )


def test_certificates() -> None:
    untrusted = KafkaError(
        KafkaError._SSL,
        "sasl_ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL "
        "routines::certificate verify failed: broker certificate could not be verified",
    )
    text = str(authentication_failure(untrusted, {"ssl.ca.location": "/ca.pem"}))
    assert "the TLS certificate of Kafka at 127.0.0.1:9093 is not trusted by" in text
    assert "(/ca.pem)" in text
    alert = KafkaError(
        KafkaError._TRANSPORT,
        "ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000416:SSL routines::ssl/tls "
        "alert certificate unknown: SSL alert number 46",
    )
    text = str(authentication_failure(alert, {"ssl.certificate.location": "/me.pem"}))
    assert text.startswith(
        "Kafka at 127.0.0.1:9094 refused the certificate /me.pem: expired, not yet valid, or "
        "signed by a CA the broker does not trust"
    )
    text = str(authentication_failure(alert))
    assert "requires a client certificate and this client has none" in text
    down = KafkaError(KafkaError._TRANSPORT, "ssl://127.0.0.1:9094/bootstrap: Connect failed")
    assert authentication_failure(down) is None


def test_refusals_keep_the_first_failure_only() -> None:
    refusals = Refusals("the publisher", {"sasl.username": "pub"})
    refusals(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    refusals.check()  # not a refusal: nothing to raise
    refusals(KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://h:1/bootstrap: bad"))
    first = refusals.failure
    refusals(KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://h:2/bootstrap: bad"))
    assert refusals.failure is first
    with pytest.raises(KafkaSecurityError, match="sasl user 'pub' at h:1"):
        refusals.check()


def test_the_default_broker_is_unchanged_and_security_adds_listeners(tmp_path: Path) -> None:
    plain = server_properties(tmp_path, 9092, 9093)
    assert plain["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert "authorizer.class.name" not in plain
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text(name)
    security = KafkaSecurity(
        tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem", {"admin": "s"}
    )
    secured = security.server_properties(tmp_path, 9092, 9094, 9093)
    assert secured["listeners"] == (
        "SASL_SSL://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    )
    assert secured["allow.everyone.if.no.acl.found"] == "false"
    assert secured["super.users"] == "User:admin;User:broker"
    assert secured["ssl.client.auth"] == "required"
    assert security.format_arguments() == ["--add-scram", "SCRAM-SHA-512=[name=admin,password=s]"]
    with pytest.raises(ValueError, match="admin user"):
        KafkaSecurity(tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem", {})


def test_sow_acls_prints_kafka_acls_lines() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        args = build_parser().parse_args(
            [
                "acls",
                *("--topology", str(ROOT / "topologies" / "orders.yaml")),
                *("--component", "direct-publisher", "--principal", "User:pub"),
                *("--bootstrap-servers", "kafka:9093"),
            ]
        )
        code = cmd_acls(args)  # not main(): it installs the progress log handler for good
    assert code == 0
    assert out.getvalue().splitlines() == [
        "# direct-publisher: 1 ACLs for User:pub",
        "kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add "
        "--allow-principal User:pub --operation Write --topic 'ORDERS' "
        "--resource-pattern-type literal",
    ]
