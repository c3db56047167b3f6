"""Least privilege, checked: each component runs with exactly the ACLs that
``processor.log.kafka.acls`` computes (docs/security.md, "Kafka ACLs"), and with any one
of them removed it fails with a line naming the missing permission, never a stall.

The sweep over every ACL is heavy (a process start per ACL); CI runs one removal per kind
of resource (a topic, the group, the transactional id) and the publisher's.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from processor.client.direct import DirectPublisher
from processor.client.sow_client import SowClient
from processor.errors import KafkaSecurityError, ServiceError
from processor.log.kafka.acls import Acl, AclContext, component_acls
from processor.log.kafka.ranges import partition_count
from processor.log.kafka.settings import ensure_topics
from processor.log.topics import topic_specs
from processor.topology.model import Topology
from tests.integration.harness import namespaced
from tests.integration.secured_kafka import (
    ORDERS,
    SecuredKafka,
    Sow,
    acls,
    client_properties,
    dead_letter_topic,
    refusal_lines,
    topology_file,
)

#: The ACL lists of a reference topology: the tests' topologies differ in names only.
_REFERENCE = namespaced("ref", ORDERS)
PROCESSOR = acls("processor", _REFERENCE, "ref-group")
QUERY_SERVICE = acls("query-service", _REFERENCE, "ref-group")
SERVE = acls("serve", _REFERENCE, "ref-group")


def acls_with_app(component: str, topology: Topology, app_id: str) -> list[Acl]:
    """The ACLs of ``component`` with a Faust app id of the test's own."""
    return component_acls(component, topology, AclContext(faust_app_id=app_id))


def _case(acl: Acl) -> str:
    return f"{acl.operation}-{acl.resource}-{acl.name.removeprefix('ref.')}"


def _feed(secured: SecuredKafka, topology: Topology) -> None:
    """Records that need every permission of a processor: one applied (its changelog),
    one in the wrong partition for its SowKey (re-keyed through the repartition topic),
    and one that cannot be decoded (the dead-letter topic)."""
    producer = Producer({"bootstrap.servers": secured.bootstrap, **secured.admin})
    topic = topology.topics["ORDERS"].kafka_topic
    for partition in (0, 1):  # one of them is the wrong partition for orderId 7
        producer.produce(topic, b'{"orderId": 7, "price": 1}', partition=partition)
    producer.produce(topic, b"not json", partition=0)
    assert producer.flush(30) == 0


def names_it(line: str, acl: Acl) -> bool:
    """Whether a refusal line names the permission ``acl`` grants (for a PREFIXED one,
    the line names the id refused, which starts with the prefix). Seeing a topic takes
    Describe, which Read and Write imply: such a line names all three."""
    return f"on {acl.resource} '{acl.name}" in line and f"{acl.operation}" in line


def publish_refused(address: str) -> str:
    """The error of one publish through the query service at ``address`` ("" if none)."""
    with SowClient(address) as client:
        try:
            client.publish("ORDERS", b'{"orderId": 1}')
        except ServiceError as exc:
            return str(exc)
    return ""


def run_without(
    secured: SecuredKafka, tmp_path: Path, command: str, component: str, index: int
) -> None:
    """``sow <command>`` under a principal with the ACLs of ``component`` but the
    ``index``-th: it must stop (or, for a refused publish, refuse it) with a line naming
    that permission, once it is given what needs each permission."""
    unique = f"x{uuid.uuid4().hex[:8]}"
    group = f"{unique}-group"
    _, topology = topology_file(tmp_path, unique)
    full = acls(component, topology, group)
    removed = full[index]
    principal, properties = secured.user()
    secured.grant(principal, [a for a in full if a is not removed])
    dead_letters = dead_letter_topic(topology)
    refused = ""
    with Sow(
        command, tmp_path, secured.bootstrap, properties, group, dead_letters=dead_letters
    ) as sow:
        while not sow.ready.wait(0.1) and sow.process.poll() is None:
            pass
        if sow.process.poll() is None:
            if command != "query-service":
                _feed(secured, topology)
            if command != "process":
                refused = publish_refused(sow.address)
        if refused:  # the service goes on serving reads; the publish names the refusal
            sow.stop()
        elif (
            removed.name.endswith((".client-status", ".sow-stats")) and removed.operation == "Write"
        ):
            # The event topics: a subscription makes client events (the SOW statistics
            # come every 5 s); a warning names the refusal, and the service goes on.
            with SowClient(sow.address) as client, client.subscribe("ORDERS") as stream:
                next(iter(stream))  # registered: its subscribe event is on its way
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                names_it(line, removed) for line in refusal_lines(sow.output)
            ):
                time.sleep(0.2)
            sow.stop()
        else:
            assert sow.until_exit(60) != 0, sow.output
    (tmp_path / "output.txt").write_text(sow.output)
    lines = refusal_lines(sow.output) + ([refused] if refused else [])
    if not any(names_it(line, removed) for line in lines):
        raise AssertionError(f"no line names {removed.permission}; see {tmp_path}/output.txt")
    assert "Traceback" not in sow.output, sow.output


def run_processor_without(secured: SecuredKafka, tmp_path: Path, index: int) -> None:
    run_without(secured, tmp_path, "process", "processor", index)


def run_query_service_without(secured: SecuredKafka, tmp_path: Path, index: int) -> None:
    run_without(secured, tmp_path, "query-service", "query-service", index)


@pytest.mark.heavy
@pytest.mark.parametrize("index", range(len(PROCESSOR)), ids=[_case(a) for a in PROCESSOR])
def test_processor_without_each_acl(
    secured_kafka: SecuredKafka, tmp_path: Path, index: int
) -> None:
    run_processor_without(secured_kafka, tmp_path, index)


@pytest.mark.heavy
@pytest.mark.parametrize("index", range(len(QUERY_SERVICE)), ids=[_case(a) for a in QUERY_SERVICE])
def test_query_service_without_each_acl(
    secured_kafka: SecuredKafka, tmp_path: Path, index: int
) -> None:
    run_query_service_without(secured_kafka, tmp_path, index)


@pytest.mark.heavy
@pytest.mark.parametrize("index", range(len(SERVE)), ids=[_case(a) for a in SERVE])
def test_serve_without_each_acl(secured_kafka: SecuredKafka, tmp_path: Path, index: int) -> None:
    run_without(secured_kafka, tmp_path, "serve", "serve", index)


def _index(acl_list: list[Acl], resource: str, operation: str, suffix: str = "") -> int:
    return next(
        i
        for i, a in enumerate(acl_list)
        if a.resource == resource and a.operation == operation and a.name.endswith(suffix)
    )


#: CI's removals: one per kind of resource a processor is refused.
CI_PROCESSOR = {
    "transactional-id": _index(PROCESSOR, "TransactionalId", "Write"),
    "group": _index(PROCESSOR, "Group", "Read"),
    "changelog-write": _index(PROCESSOR, "Topic", "Write", ".sow-changelog"),
}


@pytest.mark.parametrize("index", CI_PROCESSOR.values(), ids=CI_PROCESSOR.keys())
def test_processor_without_an_acl(secured_kafka: SecuredKafka, tmp_path: Path, index: int) -> None:
    run_processor_without(secured_kafka, tmp_path, index)


def test_query_service_without_read_on_its_changelogs(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> None:
    index = _index(QUERY_SERVICE, "Topic", "Read", ".sow-changelog")
    run_query_service_without(secured_kafka, tmp_path, index)


def test_direct_publisher_and_spark_reader_without_their_acl(
    secured_kafka: SecuredKafka, tmp_path: Path
) -> None:
    """Each has one ACL: without it, the publish and the read plan say which."""
    unique = f"d{uuid.uuid4().hex[:8]}"
    _, topology = topology_file(tmp_path, unique)
    specs = topic_specs(topology, dead_letter_topic(topology))
    with client_properties(secured_kafka.admin):
        ensure_topics(secured_kafka.bootstrap, specs)
    [write] = acls("direct-publisher", topology)
    [read] = acls("spark-reader", topology)
    _, properties = secured_kafka.user()  # no ACL at all
    with (
        DirectPublisher(secured_kafka.bootstrap, topology, kafka=properties) as publisher,
        pytest.raises(KafkaSecurityError) as refused,
    ):
        publisher.publish("ORDERS", b'{"orderId": 1}', timeout=20)
    assert names_it(str(refused.value), write), refused.value
    user = f"sasl user '{properties['sasl.username']}'"  # its own properties, not the process's
    assert user in str(refused.value), refused.value
    with pytest.raises(KafkaSecurityError) as refused:
        partition_count(secured_kafka.bootstrap, read.name, properties)  # the plan's first call
    assert names_it(str(refused.value), read), refused.value
    assert user in str(refused.value), refused.value


FAUST = acls_with_app("faust-table", _REFERENCE, "ref-faust")


@pytest.mark.heavy
@pytest.mark.parametrize("index", range(len(FAUST)), ids=[_case(a) for a in FAUST])
def test_faust_table_without_each_acl(
    secured_kafka: SecuredKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    """Without Read on the app's group or on the changelog, the table's preflight logs one
    line naming the permission and the worker exits non-zero (it does not wait); without
    one of the app's own topics or transactional ids, Faust's own client (aiokafka) names
    the refusal in the worker's log."""
    pytest.importorskip("faust")
    from tests.integration.test_faust_table import faust_process

    unique = f"f{uuid.uuid4().hex[:8]}"
    _, topology = topology_file(tmp_path, unique)
    full = acls_with_app("faust-table", topology, f"{unique}-faust")
    removed = full[index]
    with client_properties(secured_kafka.admin):
        ensure_topics(secured_kafka.bootstrap, topic_specs(topology, dead_letter_topic(topology)))
    principal, properties = secured_kafka.user()
    secured_kafka.grant(principal, [a for a in full if a is not removed])
    monkeypatch.setenv("SOW_FAUST_USER", properties["sasl.username"])
    monkeypatch.setenv("SOW_FAUST_PASSWORD", properties["sasl.password"])
    monkeypatch.setenv("SOW_FAUST_CA", str(secured_kafka.ca.cert))
    log = tmp_path / "faust.log"
    said = faust_says(removed)
    exit_code = None
    with faust_process(
        secured_kafka.bootstrap, topology.topics["ORDERS"], tmp_path, unique
    ) as worker:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.poll() is None:
            text = log.read_text(errors="replace") if log.exists() else ""
            if said in text:
                break
            time.sleep(0.5)
        if said == PREFLIGHT:
            with contextlib.suppress(subprocess.TimeoutExpired):
                exit_code = worker.wait(30)
    text = log.read_text(errors="replace")
    assert said in text, text[-3000:]
    if said == PREFLIGHT:
        line = next(line for line in text.splitlines() if PREFLIGHT in line)
        assert names_it(line, removed), line
        assert f"sasl user '{properties['sasl.username']}'" in line, line
        assert exit_code not in (None, 0), text[-3000:]


#: The start of the line the table's preflight logs (processor/faust/preflight.py).
PREFLIGHT = "Kafka refused the faust table"


def faust_says(removed: Acl) -> str:
    """What the worker logs without ``removed``: the preflight's line for the group and
    the changelog, else what Faust's client (aiokafka 0.14) logs."""
    if removed.pattern == "LITERAL":  # the app's group, the changelog
        return PREFLIGHT
    if removed.resource == "TransactionalId":
        return "TransactionalIdAuthorizationFailed"
    if removed.operation == "Write":
        # Write on no topic at all: its idempotent producer's InitProducerId is refused.
        return "ClusterAuthorizationFailedError"
    return "TopicAuthorizationFailedError"
