"""The options of ``spark.read.format("sow")``, parsed once on the driver.

Every option is a string (Spark passes them so); :func:`parse_options` checks them all
and raises ConfigurationError naming the option, what it got and what it accepts. The
result is a frozen, picklable :class:`ReadOptions` that travels to the executors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from processor.errors import ConfigurationError, ValueFormatError
from processor.topology.message_types import MESSAGE_TYPES
from processor.topology.message_types import traits as message_traits
from processor.topology.model import SowTopic
from processor.topology.quantities import parse_timestamp

READS = ("changelog", "input")
MODES = ("changelog", "latest")
BAD_RECORDS = ("fail", "column")
STARTING = ("earliest", "latest")
#: Offset ranges longer than this are split into several Spark partitions.
MAX_RECORDS_PER_SPLIT = 500_000
#: How many messages the driver reads to infer a json schema.
INFER_SAMPLE = 1000
#: The column that carries the reason a record could not be decoded (bad_records=column).
CORRUPT_COLUMN = "_corrupt_record"

KNOWN = (
    "bootstrap",
    "topic",
    "topology",
    "kafka_topic",
    "message_type",
    "avro_schema",
    "read",
    "mode",
    "as_of",
    "filter",
    "message_schema",
    "infer_schema",
    "bad_records",
    "max_records_per_split",
    "starting_offsets",
    "max_records_per_trigger",
    "pushdown",
    "kafka.",
)

#: A position vector: the next changelog offset per partition.
Positions = Mapping[int, int]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What one read asks for. ``as_of_ms`` and ``as_of_positions`` exclude each other."""

    bootstrap: str
    topic: SowTopic
    read: str = "changelog"
    mode: str = "changelog"
    as_of_ms: int | None = None
    as_of_positions: dict[int, int] | None = None
    filter: str | None = None
    message_schema: str | None = None
    infer_schema: bool = False
    bad_records: str = "fail"
    max_records_per_split: int = MAX_RECORDS_PER_SPLIT
    starting_offsets: str = "earliest"
    max_records_per_trigger: int | None = None
    pushdown: bool = False
    kafka: dict[str, str] = field(default_factory=dict)

    @property
    def kafka_topic(self) -> str:
        """The Kafka topic this read reads: the changelog or the input topic."""
        return self.topic.changelog_topic if self.read == "changelog" else self.topic.kafka_topic

    @property
    def latest(self) -> bool:
        """True when the read returns one state (mode=latest, or any as_of)."""
        return self.mode == "latest"


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = options.get(name, default).strip().lower()
    if value not in allowed:
        raise ConfigurationError(
            f"option {name}={options[name]!r} is not one of {', '.join(allowed)}"
        )
    return value


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"option {name}={raw!r} is not a positive whole number")
    return value


def _bool(options: Mapping[str, str], name: str) -> bool:
    raw = options.get(name, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ConfigurationError(f"option {name}={options[name]!r} is not true or false")
    return raw == "true"


def parse_positions(text: str, changelog: str) -> dict[int, int]:
    """A position vector: the JSON list a sow query returns as its bookmark
    (``[[changelog, partition, next_offset], ...]``) or ``partition:offset,...``."""
    stripped = text.strip()
    positions: dict[int, int] = {}
    try:
        if stripped.startswith("["):
            for topic, partition, offset in json.loads(stripped):
                if topic != changelog:
                    raise ConfigurationError(
                        f"option as_of names changelog {topic!r}, but this read is of "
                        f"{changelog!r}; give a position vector of this topic"
                    )
                positions[int(partition)] = int(offset)
        else:
            for item in stripped.split(","):
                partition, offset = item.split(":")
                positions[int(partition)] = int(offset)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"option as_of={text!r} is neither a timestamp nor a position vector "
            f"(JSON [[changelog, partition, next_offset], ...] or 'partition:offset,...'): "
            f"{exc}"
        ) from exc
    return positions


def _as_of(raw: str | None, changelog: str) -> tuple[int | None, dict[int, int] | None]:
    if raw is None or not raw.strip():
        return None, None
    text = raw.strip()
    if text.startswith("[") or (":" in text and "-" not in text and "T" not in text):
        return None, parse_positions(text, changelog)
    if text.isdigit():
        return int(text), None  # milliseconds since the epoch
    try:
        moment = parse_timestamp(text)
    except ValueFormatError as exc:
        raise ConfigurationError(f"option as_of: {exc}") from exc
    return int(moment.timestamp() * 1000), None


def _topic(options: Mapping[str, str]) -> SowTopic:
    name = options.get("topic")
    if not name:
        raise ConfigurationError(
            'option topic is required: the SOW topic to read, e.g. .option("topic", "ORDERS")'
        )
    found: SowTopic | None = None
    if options.get("topology"):
        from processor.topology.loader import load_topology

        topology = load_topology(options["topology"])
        if name not in topology.topics:
            raise ConfigurationError(
                f"option topic={name!r}: topology {options['topology']} has no such topic "
                f"(it has {', '.join(sorted(topology.topics)) or 'none'})"
            )
        found = topology.topics[name]
    message_type = options.get("message_type", found.message_type if found else "json")
    if message_type not in MESSAGE_TYPES:
        raise ConfigurationError(
            f"option message_type={message_type!r} is not one of {', '.join(MESSAGE_TYPES)}"
        )
    traits = message_traits(message_type)
    configured = found is not None and found.message_type == message_type
    schema = options.get("avro_schema", found.schema if configured and found else None)
    if traits.schema is not None and not schema:
        raise ConfigurationError(
            f"message_type {message_type} needs {traits.schema}: option "
            "avro_schema=<path to .avsc> for avro, or a topology whose topic names it"
        )
    if traits.composite and not configured:
        raise ConfigurationError(
            f"message_type {message_type} is declared from parts: give option topology=<file> "
            "whose topic declares them"
        )
    base = found or SowTopic(name)
    kafka_topic = options.get("kafka_topic", base.kafka_topic)
    return replace(base, message_type=message_type, schema=schema, kafka_topic=kafka_topic)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check and convert the options; ConfigurationError names any that is wrong."""
    for name in options:
        if not any(name == k or (k.endswith(".") and name.startswith(k)) for k in KNOWN):
            raise ConfigurationError(
                f"unknown option {name!r}; the sow data source knows "
                f"{', '.join(k + '*' if k.endswith('.') else k for k in KNOWN)}"
            )
    bootstrap = options.get("bootstrap")
    if not bootstrap:
        raise ConfigurationError(
            "option bootstrap is required: the Kafka bootstrap servers, e.g. "
            '.option("bootstrap", "localhost:9092") (sow serve prints its own)'
        )
    topic = _topic(options)
    read = _choice(options, "read", READS, "changelog")
    mode = _choice(options, "mode", MODES, "changelog")
    as_of_ms, as_of_positions = _as_of(options.get("as_of"), topic.changelog_topic)
    if read == "input" and (mode == "latest" or as_of_ms is not None or as_of_positions):
        raise ConfigurationError(
            "mode=latest and as_of apply to the changelog (read=changelog); the input topic "
            "is the history of commands, read it whole"
        )
    if as_of_ms is not None or as_of_positions is not None:
        mode = "latest" if "mode" not in options else mode
    expression = options.get("filter") or None
    if expression is not None:
        from processor.errors import ExpressionError
        from processor.expr import compile as compile_expression

        try:
            compile_expression(expression)
        except ExpressionError as exc:
            raise ConfigurationError(f"option filter={expression!r}: {exc}") from exc
    return ReadOptions(
        bootstrap=bootstrap,
        topic=topic,
        read=read,
        mode=mode,
        as_of_ms=as_of_ms,
        as_of_positions=as_of_positions,
        filter=expression,
        message_schema=options.get("message_schema") or None,
        infer_schema=_bool(options, "infer_schema"),
        bad_records=_choice(options, "bad_records", BAD_RECORDS, "fail"),
        max_records_per_split=_positive(options, "max_records_per_split") or MAX_RECORDS_PER_SPLIT,
        starting_offsets=_choice(options, "starting_offsets", STARTING, "earliest"),
        max_records_per_trigger=_positive(options, "max_records_per_trigger"),
        pushdown=_bool(options, "pushdown"),
        kafka={k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")},
    )
