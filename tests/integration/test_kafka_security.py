"""kafka-sow on a secured Apache Kafka (SASL_SSL with SCRAM users, an mTLS listener, ACLs
denied by default): every component works with exactly the ACLs docs/security.md lists
(computed by ``processor.log.kafka.acls``), and a wrong password, an expired or untrusted
certificate ends in one line naming the cause, at once.

Each component runs under a principal of its own, as a platform team would run them.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.client.direct import DirectPublisher
from processor.client.sow_client import SowClient
from processor.errors import KafkaSecurityError, ServiceError
from processor.log import TopicSpec
from processor.log.kafka.settings import ensure_topics
from processor.topology.model import Topology
from tests.integration.secured_kafka import (
    SecuredKafka,
    Sow,
    acls,
    client_properties,
    dead_letter_topic,
    refusal_lines,
    topology_file,
)


def records_at(address: str, topic: str = "ORDERS", want: int = 1, within_s: float = 30) -> dict:
    """SowKey -> record of a query, once it holds ``want`` records."""
    deadline = time.monotonic() + within_s
    with SowClient(address) as client:
        while True:
            try:
                found, _, _ = client.query(topic)
            except ServiceError as exc:  # the replica still catching up: ask again
                if exc.code != "UNAVAILABLE" or time.monotonic() > deadline:
                    raise
                found = []
            records = {r.sow_key: orjson.loads(r.data) for r in found}
            if len(records) >= want or time.monotonic() > deadline:
                return records
            time.sleep(0.2)


@contextlib.contextmanager
def running(
    command: str,
    secured: SecuredKafka,
    workdir: Path,
    topology: Topology,
    properties: dict[str, str],
    group: str,
    bootstrap: str = "",
) -> Iterator[Sow]:
    with Sow(
        command,
        workdir,
        bootstrap or secured.bootstrap,
        properties,
        group,
        dead_letters=dead_letter_topic(topology),
    ) as sow:
        sow.until_ready()
        yield sow
        assert not refusal_lines(sow.output), sow.output


def test_serve_and_direct_publisher_with_least_privilege(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> None:
    serve_and_publish(secured_kafka, tmp_path)


@pytest.mark.heavy  # a local Spark session's start (test_spark runs the reader in CI)
def test_spark_reader_with_least_privilege(secured_kafka: SecuredKafka, tmp_path: Path) -> None:
    topology, records = serve_and_publish(secured_kafka, tmp_path)
    spark_reads(secured_kafka, topology, records)


def serve_and_publish(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> tuple[Topology, dict[str, Any]]:
    """``sow serve`` and a direct publisher, each with its own principal's ACLs: two
    orders published, one through each; the topology and the records the SOW holds."""
    unique = f"s{uuid.uuid4().hex[:8]}"
    _, topology = topology_file(tmp_path, unique)
    serve, serve_props = secured_kafka.user()
    secured_kafka.grant(serve, acls("serve", topology, f"{unique}-g"))
    publisher, publisher_props = secured_kafka.user()
    secured_kafka.grant(publisher, acls("direct-publisher", topology))
    with running("serve", secured_kafka, tmp_path, topology, serve_props, f"{unique}-g") as sow:
        with SowClient(sow.address) as client:
            client.publish("ORDERS", b'{"orderId": 1, "price": 10}')
        with DirectPublisher(
            secured_kafka.bootstrap, topology, kafka=publisher_props, server=sow.address
        ) as direct:
            assert not isinstance(
                direct.publish("ORDERS", b'{"orderId": 2, "price": 20}'), Exception
            )
        records = records_at(sow.address, want=2)
        assert sorted(r["orderId"] for r in records.values()) == [1, 2]
    return topology, records


def spark_reads(secured: SecuredKafka, topology: Topology, expected: dict) -> None:
    """The Spark reader, with its own principal's ACLs, reads what the SOW holds."""
    pyspark = pytest.importorskip("pyspark")
    from processor.spark import register

    principal, properties = secured.user()
    secured.grant(principal, acls("spark-reader", topology))
    session = (
        pyspark.sql.SparkSession.builder.master("local[1]")
        .appName("sow-secured")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    register(session)
    try:
        reader = (
            session.read.format("sow")
            .option("bootstrap", secured.bootstrap)
            .option("topic", "ORDERS")
            .option("kafka_topic", topology.topics["ORDERS"].kafka_topic)
            .option("mode", "latest")
            .option("message_schema", "orderId bigint, price bigint")
        )
        for key, value in properties.items():
            reader = reader.option(f"kafka.{key}", value)
        rows = reader.load().select("orderId", "price").collect()
    finally:
        session.stop()
    assert sorted((r.orderId, r.price) for r in rows) == sorted(
        (r["orderId"], r["price"]) for r in expected.values()
    )


def test_separate_processor_and_query_service_with_least_privilege(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> None:
    unique = f"pq{uuid.uuid4().hex[:8]}"
    group = f"{unique}-g"
    _, topology = topology_file(tmp_path, unique)
    processor, processor_props = secured_kafka.user()
    secured_kafka.grant(processor, acls("processor", topology, group))
    service, service_props = secured_kafka.user()
    secured_kafka.grant(service, acls("query-service", topology, group))
    with (
        running("process", secured_kafka, tmp_path, topology, processor_props, group),
        running("query-service", secured_kafka, tmp_path, topology, service_props, group) as qs,
    ):
        with SowClient(qs.address) as client:
            for n in range(5):
                client.publish("ORDERS", orjson.dumps({"orderId": n, "price": n}))
            client.publish("ORDERS", b'{"orderId": 3, "price": 33}')
        records = records_at(qs.address, want=5)
        assert {r["orderId"]: r["price"] for r in records.values()} == {
            0: 0,
            1: 1,
            2: 2,
            3: 33,
            4: 4,
        }


def test_mtls_processor_and_query_service(secured_kafka: SecuredKafka, tmp_path: Path) -> None:
    """Client certificates on the mTLS listener: the CN is the principal."""
    unique = f"m{uuid.uuid4().hex[:8]}"
    group = f"{unique}-g"
    _, topology = topology_file(tmp_path, unique)
    principal, issued = secured_kafka.certificate()
    secured_kafka.grant(principal, acls("serve", topology, group))
    properties = secured_kafka.security.mtls_properties(issued.cert, issued.key)
    with running(
        "serve", secured_kafka, tmp_path, topology, properties, group, secured_kafka.mtls_bootstrap
    ) as sow:
        with SowClient(sow.address) as client:
            client.publish("ORDERS", b'{"orderId": 9, "price": 90}')
        assert [r["orderId"] for r in records_at(sow.address).values()] == [9]


def test_wrong_password_stops_sow_process_with_one_line(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> None:
    unique = f"w{uuid.uuid4().hex[:8]}"
    topology_file(tmp_path, unique)
    _, properties = secured_kafka.user()
    properties["sasl.password"] = "not-the-password"
    began = time.monotonic()
    with Sow("process", tmp_path, secured_kafka.bootstrap, properties, "g") as process:
        code = process.until_exit(30)
    assert code != 0
    assert time.monotonic() - began < 20, "it must not retry for long"
    lines = refusal_lines(process.output)
    user = properties["sasl.username"]
    assert any(
        f"Kafka authentication failed for sasl user '{user}'" in line
        and "wrong password or unknown user" in line
        for line in lines
    ), process.output
    assert "Traceback" not in process.output


def refused_start(secured: SecuredKafka, bootstrap: str, properties: dict[str, str]) -> str:
    """What a start (its first Kafka call: topic creation) says with these properties."""
    with client_properties(properties), pytest.raises(KafkaSecurityError) as refused:
        ensure_topics(bootstrap, [TopicSpec(f"x{uuid.uuid4().hex[:6]}", 1, {})], timeout_s=20)
    text = str(refused.value)
    del refused  # its traceback holds the refused client, which would go on trying
    gc.collect()
    return text


def test_certificates_refused_say_why(secured_kafka: SecuredKafka) -> None:
    mtls = secured_kafka.mtls_bootstrap
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    _, expired = secured_kafka.certificate(not_after=past)
    text = refused_start(
        secured_kafka, mtls, secured_kafka.security.mtls_properties(expired.cert, expired.key)
    )
    assert f"refused the certificate {expired.cert}" in text
    assert "expired, not yet valid, or signed by a CA the broker does not trust" in text

    from tests.pki import issue

    stranger = issue(secured_kafka.stranger, "stranger")
    text = refused_start(
        secured_kafka, mtls, secured_kafka.security.mtls_properties(stranger.cert, stranger.key)
    )
    assert f"refused the certificate {stranger.cert}" in text

    no_certificate = {"security.protocol": "SSL", "ssl.ca.location": str(secured_kafka.ca.cert)}
    text = refused_start(secured_kafka, mtls, no_certificate)
    assert "requires a client certificate and this client has none" in text

    _, properties = secured_kafka.user()
    properties["ssl.ca.location"] = str(secured_kafka.stranger.cert)
    text = refused_start(secured_kafka, secured_kafka.bootstrap, properties)
    assert "is not trusted by ssl.ca.location" in text


@pytest.mark.heavy  # ~30 s: a Faust worker's start and recovery (test_faust_table runs in CI)
def test_faust_table_with_least_privilege(
    secured_kafka: SecuredKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("faust")
    from processor.log.kafka.acls import AclContext, component_acls
    from tests.integration.test_faust_table import faust_worker, table_when_equal

    unique = f"f{uuid.uuid4().hex[:8]}"
    group = f"{unique}-g"
    _, topology = topology_file(tmp_path, unique)
    serve, serve_props = secured_kafka.user()
    secured_kafka.grant(serve, acls("serve", topology, group))
    principal, properties = secured_kafka.user()
    context = AclContext(faust_app_id=f"{unique}-faust")
    secured_kafka.grant(principal, component_acls("faust-table", topology, context))
    monkeypatch.setenv("SOW_FAUST_USER", properties["sasl.username"])
    monkeypatch.setenv("SOW_FAUST_PASSWORD", properties["sasl.password"])
    monkeypatch.setenv("SOW_FAUST_CA", str(secured_kafka.ca.cert))
    with running("serve", secured_kafka, tmp_path, topology, serve_props, group) as sow:
        with SowClient(sow.address) as client:
            for n in range(4):
                client.publish("ORDERS", orjson.dumps({"orderId": n, "price": n}))
        expected = records_at(sow.address, want=4)
        orders = topology.topics["ORDERS"]
        with faust_worker(secured_kafka.bootstrap, orders, tmp_path, unique) as out:
            table = table_when_equal(out, expected, timeout_s=60)
    assert table == expected, (tmp_path / "faust.log").read_text()[-3000:]
