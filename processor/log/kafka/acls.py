"""The Kafka ACLs each component of kafka-sow needs, least privilege, computed from the
topology and the settings (docs/security.md, "Kafka ACLs"; ``sow acls`` prints them).

Components: ``processor`` (``sow process``), ``query-service`` (``sow query-service``),
``serve`` (``sow serve``: both, under one principal), ``direct-publisher``
(:class:`~processor.client.direct.DirectPublisher`), ``spark-reader`` (the PySpark data
source) and ``faust-table`` (a Faust app with :func:`~processor.faust.sow_table`).

Topics are named exactly (LITERAL): a topology names all of them. Families of generated
names are PREFIXED: the processors' transactional ids (``<group>-<instance>`` and
``<group>.static``), a Faust app's internal topics and transactional ids (``<app id>-...``).
An operation that implies another is not listed twice (Kafka: Read, Write, Delete and
Alter imply Describe), so removing any one entry stops the component; the integration
tests check that, one entry at a time (tests/integration/test_kafka_acls.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from processor.errors import BrokerError, ConfigurationError
from processor.log.kafka.settings import client_settings
from processor.log.topics import topic_specs
from processor.topology import Topology
from processor.topology.actions import DoModule
from processor.topology.events import with_event_topics
from processor.topology.queue_topics import processor_topology

TOPIC, GROUP, TRANSACTIONAL_ID = "Topic", "Group", "TransactionalId"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
CREATE, READ, WRITE, DESCRIBE = "Create", "Read", "Write", "Describe"

COMPONENTS = (
    "processor",
    "query-service",
    "serve",
    "direct-publisher",
    "spark-reader",
    "faust-table",
)


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One ALLOW entry: ``operation`` on the resource ``resource``/``name`` matched
    ``pattern`` (LITERAL or PREFIXED); ``purpose`` says what the component does with it."""

    resource: str
    name: str
    pattern: str
    operation: str
    purpose: str = field(default="", compare=False)

    @property
    def permission(self) -> str:
        """How an error line names it: ``Write on TransactionalId prefix 'sow-processor'``."""
        kind = "prefix " if self.pattern == PREFIXED else ""
        return f"{self.operation} on {self.resource} {kind}'{self.name}'"


@dataclass(frozen=True, slots=True)
class AclContext:
    """What the ACLs depend on besides the topology (defaults: the product's)."""

    group_id: str = "sow-processor"
    dead_letter_topic: str = "sow.dead-letter"
    #: The Spark reader's ``read`` option: the changelogs, or also the input topics.
    spark_read: str = "changelog"
    #: The Faust app's id (``faust.App(id)``): its group and its generated names.
    faust_app_id: str = "sow-faust"
    #: A query service publishes the event topics (SOW_EVENT_TOPICS): it creates,
    #: writes and reads them too, on the Kafka topics of ``event_topic_prefix``.
    event_topics: bool = True
    event_topic_prefix: str = "sow-events"


class _Acls:
    """An ordered set of ACLs; the first purpose given for an entry is kept."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str, str], Acl] = {}

    def add(
        self, resource: str, name: str, operation: str, purpose: str, *, prefixed: bool = False
    ) -> None:
        acl = Acl(resource, name, PREFIXED if prefixed else LITERAL, operation, purpose)
        key = (acl.resource, acl.name, acl.pattern, acl.operation)
        self._entries.setdefault(key, acl)

    def topics(self, names: Iterable[str], operation: str, purpose: str) -> None:
        for name in names:
            self.add(TOPIC, name, operation, purpose)

    def result(self) -> list[Acl]:
        """The entries, implied Describes dropped (Read and Write imply Describe)."""
        covering = {
            (a.resource, a.name, a.pattern)
            for a in self._entries.values()
            if a.operation in (READ, WRITE)
        }
        return [
            acl
            for acl in self._entries.values()
            if acl.operation != DESCRIBE or (acl.resource, acl.name, acl.pattern) not in covering
        ]


def _all_topics(topology: Topology, context: AclContext) -> list[str]:
    return [spec.name for spec in topic_specs(topology, context.dead_letter_topic)]


def _processor(acls: _Acls, topology: Topology, context: AclContext) -> None:
    own = processor_topology(topology)
    acls.topics(_all_topics(topology, context), CREATE, "created at start when missing")
    for topic in own.topics.values():
        acls.add(TOPIC, topic.kafka_topic, READ, "its input, consumed in the group")
        if topic.derived:
            acls.add(TOPIC, topic.kafka_topic, WRITE, "a derived topic's input, fed by it")
        acls.add(TOPIC, topic.repartition_topic, READ, "re-keyed records, consumed")
        acls.add(TOPIC, topic.repartition_topic, WRITE, "records re-keyed by SowKey")
        acls.add(TOPIC, topic.changelog_topic, READ, "stores restored from it")
        acls.add(TOPIC, topic.changelog_topic, WRITE, "the SOW's changes, in transactions")
        if topic.queue is not None:
            acls.add(TOPIC, topic.deliveries_topic, WRITE, "the queue's leases")
        if topic.upsert_topic is not None:
            acls.add(TOPIC, topic.upsert_topic, WRITE, "the upsert table, in transactions")
    acls.add(TOPIC, context.dead_letter_topic, WRITE, "records that cannot be applied")
    targets = {**topology.plain_topics, **topology.topics}
    for action in topology.actions:  # docs/actions.md
        for step in action.do:
            if step.module in (DoModule.PUBLISH, DoModule.DELETE_SOW):
                name = targets[step.topic].kafka_topic
                acls.add(TOPIC, name, WRITE, f"the action {action.name}'s records")
    for name in _all_topics(topology, context):
        acls.add(TOPIC, name, DESCRIBE, "checked at start (partitions)")
    acls.add(GROUP, context.group_id, READ, "the processors' consumer group, offsets")
    acls.add(
        TRANSACTIONAL_ID,
        context.group_id,
        WRITE,
        "exactly-once transactions (`<group>-<instance>`, `<group>.static`)",
        prefixed=True,
    )


def _query_service(acls: _Acls, topology: Topology, context: AclContext) -> None:
    if context.event_topics:
        topology = with_event_topics(topology, context.event_topic_prefix)
    acls.topics(_all_topics(topology, context), CREATE, "created at start when missing")
    for topic in topology.topics.values():
        acls.add(TOPIC, topic.changelog_topic, READ, "the read replica, replays")
        if not topic.derived:
            acls.add(TOPIC, topic.kafka_topic, WRITE, "publishes and deletes")
        if topic.queue is not None:
            acls.add(TOPIC, topic.deliveries_topic, READ, "the queue's leases")
            acls.add(TOPIC, topic.repartition_topic, WRITE, "queue acknowledgements")
    for plain in topology.plain_topics.values():
        acls.add(TOPIC, plain.kafka_topic, READ, "live subscriptions to a plain topic")
        acls.add(TOPIC, plain.kafka_topic, WRITE, "publishes")
    for name in _all_topics(topology, context):
        acls.add(TOPIC, name, DESCRIBE, "checked at start (partitions)")


def _direct_publisher(acls: _Acls, topology: Topology, context: AclContext) -> None:
    for topic in topology.topics.values():
        if not topic.derived:
            acls.add(TOPIC, topic.kafka_topic, WRITE, "publishes and deletes")
    for plain in topology.plain_topics.values():
        acls.add(TOPIC, plain.kafka_topic, WRITE, "publishes")


def _spark_reader(acls: _Acls, topology: Topology, context: AclContext) -> None:
    for topic in topology.topics.values():
        acls.add(TOPIC, topic.changelog_topic, READ, "read=changelog (the SOW)")
        if context.spark_read == "input":
            acls.add(TOPIC, topic.kafka_topic, READ, "read=input")


def _faust_table(acls: _Acls, topology: Topology, context: AclContext) -> None:
    app = context.faust_app_id
    for topic in topology.topics.values():
        acls.add(TOPIC, topic.changelog_topic, READ, "the table's changelog")
    acls.add(GROUP, app, READ, "the Faust app's consumer group")
    acls.add(TOPIC, app, CREATE, "the app's own topics (its leader topic)", prefixed=True)
    acls.add(TOPIC, app, READ, "the app's own topics", prefixed=True)
    acls.add(TOPIC, app, WRITE, "the app's own topics; its producer's id", prefixed=True)
    acls.add(TRANSACTIONAL_ID, app, WRITE, "processing_guarantee=exactly_once", prefixed=True)


_BUILDERS = {
    "processor": (_processor,),
    "query-service": (_query_service,),
    "serve": (_processor, _query_service),
    "direct-publisher": (_direct_publisher,),
    "spark-reader": (_spark_reader,),
    "faust-table": (_faust_table,),
}


def component_acls(
    component: str, topology: Topology, context: AclContext | None = None
) -> list[Acl]:
    """The ACLs ``component`` needs for ``topology`` (module doc), in a stable order."""
    builders = _BUILDERS.get(component)
    if builders is None:
        raise ConfigurationError(
            f"unknown component {component!r}; one of: {', '.join(COMPONENTS)}"
        )
    acls = _Acls()
    for build in builders:
        build(acls, topology, context or AclContext())
    return acls.result()


def acls_command(acl: Acl, principal: str, bootstrap: str = "BROKER:9092") -> str:
    """The ``kafka-acls.sh`` line that grants ``acl`` to ``principal``."""
    option = {TOPIC: "--topic", GROUP: "--group", TRANSACTIONAL_ID: "--transactional-id"}
    return (
        f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
        f"--add --allow-principal {principal} --operation {acl.operation} "
        f"{option[acl.resource]} '{acl.name}' --resource-pattern-type {acl.pattern.lower()}"
    )


def markdown_table(acls: Sequence[Acl]) -> str:
    """The ACLs as the Markdown table of docs/security.md."""
    lines = ["| resource | name | pattern | operation | for |", "| --- | --- | --- | --- | --- |"]
    lines += [
        f"| {a.resource} | `{a.name}` | {a.pattern} | {a.operation} | {a.purpose} |" for a in acls
    ]
    return "\n".join(lines) + "\n"


_RESOURCE = {
    TOPIC: ResourceType.TOPIC,
    GROUP: ResourceType.GROUP,
    TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
}


def binding(acl: Acl, principal: str, host: str = "*") -> AclBinding:
    """``acl`` granted to ``principal`` as an Admin API binding."""
    return AclBinding(
        _RESOURCE[acl.resource],
        acl.name,
        ResourcePatternType[acl.pattern],
        principal,
        host,
        AclOperation[acl.operation.upper()],
        AclPermissionType.ALLOW,
    )


def _admin(bootstrap: str, properties: Mapping[str, str]) -> AdminClient:
    return AdminClient({**client_settings(bootstrap), **properties})


def grant(
    bootstrap: str, properties: Mapping[str, str], principal: str, acls: Iterable[Acl]
) -> None:
    """Create the ACLs for ``principal`` through the Admin API, as the client that
    ``properties`` make (a super user or a principal allowed to Alter the cluster)."""
    bindings = [binding(acl, principal) for acl in acls]
    if not bindings:
        return
    admin = _admin(bootstrap, properties)  # held until the futures are done
    for bound, future in admin.create_acls(bindings).items():
        try:
            future.result(30)
        except KafkaException as exc:
            raise BrokerError(f"cannot create the ACL {bound}: {exc}") from exc


def revoke(
    bootstrap: str, properties: Mapping[str, str], principal: str, acls: Iterable[Acl]
) -> None:
    """Delete the ACLs of ``principal`` (:func:`grant`'s inverse)."""
    filters = [
        AclBindingFilter(
            _RESOURCE[acl.resource],
            acl.name,
            ResourcePatternType[acl.pattern],
            principal,
            "*",
            AclOperation[acl.operation.upper()],
            AclPermissionType.ALLOW,
        )
        for acl in acls
    ]
    if not filters:
        return
    admin = _admin(bootstrap, properties)
    for bound, future in admin.delete_acls(filters).items():
        try:
            future.result(30)
        except KafkaException as exc:
            raise BrokerError(f"cannot delete the ACL {bound}: {exc}") from exc


def written_topics(topology: Topology, dead_letter_topic: str) -> list[str]:
    """The topics a processor of ``topology`` writes (its transactions' topics)."""
    context = AclContext(dead_letter_topic=dead_letter_topic)
    return [
        acl.name
        for acl in component_acls("processor", topology, context)
        if acl.resource == TOPIC and acl.operation == WRITE
    ]
