"""The ``sow`` command line: its subcommands and options (nothing runs here)."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Sequence
from pathlib import Path

from processor.cli import exits
from processor.cli.acls_command import add_acls_parser
from processor.cli.connect import add_service_options as _common_server
from processor.cli.queue_commands import add_queue_parsers
from processor.cli.security_commands import add_security_parsers
from processor.cli.tool_parsers import add_tool_parsers
from processor.config import DEFAULT_GRPC_ADDRESS, GROUP_PROTOCOLS

EPILOG = f"""\
environment: KAFKA_BOOTSTRAP_SERVERS (use this Kafka instead of the embedded broker),
SOW_EMBEDDED_BROKER (auto, kafka or tansu), SOW_EMBEDDED_BROKERS (3: a replicated
cluster), SOW_TOPOLOGY, SOW_STATE_DIR, SOW_GRPC_ADDRESS,
SOW_GROUP_ID, SOW_INSTANCE_ID, SOW_METRICS_ADDRESS, SOW_GROUP_PROTOCOL (classic or
consumer), SOW_KAFKA_PROPERTIES (librdkafka properties for every Kafka client, e.g.
security.protocol=SASL_SSL;sasl.mechanism=PLAIN).

{exits.HELP}
"""


def _version() -> str:
    try:
        return importlib.metadata.version("kafka-sow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _timeout(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        help=f"seconds {what} may take before the command gives up with the timeout exit "
        "code (default: 60)",
    )


def _group_protocol(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group-protocol",
        choices=GROUP_PROTOCOLS,
        default=None,
        help="the processor's consumer-group protocol: consumer (KIP-848, Kafka 4.0+: "
        "a join or a leave moves only the partitions that change owner) or classic "
        "(default: SOW_GROUP_PROTOCOL, else consumer on the embedded Apache Kafka and "
        "classic on any other broker)",
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with options anywhere among the arguments.

    argparse matches a command's positionals in one go, so ``sow publish ORDERS --delta
    '{...}'`` would take DATA as missing at ``ORDERS`` and then refuse the message as an
    unrecognized argument; a single argument left over where DATA is missing is DATA.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if (
        len(extra) == 1
        and not extra[0].startswith("-")
        and "data" in vars(args)
        and args.data is None
    ):
        args.data = extra[0]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="sow",
        description="kafka-sow: a State of the World database on Kafka.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    parser.add_argument("--version", action="version", version=f"kafka-sow {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def runner(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text, epilog=EPILOG)
        p.add_argument(
            "--topology",
            type=Path,
            default=None,
            help="topology file or directory (YAML or AMPS XML; default: topologies)",
        )
        p.add_argument(
            "--bootstrap-servers",
            default=None,
            help="Kafka bootstrap servers; without it the embedded broker is started"
            if name == "serve"
            else "Kafka bootstrap servers (required here, or KAFKA_BOOTSTRAP_SERVERS: "
            f"sow {name} never starts a broker)",
        )
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="where RocksDB stores live (default: sow-state)",
        )
        p.add_argument(
            "--group-id", default=None, help="processor consumer group (default: sow-processor)"
        )
        p.add_argument(
            "--instance-id",
            default=None,
            help="this processor replica's id, unique within the group (default: 0)",
        )
        return p

    serve = runner(
        "serve",
        "Run the broker (embedded unless one is configured), the processor and the gRPC "
        "query service in one process.",
    )
    serve.add_argument(
        "--grpc-address",
        default=None,
        help=f"where to serve gRPC (default: {DEFAULT_GRPC_ADDRESS})",
    )
    serve.add_argument(
        "--metrics-address",
        default=None,
        help="serve Prometheus /metrics, /healthz and /readyz over HTTP here, e.g. "
        "127.0.0.1:9464 (default: SOW_METRICS_ADDRESS, else loopback on a free port, "
        "recorded in the state directory for sow status)",
    )
    serve.add_argument(
        "--embedded-broker",
        choices=("auto", "kafka", "tansu"),
        default=None,
        help="the broker to start when no bootstrap servers are given: auto (Apache Kafka "
        "when Java 17+ is installed, else Tansu), kafka or tansu (default: "
        "SOW_EMBEDDED_BROKER, else auto)",
    )
    serve.add_argument(
        "--embedded-brokers",
        type=int,
        default=None,
        metavar="N",
        help="members of the embedded Apache Kafka: 3 runs a replicated cluster on loopback "
        "(default: SOW_EMBEDDED_BROKERS, else 1)",
    )
    _group_protocol(serve)
    process = runner("process", "Run only the processor against a configured Kafka.")
    _group_protocol(process)
    process.add_argument("--max-batch", type=int, default=None, help="records per transaction")
    process.add_argument(
        "--standby",
        choices=("off", "all"),
        default=None,
        help="all: keep warm copies of the store partitions this processor does not own, "
        "so a failover replays only the changelog's tail (default: SOW_STANDBY, else off)",
    )
    process.add_argument(
        "--membership",
        choices=("dynamic", "static"),
        default=None,
        help="static: join the group with group.instance.id <group-id>-<instance-id>, so a "
        "restart within the session timeout keeps the partitions; not on the embedded broker, "
        "where a dead static member keeps them (default: SOW_MEMBERSHIP, else dynamic)",
    )
    reader = runner(
        "query-service",
        "Run only a query service (read replica and gRPC: queries, publishes, "
        "subscriptions) against a configured Kafka; run several to scale reads.",
    )
    reader.add_argument(
        "--grpc-address",
        default=None,
        help=f"where to serve gRPC (default: {DEFAULT_GRPC_ADDRESS})",
    )
    reader.add_argument(
        "--metrics-address",
        default=None,
        help="serve Prometheus /metrics, /healthz and /readyz over HTTP here (default: "
        "SOW_METRICS_ADDRESS; with the query service, else loopback on a free port)",
    )

    publish = sub.add_parser(
        "publish",
        help="Publish messages to a SOW topic.",
        description="Publish one message (DATA) or, without DATA, one message per line of "
        "standard input (streamed in batches; progress on stderr). Prints the SowKey and log "
        "position of each as JSON lines; a refused message is reported on stderr with its "
        "line number and the exit code is then 1.",
    )
    publish.add_argument("topic", help="SOW topic name")
    publish.add_argument(
        "data",
        nargs="?",
        help="the message as JSON (also for avro topics, encoded with the topic's schema); "
        "Base64 for binary topics",
    )
    publish.add_argument(
        "--sow-key", default="", help="SowKey, for topics whose publishers provide it"
    )
    publish.add_argument("--expiration", type=float, default=0.0, help="lifetime in seconds")
    publish.add_argument("--correlation-id", default="", help="passed through untouched")
    publish.add_argument(
        "--delta",
        action="store_true",
        help="delta_publish: merge the given fields into the stored record (nested objects "
        "merge, arrays are replaced whole, no field is removed); each message must give the "
        "Key fields",
    )
    publish.add_argument(
        "--via",
        choices=("auto", "kafka", "grpc"),
        default="auto",
        help="kafka: write straight to the broker, as the service would (SowKey, partition, "
        "duplicate detection), without a gRPC call per message; grpc: through the query "
        "service; auto (default): kafka when a sow serve runs in this folder and no --server "
        "is given",
    )
    publish.add_argument(
        "--ack",
        choices=("persisted", "processed"),
        default="persisted",
        help="what each acknowledgement waits for (AMPS's ack types): persisted, the message "
        "is in the log (default, fastest); processed, it is also applied, so a query right "
        "after the acknowledgement sees it",
    )
    publish.add_argument(
        "--wait",
        action="store_true",
        help="after publishing, wait until the SOW reflects every message, then print a "
        'summary line {"published", "refused", "applied"}: "applied" is the position '
        "vector to pass as --min-position",
    )
    publish.add_argument(
        "--wait-timeout", type=float, default=60.0, help="seconds --wait waits (default: 60)"
    )
    _common_server(publish)
    _timeout(
        publish,
        "an acknowledgement (of DATA, or of each message of a stream from stdin; waiting "
        "for input never counts)",
    )

    query = sub.add_parser(
        "query",
        help="Query a SOW topic.",
        description="Print the records of a SOW topic as JSON lines: one per record, then a "
        "group_end line with the counts.",
    )
    query.add_argument("topic", help="SOW topic name, or a regular expression over topic names")
    query.add_argument("--sow-keys", default="", help="comma-separated SowKeys to restrict to")
    query.add_argument(
        "--filter", default="", help="AMPS filter, e.g. \"/region = 'EU' AND /price > 100\""
    )
    query.add_argument("--top-n", type=int, default=0, help="return at most N records")
    query.add_argument(
        "--skip-n", type=int, default=0, help="skip the first N records (requires --top-n)"
    )
    query.add_argument(
        "--order-by", default="", help="sort: '/field [ASC|DESC] [TEXT], ...' (default ASC)"
    )
    query.add_argument(
        "--grouping", default="", help="aggregated query: group by '/a, /b' (with --projection)"
    )
    query.add_argument(
        "--projection",
        default="",
        help="aggregated query: fields per group, e.g. '/region, SUM(/price * /qty) AS /total, "
        "COUNT(/orderId) AS /orders' (with --grouping)",
    )
    query.add_argument("--batch-size", type=int, default=0, help="records per batch, 1..10000")
    query.add_argument(
        "--select",
        default="",
        help="select list (which fields each record carries), e.g. '[-/,+/id,+/price]'",
    )
    query.add_argument(
        "--query-id",
        default="",
        help="echoed back: with it, a group_begin line comes first and group_end carries it",
    )
    query.add_argument(
        "--bookmark",
        default="",
        help="a historical query: the SOW as of this point, a timestamp YYYYmmddTHHMMSSZ or "
        "a position vector TOPIC/PARTITION/OFFSET,... (topics with History; "
        "docs/subscriptions.md)",
    )
    query.add_argument(
        "--min-position",
        action="append",
        default=[],
        metavar="TOPIC/PARTITION/OFFSET",
        help="wait until the SOW reflects this log position (from publish); repeatable, "
        'or several joined by commas, or the "applied" array of sow publish --wait as it is',
    )
    _common_server(query)
    _timeout(query, "the query")

    delete = sub.add_parser(
        "delete",
        help="Delete records from a SOW topic (by SowKeys, filter or message).",
        description="sow_delete with exactly one selector; prints how many records were "
        "deleted. Deletes go through the transaction log like publishes.",
    )
    delete.add_argument(
        "topic", help="SOW topic name (a regular expression is allowed with --filter)"
    )
    selector = delete.add_mutually_exclusive_group(required=True)
    selector.add_argument("--sow-keys", help="comma-separated SowKeys")
    selector.add_argument("--filter", help="delete every record matching it; 1=1 deletes all")
    selector.add_argument(
        "--data", help="delete the record this message (JSON; Base64 for binary) would update"
    )
    _common_server(delete)
    _timeout(delete, "the delete (waiting for it to apply included)")

    for name, text in (
        (
            "subscribe",
            "Print every later change of a SOW topic that matches the filter as JSON lines "
            '(kind publish or oof), after a first {"registered"} line, until stopped '
            "(Ctrl-C exits 0).",
        ),
        (
            "sow-and-subscribe",
            "Print the current matching records (kind sow), a group_end line with the "
            "position vector they reflect, then every later change (kind publish, delete or "
            "oof) as JSON lines, with no gap and no duplicate, until stopped (Ctrl-C exits 0).",
        ),
    ):
        command = sub.add_parser(name, help=text.split(" as JSON")[0] + ".", description=text)
        command.add_argument(
            "topic", help="SOW topic name, or a regular expression over topic names"
        )
        command.add_argument("--filter", default="", help="AMPS content filter")
        command.add_argument(
            "--oof",
            action="store_true",
            help="out-of-focus notifications: records leaving the view (deleted, expired, "
            "match) arrive as kind oof with the reason; without it, as in AMPS, nothing is "
            "said of them",
        )
        command.add_argument(
            "--send-deletes",
            action="store_true",
            help="without --oof, a record received earlier that is deleted or expires "
            "arrives as kind delete (kafka-sow's behaviour before issue 19)",
        )
        command.add_argument(
            "--oof-last-received",
            action="store_true",
            help="an oof match carries the last state received, with the new one in "
            "current (kafka-sow's behaviour before issue 19; default: the new state)",
        )
        command.add_argument(
            "--no-empties",
            action="store_true",
            help="skip updates whose message equals the one last received for the record",
        )
        command.add_argument(
            "--sub-id", default="", help="subscription id (SubId), echoed by the service"
        )
        command.add_argument(
            "--select",
            default="",
            help="select list (which fields each record carries), e.g. '[-/,+/id,+/price]'",
        )
        command.add_argument(
            "--delta",
            action="store_true",
            help="delta subscription: an update of a record already received carries only "
            'the changed fields and the Key fields, printed with "delta": true',
        )
        command.add_argument(
            "--max-backlog",
            type=int,
            default=0,
            help="messages the service may queue for this subscriber before disconnecting it "
            "as a slow consumer (default: the service's, 10000)",
        )
        start = command.add_mutually_exclusive_group()
        start.add_argument(
            "--bookmark",
            default="",
            help="replay from here, then go live: 0 (the whole log), a position vector "
            "TOPIC/PARTITION/OFFSET,... of the last changes you have (each printed change's "
            "changelog_position), a timestamp YYYYmmddTHHMMSSZ or a range [B:E) "
            "(docs/subscriptions.md)",
        )
        start.add_argument(
            "--from",
            dest="from_time",
            default="",
            help="replay the changes after this UTC time (ISO 8601, e.g. 2026-11-23T20:00:00 "
            "or 20261123T200000Z), then go live",
        )
        command.add_argument(
            "--conflation",
            default="",
            help="at most one update per record per interval, the latest: 250ms, 1s, 1m",
        )
        command.add_argument(
            "--conflation-key",
            default="",
            help="conflate by these fields instead of the record, e.g. '[/symbol]'",
        )
        command.add_argument(
            "--grouping",
            default="",
            help="aggregated subscription: one live row per group of '/a, /b' "
            "(with --projection; docs/subscriptions.md)",
        )
        command.add_argument(
            "--projection",
            default="",
            help="aggregated subscription: fields per group, e.g. '/symbol, SUM(/qty) AS "
            "/total' (with --grouping)",
        )
        if name == "sow-and-subscribe":
            command.add_argument(
                "--batch-size", type=int, default=0, help="query records per batch, 1..10000"
            )
            command.add_argument(
                "--order-by", default="", help='"/field [ASC|DESC] [TEXT], ..." for the query'
            )
            command.add_argument(
                "--top-n",
                type=int,
                default=0,
                help="at most N records; with --skip-n a live window (paginated subscription)",
            )
            command.add_argument(
                "--skip-n",
                type=int,
                default=None,
                help="skip M records first (with --top-n, even 0 for the first page: a live "
                "paginated window)",
            )
        _common_server(command)
        _timeout(
            command,
            "the service may take to register the subscription (its first message; the "
            "subscription itself runs until stopped)",
        )

    add_queue_parsers(sub, _common_server, _timeout)

    add_security_parsers(sub)
    add_acls_parser(sub)
    add_tool_parsers(sub, _timeout)
    return parser
