"""Client settings every adapter shares, topic creation, and the translation of Kafka errors."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)

from processor.errors import (
    BrokerError,
    ConfigurationError,
    FencedError,
    KafkaSecurityError,
)
from processor.log import (
    TopicSpec,
)
from processor.log.replication import MAX_DEFAULT_REPLICATION, Replication

log = logging.getLogger(__name__)


#: Settings every client gets; quiet librdkafka's connection chatter to errors only.
BASE = {"log_level": 3, "socket.keepalive.enable": True}
#: Properties the deployment adds to every client (security, TLS): set once at start by
#: :func:`use_client_properties`, applied after the product's own settings.
_client_properties: dict[str, str] = {}


def use_client_properties(properties: Mapping[str, str]) -> None:
    """Add ``properties`` (librdkafka names) to every client built from now on, replacing
    any given before (``Settings.kafka_properties``; the processor child gets them too).
    ConfigurationError for a property that would weaken what a write's acknowledgement
    means: every producer is idempotent and waits for every in-sync replica."""
    weakened = {
        key: value
        for key, value in properties.items()
        if (key == "enable.idempotence" and value.strip().lower() != "true")
        or (key in ("acks", "request.required.acks") and value.strip() not in ("all", "-1"))
    }
    if weakened:
        raise ConfigurationError(
            f"SOW_KAFKA_PROPERTIES sets {weakened}: kafka-sow's producers are idempotent with "
            "acks=all (an acknowledged write is on every in-sync replica, once); remove them"
        )
    _client_properties.clear()
    _client_properties.update(properties)


def client_settings(bootstrap: str) -> dict[str, Any]:
    """What every client gets: the base settings, the broker, the deployment's properties."""
    return {**BASE, "bootstrap.servers": bootstrap, **_client_properties}


#: Where the ACLs each component needs are listed (the end of every refusal's line).
ACL_DOC = "docs/security.md, Kafka ACLs; `sow acls` prints them"
#: Seeing a topic: Describe, or an operation that implies it.
DESCRIBE = "Describe (or Read or Write, which imply it)"
#: Kafka's authorization refusals: the error code -> the resource, as an ACL names it.
_REFUSED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}
#: What a TLS peer's alert means for the certificate this client presented.
_CERTIFICATE_ALERTS = ("alert certificate", "alert bad certificate", "alert unknown ca")


def identity(extra: Mapping[str, Any] | None = None) -> str:
    """Who a client is to Kafka, from the deployment's properties and the client's own
    ``extra`` ones: the SASL user, the client certificate, or nobody."""
    properties = {**_client_properties, **(extra or {})}
    user = properties.get("sasl.username")
    if user:
        return f"sasl user '{user}'"
    certificate = properties.get("ssl.certificate.location")
    if certificate:
        return f"the certificate {certificate}"
    return "a client without credentials (SOW_KAFKA_PROPERTIES sets them)"


def client_name(name: str, extra: Mapping[str, Any] | None = None) -> str:
    """``name`` and who the client is: "the publisher (sasl user 'u')" (:func:`identity`)."""
    return f"{name} ({identity(extra)})"


def refusal(
    error: KafkaError, who: str, operation: str, name: str = ""
) -> KafkaSecurityError | None:
    """A KafkaSecurityError naming the permission ``who`` (:func:`client_name`) lacks when
    ``error`` is an authorization refusal of ``operation`` on the resource ``name``
    (None otherwise)."""
    kind = _REFUSED.get(error.code())
    if kind is None:
        return None
    target = f"{kind} '{name}'" if name else kind
    return KafkaSecurityError(
        f"Kafka refused {who}: {error.name()} on {target} -- grant "
        f"{operation} on {target} ({ACL_DOC})"
    )


def authentication_failure(
    error: KafkaError, extra: Mapping[str, Any] | None = None
) -> KafkaSecurityError | None:
    """A KafkaSecurityError saying why the broker and a client (with its own ``extra``
    properties) did not trust each other, for an error librdkafka reports to the client's
    ``error_cb`` (None for others: a broker down, a timeout)."""
    properties = {**_client_properties, **(extra or {})}
    text = error.str()
    match = re.match(r"\w+://([^/ ]+)", text)
    where = match.group(1) if match else "the broker"
    code = error.code()
    if code == KafkaError._AUTHENTICATION:
        return KafkaSecurityError(
            f"Kafka authentication failed for {identity(extra)} at {where}: wrong password or "
            f"unknown user ({text})"
        )
    if code == KafkaError._SSL and "verify failed" in text:
        ca = properties.get("ssl.ca.location", "the system's trust store")
        return KafkaSecurityError(
            f"the TLS certificate of Kafka at {where} is not trusted by ssl.ca.location "
            f"({ca}): expired, for another host, or signed by another CA ({text})"
        )
    if code in (KafkaError._TRANSPORT, KafkaError._SSL) and any(
        alert in text for alert in _CERTIFICATE_ALERTS
    ):
        if "ssl.certificate.location" not in properties:
            return KafkaSecurityError(
                f"Kafka at {where} requires a client certificate and this client has none: "
                f"set ssl.certificate.location and ssl.key.location ({text})"
            )
        return KafkaSecurityError(
            f"Kafka at {where} refused {identity(extra)}: expired, not yet valid, or signed by a "
            f"CA the broker does not trust ({text})"
        )
    return None


class Refusals:
    """A client's ``error_cb``: keeps the first authentication or TLS failure
    (:func:`authentication_failure`) for the client's owner to raise (:meth:`check`),
    and logs it once. Other errors (a broker down) are left to the calls that time out."""

    def __init__(self, name: str, extra: Mapping[str, Any] | None = None) -> None:
        """``name``: what the client is for; ``extra``: its own properties (not the
        deployment's), which may name its credentials."""
        self._extra = {k: v for k, v in (extra or {}).items() if isinstance(v, str)}
        #: The client and who it is to Kafka (:func:`client_name`).
        self.who = client_name(name, self._extra)
        self.failure: KafkaSecurityError | None = None

    def __call__(self, error: KafkaError) -> None:
        if self.failure is not None:
            return
        failure = authentication_failure(error, self._extra)
        if failure is None:
            log.debug("%s: %s", self.who, error)
            return
        self.failure = failure
        log.error("%s: %s", self.who, failure)

    def error(self) -> KafkaSecurityError | None:
        """The failure seen (None: none), as a new exception each time: one raised keeps
        the frames that hold the client in its traceback, which the client's callback
        (this object) must not hold in turn (a cycle through librdkafka's handle is never
        collected, and the client would go on connecting)."""
        return None if self.failure is None else KafkaSecurityError(*self.failure.args)

    def check(self) -> None:
        """Raise the failure seen, if any (:meth:`error`)."""
        error = self.error()
        if error is not None:
            raise error


def list_topics(
    admin: AdminClient, refusals: Refusals, timeout_s: float, topic: str | None = None
) -> Any:
    """``admin.list_topics`` asked again each second until ``timeout_s``, ending early
    with KafkaSecurityError when the broker refused this client's credentials; BrokerError
    when it does not answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.list_topics(topic, timeout=min(1.0, timeout_s))
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb: Refusals
            refusals.check()
            if time.monotonic() >= deadline:
                raise BrokerError(f"cannot list topics: {exc}") from exc


#: ``group_protocol`` values: the classic protocol, KIP-848's (Kafka 4.0+).
CLASSIC = "classic"
CONSUMER = "consumer"


def group_settings(group_protocol: str = CLASSIC) -> dict[str, Any]:
    """How a consumer takes part in its group.

    ``classic``: the client-side eager ``range`` assignor, with a short session (a dead
    member is noticed within 6 s) and frequent heartbeats. ``consumer`` (KIP-848): the
    broker owns the session timeout, the heartbeat interval and the assignor, so librdkafka
    refuses those three settings; the broker's ``range`` assignor is asked for instead.
    Both ``range`` assignors co-partition topics of equal partition counts (the input
    topic and its repartition topic: partition p of both goes to the same member).
    """
    if group_protocol == CONSUMER:
        return {"group.protocol": CONSUMER, "group.remote.assignor": "range"}
    if group_protocol != CLASSIC:
        raise ConfigurationError(
            f"group_protocol must be {CLASSIC} or {CONSUMER}, got {group_protocol!r}"
        )
    return {
        "group.protocol": CLASSIC,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range",
    }


def consumer_settings(
    bootstrap: str, group_protocol: str = CLASSIC, **extra: Any
) -> dict[str, Any]:
    """Consumer settings that join groups quickly and read only committed data.
    ``group_protocol`` matters only to a consumer that subscribes (:func:`group_settings`)."""
    settings: dict[str, Any] = {
        **BASE,
        "bootstrap.servers": bootstrap,
        **group_settings(group_protocol),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        # Some brokers (Tansu) answer a fetch only when its wait is over, so the wait bounds
        # how long a new record waits to be fetched: it is the live path's latency budget.
        "fetch.wait.max.ms": 10,
        "queued.min.messages": 200000,
    }
    settings.update(_client_properties)
    settings.update(extra)
    return settings


def producer_settings(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Producer settings for batched, idempotent writes."""
    settings: dict[str, Any] = {
        **BASE,
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        # What idempotence implies, said outright: a write is acknowledged once every
        # in-sync replica (at least min.insync.replicas) has it.
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 1000000,
        "queue.buffering.max.kbytes": 1048576,
    }
    settings.update(_client_properties)
    settings.update(extra)
    return settings


def ensure_topics(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    timeout_s: float = 30.0,
    *,
    replication: Replication | None = None,
) -> None:
    """Create missing topics with the ``replication`` the cluster's size resolves
    (:meth:`Replication.resolve`; ``min.insync.replicas`` set on each topic of more than
    one copy); check existing ones have the partition count asked for, and warn about one
    with fewer copies than asked (Kafka does not add them by itself).
    KafkaSecurityError when the broker refuses this client's credentials or an ACL the
    start needs (Describe or Create on a topic)."""
    refusals = Refusals("this start (topic creation)")
    who = refusals.who
    settings: dict[str, Any] = {**client_settings(bootstrap), "error_cb": refusals}
    try:
        admin = AdminClient(settings)
    except KafkaException as exc:  # the first client a start makes: refuse bad properties
        raise ConfigurationError(
            f"the Kafka client refused its configuration: {exc.args[0].str()}; check the "
            f"properties given in SOW_KAFKA_PROPERTIES ({sorted(_client_properties)})"
        ) from exc
    try:
        metadata = list_topics(admin, refusals, timeout_s)
    except KafkaSecurityError:
        raise
    except BrokerError as exc:
        raise BrokerError(f"cannot list topics at {bootstrap}: {exc}") from exc
    existing = metadata.topics
    # Every broker the cluster knows: those listed alive and those holding replicas of
    # any topic (one down is still a member, and a start while it is down is no reason
    # to make fewer copies, nor to refuse topics made before).
    members = set(metadata.brokers)
    for topic in existing.values():
        for partition in topic.partitions.values():
            members.update(partition.replicas)
    replication = replication or Replication()
    wanted = replication.factor or min(max(len(members), 1), MAX_DEFAULT_REPLICATION)
    missing = []
    for spec in specs:
        found = existing.get(spec.name)
        if found is None or found.error is not None:
            missing.append(spec)
        elif len(found.partitions) != spec.partitions:
            raise BrokerError(
                f"topic {spec.name} has {len(found.partitions)} partitions but the topology "
                f"asks for {spec.partitions}; change the topology or recreate the topic"
            )
        else:
            _warn_if_fewer_copies(spec.name, found, wanted)
    if not missing:
        return
    factor, min_insync = replication.resolve(len(members))
    explicit = replication.min_insync is not None
    replicated = {"min.insync.replicas": str(min_insync)} if factor > 1 or explicit else {}
    futures = admin.create_topics(
        [
            NewTopic(s.name, s.partitions, factor, config={**replicated, **s.config})
            for s in missing
        ],
        operation_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result(timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise refusal(error, who, "Create", name) or BrokerError(
                f"cannot create topic {name}: {exc}"
            ) from exc
    deadline = time.monotonic() + timeout_s
    names = {s.name for s in missing}
    while time.monotonic() < deadline:
        topics = list_topics(admin, refusals, timeout_s).topics
        if all(n in topics and topics[n].error is None for n in names):
            return
        for name in sorted(n for n in names if n not in topics):
            # A topic this principal may not describe is left out of a listing: asked by
            # name, the broker says so.
            error = list_topics(admin, refusals, timeout_s, name).topics[name].error
            refused = None if error is None else refusal(error, who, DESCRIBE, name)
            if refused is not None:
                raise refused
        time.sleep(0.1)
    raise BrokerError(f"topics {sorted(names)} did not appear within {timeout_s:.0f}s")


def _warn_if_fewer_copies(name: str, topic: Any, factor: int) -> None:
    """Log once per start that an existing topic has fewer replicas than asked for."""
    copies = min((len(p.replicas) for p in topic.partitions.values()), default=factor)
    if copies < factor:
        log.warning(
            "topic %s has %d cop%s but the replication factor asked for is %d; Kafka does "
            "not add replicas to an existing topic: reassign its partitions "
            "(kafka-reassign-partitions) or recreate it",
            name,
            copies,
            "y" if copies == 1 else "ies",
            factor,
        )


def _close_producer(producer: Producer, timeout_s: float = 5.0) -> None:
    """Deliver what is queued (up to ``timeout_s``), then release the producer's
    connections at once, rather than whenever the object is collected. A producer that
    could not deliver everything is left to the collector (its close would wait on).
    Not for transactional producers (see KafkaTransactionalLog.close)."""
    if producer.flush(timeout_s) == 0:
        with contextlib.suppress(RuntimeError, KafkaException):
            producer.close()


#: Marks "where committed" among start offsets (never a Kafka offset or logical offset).
COMMITTED = -10_000
#: What the group coordinator answers offsets sent with group metadata it has moved past:
#: an older generation (classic) or member epoch (KIP-848; older brokers answer
#: ILLEGAL_GENERATION for it), a member it no longer knows, a rebalance under way.
_STALE_GROUP = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


def _raise_for(
    exc: KafkaException, what: str, refused: KafkaSecurityError | None = None
) -> NoReturn:
    """Raise what a Kafka error means: ``refused`` (the caller's translation of an
    authorization refusal, :func:`refusal`) when given, FencedError for a fenced or
    fatal producer, else BrokerError."""
    if refused is not None:
        raise refused from exc
    error = exc.args[0]
    if error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED) or error.fatal():
        raise FencedError(f"{what}: {error}; another processor took over") from exc
    raise BrokerError(f"{what}: {error}") from exc


def seek(consumer: Consumer, topic: str, partition: int, offset: int, how: str) -> None:
    """Fetch an assigned partition ``how`` (e.g. "from offset") ``offset``; a refusal is
    a BrokerError saying what was asked."""
    try:
        consumer.seek(TopicPartition(topic, partition, offset))
    except KafkaException as exc:
        raise BrokerError(f"cannot read {topic}[{partition}] {how} {offset}: {exc}") from exc
