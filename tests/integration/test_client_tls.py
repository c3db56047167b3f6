"""The clients over TLS and mutual TLS (issue 32 item 2): SowClient, FailoverClient, the
queue client, DirectPublisher's processed acknowledgements and the ``sow`` commands reach a
query service that serves TLS with a certificate made at run time; a wrong CA, a name
the certificate does not carry and a missing or foreign client certificate each end in one
line naming the cause, never a retry loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from processor.app import Application
from processor.cli import exits
from processor.client.credentials import ClientSecurity
from processor.client.direct import DirectPublisher
from processor.client.failover import FailoverClient
from processor.client.sow_client import SowClient
from processor.errors import ChannelSecurityError, ServiceError
from tests.conftest import MEMORY
from tests.integration.harness import running_sow
from tests.integration.security_helpers import (
    Pki,
    Subscriber,
    lines,
    make_pki,
    serving,
    sow,
    tls_credentials,
    topology,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def app(tmp_path: Path, unique: str) -> Iterator[Application]:
    with running_sow(MEMORY, topology(unique), tmp_path, unique) as (started, _):
        yield started


def _trusting(pki: Pki, **more: object) -> ClientSecurity:
    return ClientSecurity(ca=pki.ca.cert, **more)  # type: ignore[arg-type]


def _mutual(pki: Pki) -> ClientSecurity:
    return _trusting(pki, cert=pki.alice.cert, key=pki.alice.key)


def test_sow_client_publishes_queries_and_subscribes_over_tls(app: Application, pki: Pki) -> None:
    with serving(app, tls_credentials(pki)) as address:
        port = address.rpartition(":")[2]
        for target, security in (
            (address, _trusting(pki)),
            (f"localhost:{port}", _trusting(pki)),
            (address, _trusting(pki, server_name="localhost")),
        ):
            with SowClient(target, security=security) as client:
                reply = client.publish("ORDERS", b'{"orderId": 1, "price": 5}')
                records, _, _ = client.query("ORDERS", min_position=[reply.position])
                assert [orjson.loads(r.data) for r in records] == [{"orderId": 1, "price": 5}]
        with SowClient(address, security=_trusting(pki)) as client:
            with client.sow_and_subscribe("ORDERS") as stream:
                messages = iter(stream)
                assert next(messages).WhichOneof("part") in ("group_begin", "batch")
                client.publish("ORDERS", b'{"orderId": 2, "price": 6}')
                change = next(m for m in messages if m.WhichOneof("part") == "change")
                assert orjson.loads(change.change.record.data)["orderId"] == 2
            assert client.delete("ORDERS", filter="/orderId = 1").records_deleted == 1


def test_a_wrong_ca_or_name_ends_at_once_in_one_line_naming_the_fix(
    app: Application, pki: Pki
) -> None:
    with serving(app, tls_credentials(pki)) as address:
        with (
            SowClient(address, security=ClientSecurity(ca=pki.other_ca.cert)) as client,
            pytest.raises(ChannelSecurityError) as wrong_ca,
        ):
            client.publish("ORDERS", b'{"orderId": 1}')
        assert "not signed by the CA given" in str(wrong_ca.value)
        assert "--tls-ca (SOW_TLS_CA)" in str(wrong_ca.value)
        assert exits.code_for(wrong_ca.value) == exits.DENIED
        with (
            SowClient(address, security=_trusting(pki, server_name="sow.example")) as client,
            pytest.raises(ChannelSecurityError, match="--tls-server-name"),
        ):
            client.query("ORDERS")
        with (
            SowClient(address) as plaintext,
            pytest.raises(ServiceError, match="if it serves TLS only, give --tls-ca"),
        ):
            plaintext.query("ORDERS", timeout=5)


def test_mutual_tls_needs_a_certificate_the_service_trusts(app: Application, pki: Pki) -> None:
    with serving(app, tls_credentials(pki, require_client_cert=True)) as address:
        with SowClient(address, security=_mutual(pki)) as client:
            reply = client.publish("ORDERS", b'{"orderId": 3}')
            records, _, _ = client.query("ORDERS", min_position=[reply.position])
            assert len(records) == 1
        foreign = _trusting(pki, cert=pki.mallory.cert, key=pki.mallory.key)
        for security in (_trusting(pki), foreign):
            with (
                SowClient(address, security=security) as client,
                pytest.raises(ChannelSecurityError, match="requires a client certificate"),
            ):
                client.query("ORDERS")


def test_the_queue_client_consumes_and_acknowledges_over_mutual_tls(
    app: Application, pki: Pki
) -> None:
    with (
        serving(app, tls_credentials(pki, require_client_cert=True)) as address,
        SowClient(address, security=_mutual(pki)) as client,
    ):
        for number in range(3):
            client.publish("orders", orjson.dumps({"id": number}))
        with client.consume("Q", max_backlog=3) as stream:
            leases = stream.leases()
            got = [next(leases) for _ in range(3)]
            assert sorted(orjson.loads(lease.record.data)["id"] for lease in got) == [0, 1, 2]
            reply = client.queue_act("Q", "ack", bookmarks=[got[0].bookmark])
            assert reply.commands >= 1


def test_the_failover_client_over_tls_and_its_one_pass_over_a_wrong_ca(
    app: Application, pki: Pki
) -> None:
    credentials = tls_credentials(pki)
    with serving(app, credentials) as first, serving(app, credentials) as second:
        with FailoverClient([first, second], "tls-client", security=_trusting(pki)) as client:
            with client.subscribe("ORDERS", "feed", bookmark="") as subscription:
                messages = iter(subscription)
                assert next(messages).WhichOneof("part") == "registered"
                client.client.publish("ORDERS", b'{"orderId": 4}')
                change = next(m for m in messages if m.WhichOneof("part") == "change")
                assert orjson.loads(change.change.record.data) == {"orderId": 4}
            records, _, _ = client.query("ORDERS")
            assert len(records) == 1
        wrong = ClientSecurity(ca=pki.other_ca.cert)
        with FailoverClient([first, second], "lost", security=wrong, pause_s=0) as client:
            with pytest.raises(ChannelSecurityError, match="not signed by the CA"):
                client.query("ORDERS")
            assert client.failovers == 1  # each address once, then the error


def test_direct_publisher_processed_acks_over_mutual_tls(
    bootstrap: str, tmp_path: Path, unique: str, pki: Pki
) -> None:
    topics = topology(unique)
    with (
        running_sow(bootstrap, topics, tmp_path, unique) as (started, _),
        serving(started, tls_credentials(pki, require_client_cert=True)) as address,
    ):
        with DirectPublisher(bootstrap, topics, server=address, security=_mutual(pki)) as direct:
            published = direct.publish("ORDERS", b'{"orderId": 5}', ack="processed")
            with SowClient(address, security=_mutual(pki)) as client:
                records, _, _ = client.query("ORDERS", sow_keys=[published.sow_key])
                assert len(records) == 1  # applied when the acknowledgement came
        wrong = ClientSecurity(ca=pki.other_ca.cert)
        with (
            DirectPublisher(bootstrap, topics, server=address, security=wrong) as direct,
            pytest.raises(ChannelSecurityError, match="not signed by the CA"),
        ):
            direct.publish("ORDERS", b'{"orderId": 6}', ack="processed", timeout=10)


def test_the_commands_over_tls_and_mutual_tls(app: Application, pki: Pki) -> None:
    with serving(app, tls_credentials(pki, require_client_cert=True)) as address:
        tls = ["--server", address, "--tls-ca", str(pki.ca.cert)]
        mutual = [*tls, "--tls-cert", str(pki.alice.cert), "--tls-key", str(pki.alice.key)]
        (published,) = lines(sow("publish", "ORDERS", '{"orderId": 7}', *mutual))
        subscriber = Subscriber("ORDERS", "--server", address, env={
            "SOW_TLS_CA": str(pki.ca.cert),
            "SOW_TLS_CERT": str(pki.alice.cert),
            "SOW_TLS_KEY": str(pki.alice.key),
        })  # fmt: skip
        try:
            assert "registered" in subscriber.lines.get(timeout=30)
            lines(sow("publish", "ORDERS", '{"orderId": 8}', *mutual))
            change = subscriber.lines.get(timeout=30)
            assert change["data"] == {"orderId": 8}
        finally:
            code, _ = subscriber.stop()
        assert code == 0
        queried = lines(sow("query", "ORDERS", "--min-position", published["position"], *mutual))
        assert sorted(line["data"]["orderId"] for line in queried if "data" in line) == [7, 8]
        refused = sow("query", "ORDERS", *tls)  # no client certificate
        assert refused.returncode == exits.DENIED
        wrong = sow("query", "ORDERS", "--server", address, "--tls-ca", str(pki.other_ca.cert))
        assert wrong.returncode == exits.DENIED
        for done, says in ((refused, "client certificate"), (wrong, "not signed by the CA")):
            assert done.stderr.count("\n") == 1, done.stderr  # one line, no gRPC log noise
            assert says in done.stderr
