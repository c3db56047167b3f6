"""Settings: one typed model, filled from defaults, environment variables and the CLI.

Each setting is defined once, in :class:`Settings`, with its environment variable, what it
means, how its text is read and, when the Helm chart sets it, its chart value: the
environment names, the table of docs/operations.md (:func:`processor.config.docs.settings_table`;
``python -m processor.config`` prints it) and the chart's values schema
(:func:`helm_schema`) are derived from there, and tests hold them to it.

What the settings that need more than their table line do is told in docs/operations.md,
"What some settings do" (kept beside the table).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from processor.config.values import READ, Spec, parse_kafka_properties, setting
from processor.errors import ConfigurationError

DEFAULT_GRPC_ADDRESS = "127.0.0.1:50051"
#: How the processor gets its partitions (SOW_ASSIGNMENT).
ASSIGNMENTS = ("group", "static")
#: Which store partitions a processor keeps warm copies of (SOW_STANDBY).
STANDBYS = ("off", "all")
#: Consumer-group membership (SOW_MEMBERSHIP).
MEMBERSHIPS = ("dynamic", "static")
#: Who the web console answers (SOW_CONSOLE).
CONSOLES = ("loopback", "on", "off")
#: The broker started when no bootstrap address is given (SOW_EMBEDDED_BROKER).
EMBEDDED_BROKERS = ("auto", "kafka", "tansu")
#: The processor's consumer-group protocol (SOW_GROUP_PROTOCOL): KIP-848 or the classic one.
GROUP_PROTOCOLS = ("classic", "consumer")
#: Whether the gRPC server asks clients for a certificate (SOW_GRPC_CLIENT_CERTS): grpcio's
#: server either does not ask or requires one it verifies (there is no "optional").
CLIENT_CERTS = ("none", "require")
#: How gRPC callers may prove who they are (SOW_AUTH, a comma list; empty: no logon).
AUTH_METHODS = ("certificate", "token", "password")


def static_transactional_id(group_id: str) -> str:
    """The one transactional id of every static processor (``assignment=static``) of
    group ``group_id``, whatever its instance id: each group member fences it as it is
    given partitions, so a static processor never works beside them (docs/scaling.md).
    No replica's id (``<group>-<instance>``) can be it."""
    return f"{group_id}.static"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a kafka-sow process needs to know; immutable once built."""

    bootstrap_servers: str | None = setting(
        None,
        Spec("KAFKA_BOOTSTRAP_SERVERS", "the Kafka brokers", "none: start the embedded broker"),
    )
    embedded_broker: str = setting(
        "auto",
        Spec(
            "SOW_EMBEDDED_BROKER",
            "the broker started when none is given (below)",
            "`auto`; or `kafka`, `tansu`",
            "choice",
            EMBEDDED_BROKERS,
        ),
    )
    embedded_brokers: int = setting(
        1,
        Spec(
            "SOW_EMBEDDED_BROKERS",
            "members of the embedded Apache Kafka: 3 runs a replicated cluster (below)",
            "`1`",
            "whole",
            bounds=(1, 5),
            unit="brokers",
        ),
    )
    #: None: the cluster's size up to 3 (``processor.log.Replication``).
    replication_factor: int | None = setting(
        None,
        Spec(
            "SOW_REPLICATION_FACTOR",
            "copies of every topic the product creates (below)",
            "the number of brokers, at most 3",
            "whole",
            bounds=(1, 32),
            unit="replicas",
            helm="kafka.replicationFactor",
        ),
    )
    #: None: 2 with 3 copies or more, else 1 (``processor.log.Replication``).
    min_insync_replicas: int | None = setting(
        None,
        Spec(
            "SOW_MIN_INSYNC_REPLICAS",
            "copies that must hold a write before it is acknowledged (below)",
            "2 with 3 copies or more, else 1",
            "whole",
            bounds=(1, 32),
            unit="replicas",
            helm="kafka.minInsyncReplicas",
        ),
    )
    topology: Path = setting(
        Path("topologies"),
        Spec("SOW_TOPOLOGY", "a topology file or a directory of them", "`topologies`", "path"),
    )
    state_dir: Path = setting(
        Path("sow-state"),
        Spec(
            "SOW_STATE_DIR", "stores, replica snapshots, the served address", "`sow-state`", "path"
        ),
    )
    grpc_address: str = setting(
        DEFAULT_GRPC_ADDRESS,
        Spec("SOW_GRPC_ADDRESS", "where the query service listens", f"`{DEFAULT_GRPC_ADDRESS}`"),
    )
    group_id: str = setting(
        "sow-processor",
        Spec(
            "SOW_GROUP_ID",
            "the processors' consumer group and transactional-id prefix",
            "`sow-processor`",
            helm="groupId",
        ),
    )
    instance_id: str = setting(
        "0",
        Spec("SOW_INSTANCE_ID", "part of the transactional id; unique per replica", "`0`"),
    )
    dead_letter_topic: str = setting(
        "sow.dead-letter",
        Spec(
            "SOW_DEAD_LETTER_TOPIC",
            "where records that cannot be applied go, with the reason",
            "`sow.dead-letter`",
            helm="deadLetterTopic",
        ),
    )
    max_batch: int = setting(
        50000,
        Spec(
            "SOW_MAX_BATCH",
            "records per transaction at most",
            "`50000`",
            "whole",
            unit="records",
            helm="processor.maxBatch",
        ),
    )
    pipelined_commits: bool = setting(
        True,
        Spec(
            "SOW_PIPELINED_COMMITS",
            "the processor applies the next batch while the previous one commits: a queue's "
            "always, a SOW topic's with live delivery (docs/live.md)",
            "`true`",
            "flag",
        ),
    )
    processor_restarts: int = setting(
        5,
        Spec(
            "SOW_PROCESSOR_RESTARTS",
            "times sow serve starts its processor child again after a signal killed it, "
            "within a minute; one more stops sow serve (exit code 1), as does any exit",
            "`5`",
            "whole",
            bounds=(0, 1_000_000),
        ),
    )
    live_delivery: bool = setting(
        False,
        Spec(
            "SOW_LIVE_DELIVERY",
            "the processor hands its changes to the query service in its process (or sow "
            "serve's) before the Kafka commit, where the topic allows it (docs/live.md)",
            "`false`",
            "flag",
        ),
    )
    queue_handover: bool = setting(
        True,
        Spec(
            "SOW_QUEUE_HANDOVER",
            "the processor hands a queue's at-least-once leases to the query service in its "
            "process (or sow serve's) before the Kafka commit (docs/queues.md)",
            "`true`",
            "flag",
        ),
    )
    #: None means the broker's default (``Broker.assignment``).
    assignment: str | None = setting(
        None,
        Spec(
            "SOW_ASSIGNMENT",
            "`group`: partitions spread over replicas; `static`: one processor, alone in its "
            "group, takes them all (docs/scaling.md)",
            "`group`; `static` on the embedded Tansu broker",
            "choice",
            ASSIGNMENTS,
            helm="processor.assignment",
        ),
    )
    #: None means the broker's default (``Broker.fetch_wait_ms``).
    fetch_wait_ms: int | None = setting(
        None,
        Spec(
            "SOW_FETCH_WAIT_MS",
            "how long a fetch may wait at the broker (below)",
            "100 on Apache Kafka, 2 on Tansu",
            "whole",
            bounds=(1, 1000),
            unit="milliseconds",
        ),
    )
    metrics_address: str = setting(
        "",
        Spec("SOW_METRICS_ADDRESS", "HTTP `host:port` for /metrics, /healthz, /readyz", "none"),
    )
    console: str = setting(
        "loopback",
        Spec(
            "SOW_CONSOLE",
            "the web console and HTTP API on the metrics address (docs/console.md): `loopback` "
            "answers loopback callers only, `on` any caller, `off` none",
            "`loopback`",
            "choice",
            CONSOLES,
        ),
    )
    event_topics: bool = setting(
        True,
        Spec(
            "SOW_EVENT_TOPICS",
            "the query service publishes /AMPS/ClientStatus and /AMPS/SOWStats (docs/console.md)",
            "`true`",
            "flag",
        ),
    )
    event_topic_prefix: str = setting(
        "sow-events",
        Spec(
            "SOW_EVENT_TOPIC_PREFIX",
            "the event topics' Kafka topics: `<prefix>.client-status`, `<prefix>.sow-stats`",
            "`sow-events`",
        ),
    )
    sow_stats_interval_s: int = setting(
        5,
        Spec(
            "SOW_STATS_INTERVAL",
            "between two rounds of /AMPS/SOWStats messages (AMPS's SOWStatsInterval)",
            "`5`",
            "whole",
            bounds=(1, 86400),
            unit="seconds",
        ),
    )
    regex_match_budget_ms: int = setting(
        100,
        Spec(
            "SOW_REGEX_MATCH_BUDGET_MS",
            "the time one match of a LIKE or REGEXP_REPLACE pattern that needs backtracking "
            "may take (docs/expressions.md; below)",
            "`100`",
            "whole",
            bounds=(1, 60000),
            unit="milliseconds",
        ),
    )
    ephemeral_log: bool = setting(
        False,
        Spec(
            "SOW_EPHEMERAL_LOG",
            "the broker's log ends with the process: a new log at start is logged at INFO",
            "`false`",
            "flag",
        ),
    )
    kafka_properties: str = setting(
        "",
        Spec(
            "SOW_KAFKA_PROPERTIES",
            "`key=value;key=value` librdkafka properties for every client (below)",
            "none",
            "properties",
        ),
    )
    standby: str = setting(
        "off",
        Spec(
            "SOW_STANDBY",
            "`all`: warm copies of the stores this processor does not own",
            "`off`",
            "choice",
            STANDBYS,
            helm="processor.standby",
        ),
    )
    membership: str = setting(
        "dynamic",
        Spec(
            "SOW_MEMBERSHIP",
            "`static`: join with a `group.instance.id`",
            "`dynamic`",
            "choice",
            MEMBERSHIPS,
            helm="processor.membership",
        ),
    )
    #: None means the broker's default (``Broker.group_protocol``).
    group_protocol: str | None = setting(
        None,
        Spec(
            "SOW_GROUP_PROTOCOL",
            "the processors' consumer-group protocol (below)",
            "`consumer` on the embedded Kafka, else `classic`",
            "choice",
            GROUP_PROTOCOLS,
            helm="processor.groupProtocol",
        ),
    )
    # gRPC TLS and logon (docs/security.md): all off by default.
    grpc_tls_cert: Path | None = setting(
        None, Spec("SOW_GRPC_TLS_CERT", "gRPC TLS: the server's certificate chain", "none", "path")
    )
    grpc_tls_key: Path | None = setting(
        None, Spec("SOW_GRPC_TLS_KEY", "gRPC TLS: the server's private key", "none", "path")
    )
    grpc_tls_client_ca: Path | None = setting(
        None, Spec("SOW_GRPC_TLS_CLIENT_CA", "the CAs of client certificates", "none", "path")
    )
    grpc_client_certs: str = setting(
        "none",
        Spec(
            "SOW_GRPC_CLIENT_CERTS",
            "`require`: mutual TLS, every client shows a certificate of the client CAs",
            "`none`",
            "choice",
            CLIENT_CERTS,
            helm="grpc.tls.clientCerts",
        ),
    )
    auth: str = setting(
        "",
        Spec(
            "SOW_AUTH",
            "how gRPC callers log on: `certificate`, `token`, `password` (a comma list)",
            "none: no logon",
            "methods",
            AUTH_METHODS,
            helm="grpc.auth.methods",
        ),
    )
    users_file: Path | None = setting(
        None, Spec("SOW_USERS_FILE", "users, password hashes, roles", "none", "path")
    )
    jwt_key: Path | None = setting(
        None,
        Spec("SOW_JWT_KEY", "the token issuer's public key, or an HS256 secret", "none", "path"),
    )
    jwks_file: Path | None = setting(
        None, Spec("SOW_JWKS_FILE", "the token issuer's keys (JWKS)", "none", "path")
    )
    jwt_audience: str = setting(
        "", Spec("SOW_JWT_AUDIENCE", "the `aud` of tokens", "none", helm="grpc.auth.audience")
    )
    jwt_issuer: str = setting(
        "", Spec("SOW_JWT_ISSUER", "the `iss` of tokens", "none: any", helm="grpc.auth.issuer")
    )
    jwt_roles_claim: str = setting(
        "roles",
        Spec("SOW_JWT_ROLES_CLAIM", "the roles claim", "`roles`", helm="grpc.auth.rolesClaim"),
    )
    entitlements: Path | None = setting(
        None, Spec("SOW_ENTITLEMENTS", "the entitlements file", "none: every right", "path")
    )

    # The Schema Registry of topics in its wire format (docs/schema-registry.md).
    schema_registry_user_info: str = setting(
        "",
        Spec(
            "SOW_SCHEMA_REGISTRY_USER_INFO",
            "the Schema Registry's basic authentication, `user:password`",
            "none: no authentication",
        ),
    )
    schema_registry_properties: str = setting(
        "",
        Spec(
            "SOW_SCHEMA_REGISTRY_PROPERTIES",
            "`key=value;key=value` properties of confluent-kafka's Schema Registry client: "
            "TLS (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`), "
            "bearer tokens (`bearer.auth.*`)",
            "none",
            "properties",
        ),
    )
    schema_registry_wait_s: int = setting(
        60,
        Spec(
            "SOW_SCHEMA_REGISTRY_WAIT_S",
            "how long a record waits for an unreachable Schema Registry (its schema in "
            "no cache) before it is dead-lettered",
            "`60`",
            "whole",
            bounds=(0, 86_400),
            unit="seconds",
        ),
    )

    #: Setting -> its environment variable (derived from the fields).
    ENVIRONMENT: ClassVar[dict[str, str]]

    @property
    def transactional_id(self) -> str:
        """Stable per processor replica, so a restarted replica fences its predecessor; a
        static processor's is its group's static one (:func:`static_transactional_id`)."""
        if self.assignment == "static":
            return static_transactional_id(self.group_id)
        return f"{self.group_id}-{self.instance_id}"

    @property
    def group_instance_id(self) -> str | None:
        """The consumer's ``group.instance.id`` under static membership (None: dynamic)."""
        return f"{self.group_id}-{self.instance_id}" if self.membership == "static" else None

    @property
    def registry_properties(self) -> dict[str, str]:
        """``schema_registry_properties`` as the registry client's property map."""
        return parse_kafka_properties(
            self.schema_registry_properties,
            "schema_registry_properties (SOW_SCHEMA_REGISTRY_PROPERTIES)",
            "Schema Registry client",
        )

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
        specs = specs_by_name()
        unknown = set(values) - specs.keys()
        if unknown:
            raise ConfigurationError(f"unknown settings {sorted(unknown)}; known: {sorted(specs)}")
        return replace(
            self,
            **{
                name: READ[specs[name].kind](name, specs[name], value)
                for name, value in values.items()
            },
        )


def specs_by_name() -> dict[str, Spec]:
    """Every setting's :class:`Spec`, in definition order."""
    return {f.name: f.metadata["spec"] for f in fields(Settings)}


Settings.ENVIRONMENT = {name: spec.env for name, spec in specs_by_name().items()}
