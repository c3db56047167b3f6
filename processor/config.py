"""Settings: one typed model, filled from defaults, environment variables and the CLI.

| setting | environment variable | default |
| --- | --- | --- |
| bootstrap_servers | KAFKA_BOOTSTRAP_SERVERS | none: start the embedded broker |
| embedded_broker | SOW_EMBEDDED_BROKER | ``auto``; or ``kafka``, ``tansu`` (see below) |
| topology | SOW_TOPOLOGY | ``topologies`` (a file or a directory) |
| state_dir | SOW_STATE_DIR | ``sow-state`` |
| grpc_address | SOW_GRPC_ADDRESS | ``127.0.0.1:50051`` |
| group_id | SOW_GROUP_ID | ``sow-processor`` |
| instance_id | SOW_INSTANCE_ID | ``0`` (part of the transactional id; unique per replica) |
| dead_letter_topic | SOW_DEAD_LETTER_TOPIC | ``sow.dead-letter`` |
| max_batch | SOW_MAX_BATCH | ``50000`` records per transaction |
| assignment | SOW_ASSIGNMENT | ``group``; ``static``: one processor takes every partition |
| fetch_wait_ms | SOW_FETCH_WAIT_MS | 100 on Apache Kafka, 2 on Tansu (see below) |
| kafka_properties | SOW_KAFKA_PROPERTIES | none; ``key=value;key=value`` librdkafka properties |
| standby | SOW_STANDBY | ``off``; ``all``: warm copies of the stores this processor does not own |
| membership | SOW_MEMBERSHIP | ``dynamic``; ``static``: join with a ``group.instance.id`` |
| group_protocol | SOW_GROUP_PROTOCOL | ``consumer`` on the embedded Kafka, else ``classic`` |

``embedded_broker`` picks the broker ``sow serve`` starts when no bootstrap servers are given:
``auto`` starts the embedded Apache Kafka when Java 17+ is installed, else the embedded Tansu
broker (memory only); ``kafka`` or ``tansu`` insist on one (processor/log/broker/).

``kafka_properties`` go into every Kafka client the product makes (consumers, producers,
admin), after the product's own settings: security (``security.protocol=SASL_SSL;
sasl.mechanism=PLAIN;sasl.username=...``), TLS files (``ssl.ca.location=...``) and the like.

``fetch_wait_ms`` is how long a consumer's fetch may wait at the broker for new records (the
processor reading its input, the query service reading the changelogs). Kafka answers a
fetch as soon as records arrive, so there it only bounds idle requests. The embedded Tansu
broker answers a fetch only when its wait is over, so the wait is added to the latency of
every change (twice: input, then changelog): small waits make changes visible sooner and
cost idle CPU (measured on 2 cores: ~17% of a core at 10 ms, ~30-40% at 2 ms).

``standby=all`` makes a group-mode processor tail the changelog of every persistent store
partition it does not own into its own store files, so taking one over replays only the
changelog's tail (docs/standby.md). ``membership=static`` gives the group member a
``group.instance.id`` (``group_id-instance_id``): a replica restarted within the session
timeout gets its partitions back without a rebalance; the Helm chart sets it, with the
instance id from the pod name. It is not the default: on the embedded Tansu broker a
static member that dies keeps its partitions (nobody takes them over), see docs/standby.md.

``group_protocol`` is the consumer-group protocol of the processor's group members:
``consumer`` (KIP-848: the broker assigns partitions, with its ``range`` assignor, and moves
only those that change owner, so a join or a leave does not stop the other members) or
``classic`` (the client-side eager ``range`` protocol: every member gives up all its
partitions at every rebalance). ``consumer`` needs Apache Kafka 4.0 or later (or a broker
that implements KIP-848); the embedded Apache Kafka has it and uses it by default, while an
external broker keeps ``classic`` unless told otherwise, because an older broker refuses a
``consumer`` member (docs/scaling.md). Every processor of a group must use the same one; a
processor with ``assignment=static`` joins no group and uses neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from processor.errors import ConfigurationError

DEFAULT_GRPC_ADDRESS = "127.0.0.1:50051"
#: How the processor gets its partitions (SOW_ASSIGNMENT).
ASSIGNMENTS = ("group", "static")
#: Which store partitions a processor keeps warm copies of (SOW_STANDBY).
STANDBYS = ("off", "all")
#: Consumer-group membership (SOW_MEMBERSHIP).
MEMBERSHIPS = ("dynamic", "static")
#: The broker started when no bootstrap address is given (SOW_EMBEDDED_BROKER).
EMBEDDED_BROKERS = ("auto", "kafka", "tansu")
#: The processor's consumer-group protocol (SOW_GROUP_PROTOCOL): KIP-848 or the classic one.
GROUP_PROTOCOLS = ("classic", "consumer")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a kafka-sow process needs to know; immutable once built."""

    bootstrap_servers: str | None = None
    #: Which broker to start when no bootstrap address is given; see the module table.
    embedded_broker: str = "auto"
    topology: Path = Path("topologies")
    state_dir: Path = Path("sow-state")
    grpc_address: str = DEFAULT_GRPC_ADDRESS
    group_id: str = "sow-processor"
    instance_id: str = "0"
    dead_letter_topic: str = "sow.dead-letter"
    max_batch: int = 50000
    #: None means ``group``; see the module table.
    assignment: str | None = None
    #: None means the broker's default (:func:`default_fetch_wait_ms`).
    fetch_wait_ms: int | None = None
    #: HTTP ``host:port`` for /metrics, /healthz and /readyz ("": none).
    metrics_address: str = ""
    #: The broker's log ends with the process that started it (the embedded broker): a
    #: new log at start is then expected and logged at INFO, not WARNING.
    ephemeral_log: bool = False
    #: ``key=value;key=value`` librdkafka properties for every client ("": none).
    kafka_properties: str = ""
    #: ``off`` or ``all``; see the module table.
    standby: str = "off"
    membership: str = "dynamic"
    #: None means the broker's default (``Broker.group_protocol``); see the module table.
    group_protocol: str | None = None

    @property
    def transactional_id(self) -> str:
        """Stable per processor replica, so a restarted replica fences its predecessor."""
        return f"{self.group_id}-{self.instance_id}"

    @property
    def group_instance_id(self) -> str | None:
        """The consumer's ``group.instance.id`` under static membership (None: dynamic)."""
        return self.transactional_id if self.membership == "static" else None

    #: Setting -> the environment variable that sets it.
    ENVIRONMENT: ClassVar[dict[str, str]] = {
        "bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
        "embedded_broker": "SOW_EMBEDDED_BROKER",
        "topology": "SOW_TOPOLOGY",
        "state_dir": "SOW_STATE_DIR",
        "grpc_address": "SOW_GRPC_ADDRESS",
        "group_id": "SOW_GROUP_ID",
        "instance_id": "SOW_INSTANCE_ID",
        "dead_letter_topic": "SOW_DEAD_LETTER_TOPIC",
        "max_batch": "SOW_MAX_BATCH",
        "assignment": "SOW_ASSIGNMENT",
        "fetch_wait_ms": "SOW_FETCH_WAIT_MS",
        "metrics_address": "SOW_METRICS_ADDRESS",
        "ephemeral_log": "SOW_EPHEMERAL_LOG",
        "kafka_properties": "SOW_KAFKA_PROPERTIES",
        "standby": "SOW_STANDBY",
        "membership": "SOW_MEMBERSHIP",
        "group_protocol": "SOW_GROUP_PROTOCOL",
    }

    @property
    def client_properties(self) -> dict[str, str]:
        """``kafka_properties`` as a librdkafka property map (validated when set)."""
        return parse_kafka_properties(self.kafka_properties)

    def environment(self) -> dict[str, str]:
        """These settings as environment variables (the inverse of ``from_env``), for a
        child process that must run with them."""
        values = {name: getattr(self, name) for name in self.ENVIRONMENT}
        return {
            self.ENVIRONMENT[name]: str(value)
            for name, value in values.items()
            if value is not None
        }

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then environment variables, then non-None ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field_name, variable in cls.ENVIRONMENT.items():
            raw = env.get(variable, "").strip()
            if raw:
                values[field_name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls()._with(values)

    def _with(self, values: dict[str, Any]) -> Settings:
        known = {f.name for f in fields(self)}
        unknown = set(values) - known
        if unknown:
            raise ConfigurationError(f"unknown settings {sorted(unknown)}; known: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in values.items():
            if name in ("topology", "state_dir"):
                converted[name] = Path(value)
            elif name == "max_batch":
                converted[name] = _whole(name, value, "records", 1)
            elif name == "fetch_wait_ms":
                converted[name] = _whole(name, value, "milliseconds", 1, 1000)
            elif name == "ephemeral_log":
                converted[name] = str(value).strip().lower() in ("1", "true", "yes")
            elif name == "kafka_properties":
                parse_kafka_properties(str(value))  # refuse a malformed value now
                converted[name] = str(value)
            elif name in _CHOICES:
                converted[name] = _choice(name, value)
            else:
                converted[name] = str(value)
        return replace(self, **converted)


#: Settings with a fixed set of values.
_CHOICES = {
    "embedded_broker": EMBEDDED_BROKERS,
    "assignment": ASSIGNMENTS,
    "standby": STANDBYS,
    "membership": MEMBERSHIPS,
    "group_protocol": GROUP_PROTOCOLS,
}


def _choice(name: str, value: Any) -> str:
    """``value`` if it is one of the setting's choices, or a ConfigurationError naming
    the setting, its environment variable and the choices."""
    choices = _CHOICES[name]
    text = str(value).strip().lower()
    if text not in choices:
        variable = Settings.ENVIRONMENT[name]
        raise ConfigurationError(
            f"{name} ({variable}) must be one of {', '.join(choices)}, got {value!r}"
        )
    return text


def _whole(name: str, value: Any, unit: str, least: int, most: int | None = None) -> int:
    """``value`` as a whole number within bounds, or a ConfigurationError naming it."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{name} must be a whole number of {unit}, got {value!r}"
        ) from None
    if number < least or (most is not None and number > most):
        bound = f"at least {least}" if most is None else f"between {least} and {most}"
        raise ConfigurationError(f"{name} must be {bound} {unit}, got {value!r}")
    return number


def parse_kafka_properties(text: str) -> dict[str, str]:
    """``key=value;key=value`` (blank entries ignored) as a map, or a ConfigurationError
    naming the entry that is not ``key=value``. Values may contain ``=``; keys are
    librdkafka property names (letters, digits, ``.`` and ``_``)."""
    properties: dict[str, str] = {}
    for position, entry in enumerate(text.split(";"), start=1):
        if not entry.strip():
            continue
        key, equals, value = entry.partition("=")
        key = key.strip()
        if not equals or not key or not all(c.isalnum() or c in "._" for c in key):
            raise ConfigurationError(
                f"kafka_properties (SOW_KAFKA_PROPERTIES) entry {position} {entry.strip()!r} "
                "is not key=value; write librdkafka properties as "
                "'key=value;key=value', e.g. 'security.protocol=SASL_SSL;sasl.mechanism=PLAIN'"
            )
        properties[key] = value.strip()
    return properties
