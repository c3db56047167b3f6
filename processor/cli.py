"""The ``sow`` command: argument parsing only; the work happens in app, service and query.

Output is JSON lines on stdout; progress and logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from processor.config import DEFAULT_GRPC_ADDRESS, Settings
from processor.errors import ComponentFailedError, ConfigurationError, SowError

if TYPE_CHECKING:
    from processor.app import Application

log = logging.getLogger("sow")

EPILOG = """\
environment: KAFKA_BOOTSTRAP_SERVERS (use this Kafka instead of the embedded broker),
SOW_TOPOLOGY, SOW_STATE_DIR, SOW_GRPC_ADDRESS, SOW_GROUP_ID, SOW_INSTANCE_ID.
"""


def _common_server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default=None,
        help=f"address of a running 'sow serve' (default: $SOW_GRPC_ADDRESS or "
        f"{DEFAULT_GRPC_ADDRESS})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="sow",
        description="kafka-sow: a State of the World database on Kafka.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
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
            help="Kafka bootstrap servers; without it the embedded broker is started",
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
        "--no-docker",
        action="store_true",
        help="never try Kafka in Docker, even when a Docker engine answers",
    )
    process = runner("process", "Run only the processor against a configured Kafka.")
    process.add_argument("--max-batch", type=int, default=None, help="records per transaction")

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
    query.add_argument("--query-id", default="", help="echoed back in group_begin/group_end")
    query.add_argument(
        "--min-position",
        action="append",
        default=[],
        metavar="TOPIC/PARTITION/OFFSET",
        help="wait until the SOW reflects this log position (from publish); repeatable",
    )
    _common_server(query)

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
            "match) arrive as kind oof with the reason",
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
            "--max-backlog",
            type=int,
            default=0,
            help="messages the service may queue for this subscriber before disconnecting it "
            "as a slow consumer (default: the service's, 10000)",
        )
        if name == "sow-and-subscribe":
            command.add_argument(
                "--batch-size", type=int, default=0, help="query records per batch, 1..10000"
            )
        _common_server(command)

    evaluate = sub.add_parser(
        "eval",
        help="Evaluate an AMPS expression against a message.",
        description="Print the value of EXPRESSION for the message as JSON (true/false/null, "
        "a number, a string or an array; NaN prints as NaN). Needs no server.",
    )
    evaluate.add_argument("expression", help="e.g. \"/price * /qty > 1000 AND /side = 'buy'\"")
    evaluate.add_argument(
        "--message", default="{}", help="the message as a JSON object (default: {})"
    )
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        topology=getattr(args, "topology", None),
        bootstrap_servers=getattr(args, "bootstrap_servers", None),
        state_dir=getattr(args, "state_dir", None),
        grpc_address=getattr(args, "grpc_address", None),
        group_id=getattr(args, "group_id", None),
        instance_id=getattr(args, "instance_id", None),
        max_batch=getattr(args, "max_batch", None),
    )


def _out(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _failed(command: str, app: Application, failure: ComponentFailedError) -> int:
    """Report a component that stopped, stop the rest; the exit status of ``sow serve``."""
    sys.stderr.write(f"sow {command}: error: {failure}\nstopping...\n")
    app.stop()
    return 1


def cmd_serve(args: argparse.Namespace, *, processor: bool = True, service: bool = True) -> int:
    """Run until a signal (exit 0) or until a component thread stops on its own: then the
    whole process stops with a message naming the component and exits 1, rather than
    serving on without it."""
    from processor.app import start

    settings = _settings(args)
    if not service and not settings.bootstrap_servers:
        raise SowError(
            "sow process runs against an existing Kafka: pass --bootstrap-servers or set "
            "KAFKA_BOOTSTRAP_SERVERS (use sow serve for the all-in-one embedded setup)"
        )
    app = start(
        settings,
        processor=processor,
        service=service,
        allow_docker=not getattr(args, "no_docker", False),
        processor_process=processor and service,
    )
    stop = _stop_on_signal()
    ready = app.processor_ready
    if ready is not None:
        sys.stderr.write("waiting for the processor to join its group and restore its stores...\n")
        started = time.monotonic()
        reported = 0
        while not ready.wait(0.2):
            failure = app.failure()
            if failure is not None:
                return _failed(args.command, app, failure)
            if stop.is_set():
                app.stop()
                return 0
            waited = int(time.monotonic() - started)
            if waited >= reported + 5:
                reported = waited
                sys.stderr.write(f"  still starting after {waited}s (see the log lines above)\n")
    lines = [
        "kafka-sow is ready",
        f"  broker:     {app.broker.description}",
        f"  topology:   {settings.topology} ({', '.join(sorted(app.topology.topics))})",
        f"  state:      {settings.state_dir.resolve()}",
    ]
    if service:
        lines.append(
            f"  gRPC:       {app.grpc_address}  (try: sow query ORDERS --server {app.grpc_address})"
        )
    lines.append("  stop with Ctrl-C")
    sys.stderr.write("\n".join(lines) + "\n")
    try:
        failure = app.wait(stop)
    except BaseException:
        app.stop()
        raise
    if failure is not None:
        return _failed(args.command, app, failure)
    sys.stderr.write("stopping...\n")
    app.stop()
    return 1 if app.failure() else 0


def _address(args: argparse.Namespace) -> str:
    return args.server or Settings.from_env().grpc_address


def _record_json(record: Any) -> dict[str, Any]:
    """A record as printed: ``data`` in text form (JSON; Base64 text for binary)."""
    data: Any = (
        record.data.decode() if record.message_type == "binary" else orjson.loads(record.data)
    )
    out: dict[str, Any] = {
        "sow_key": record.sow_key,
        "data": data,
        "position": f"{record.position.topic}/{record.position.partition}/{record.position.offset}",
    }
    if record.correlation_id:
        out["correlation_id"] = record.correlation_id
    if record.expiration_ms:
        out["expiration_ms"] = record.expiration_ms
    return out


def cmd_publish(args: argparse.Namespace) -> int:
    from processor.service.client import SowClient

    options = {
        "sow_key": args.sow_key,
        "expiration": args.expiration,
        "correlation_id": args.correlation_id,
    }
    published = refused = 0
    vector: dict[tuple[str, int], int] = {}
    last_key = ""
    progress = _Progress("published")
    with SowClient(_address(args)) as client:
        if args.data is not None:
            replies: Any = [
                client.publish(args.topic, args.data.encode(), text_form=True, **options)
            ]
        else:
            lines = (line.strip().encode() for line in sys.stdin if line.strip())
            replies = client.publish_stream(args.topic, lines, text_form=True, **options)
        for number, reply in enumerate(replies, 1):
            if reply.position is None:
                refused += 1
                sys.stderr.write(f"sow publish: message {number} refused: {reply.error}\n")
                continue
            published += 1
            p = reply.position
            vector[(p.topic, p.partition)] = p.offset
            last_key = reply.sow_key
            _out({"sow_key": reply.sow_key, "position": f"{p.topic}/{p.partition}/{p.offset}"})
            progress.tick(published)
        progress.done(published)
        if args.wait and vector:
            positions = [_position_text(t, p, o) for (t, p), o in sorted(vector.items())]
            client.query(
                args.topic,
                sow_keys=[last_key],
                min_position=[_parse_position(text) for text in positions],
                timeout_seconds=args.wait_timeout,
                timeout=args.wait_timeout + 5,
            )
            _out({"published": published, "refused": refused, "applied": positions})
    return 1 if refused else 0


class _Progress:
    """Progress of long bulk commands on stderr: a line a second after the first second."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.started = self.last = time.monotonic()
        self.shown = False

    def tick(self, count: int) -> None:
        if count % 1000:
            return
        now = time.monotonic()
        if now - self.last >= 1.0:
            self.last = now
            self.shown = True
            rate = count / max(now - self.started, 1e-9)
            sys.stderr.write(f"  {self.verb} {count:,} messages ({rate:,.0f}/s)\n")

    def done(self, count: int) -> None:
        if self.shown:
            elapsed = time.monotonic() - self.started
            sys.stderr.write(
                f"  {self.verb} {count:,} messages in {elapsed:.1f}s "
                f"({count / max(elapsed, 1e-9):,.0f}/s)\n"
            )


def _position_text(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


def _parse_position(text: str) -> Any:
    from processor.service._generated import sow_pb2

    try:
        topic, partition, offset = text.rsplit("/", 2)
        return sow_pb2.Position(topic=topic, partition=int(partition), offset=int(offset))
    except ValueError:
        raise SowError(
            f"--min-position {text!r} is not TOPIC/PARTITION/OFFSET (as printed by sow publish)"
        ) from None


def cmd_query(args: argparse.Namespace) -> int:
    from processor.service.client import SowClient

    keys = [k for k in args.sow_keys.split(",") if k]
    positions = [_parse_position(p) for p in args.min_position]
    with SowClient(_address(args)) as client:
        for reply in client.query_stream(
            args.topic,
            sow_keys=keys,
            query_id=args.query_id,
            batch_size=args.batch_size,
            min_position=positions,
            text_form=True,
            filter=args.filter,
            top_n=args.top_n,
            skip_n=args.skip_n,
            order_by=args.order_by,
            grouping=args.grouping,
            projection=args.projection,
            wait_for_catch_up=True,
        ):
            part = reply.WhichOneof("part")
            if part == "batch":
                for record in reply.batch.records:
                    _out(_record_json(record))
            elif part == "group_end":
                end = reply.group_end
                _out(
                    {
                        "group_end": {
                            "query_id": end.query_id,
                            "topic_matches": end.topic_matches,
                            "matches": end.matches,
                            "records_returned": end.records_returned,
                            "elapsed_us": end.elapsed_us,
                            "plan": end.plan,
                        }
                    }
                )
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from processor.service.client import SowClient

    with SowClient(_address(args)) as client:
        if args.filter is not None:
            reply = client.delete(args.topic, filter=args.filter)
        elif args.data is not None:
            reply = client.delete(args.topic, data=args.data.encode(), text_form=True)
        else:
            reply = client.delete(args.topic, [k for k in args.sow_keys.split(",") if k])
    _out({"records_deleted": reply.records_deleted})
    return 0


def _position_json(position: Any) -> str:
    return _position_text(position.topic, position.partition, position.offset)


def _change_json(change: Any) -> dict[str, Any]:
    """A delivered change as printed."""
    from processor.service._generated import sow_pb2

    out: dict[str, Any] = {
        "kind": sow_pb2.ChangeKind.Name(change.kind).removeprefix("CHANGE_").lower(),
        "topic": change.topic,
        **_record_json(change.record),
        "changelog_position": _position_json(change.changelog_position),
    }
    if change.oof_reason:
        out["reason"] = change.oof_reason
    if change.HasField("current"):
        out["current"] = _record_json(change.current)["data"]
    return out


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Print a subscription's messages until stopped; Ctrl-C (or SIGTERM) exits 0."""
    from processor.service.client import SowClient

    options: dict[str, Any] = {
        "filter": args.filter,
        "oof": args.oof,
        "no_empties": args.no_empties,
        "sub_id": args.sub_id,
        "max_backlog": args.max_backlog,
        "text_form": True,
    }
    with SowClient(_address(args)) as client:
        if args.command == "subscribe":
            stream = client.subscribe(args.topic, **options)
        else:
            stream = client.sow_and_subscribe(args.topic, batch_size=args.batch_size, **options)
        signal.signal(signal.SIGTERM, lambda *_: stream.cancel())
        try:
            for message in stream:
                part = message.WhichOneof("part")
                if part == "change":
                    _out(_change_json(message.change))
                elif part == "batch":
                    for record in message.batch.records:
                        _out({"kind": "sow", "topic": record.topic, **_record_json(record)})
                elif part == "group_end":
                    end = message.group_end
                    _out(
                        {
                            "group_end": {
                                "records_returned": end.records_returned,
                                "snapshot": [_position_json(p) for p in end.snapshot],
                                "plan": end.plan,
                            }
                        }
                    )
                elif part == "registered":
                    snapshot = [_position_json(p) for p in message.registered.snapshot]
                    _out({"registered": {"snapshot": snapshot}})
        except KeyboardInterrupt:
            stream.cancel()
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from processor.expr import evaluate

    try:
        message = orjson.loads(args.message)
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"--message is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ConfigurationError("--message must be a JSON object, e.g. '{\"price\": 10}'")
    value = evaluate(args.expression, message)
    # The standard library writes NaN as ``NaN`` (which JSON lacks) instead of dropping it.
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sow`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handlers = {
        "serve": cmd_serve,
        "process": lambda a: cmd_serve(a, service=False),
        "publish": cmd_publish,
        "query": cmd_query,
        "delete": cmd_delete,
        "eval": cmd_eval,
        "subscribe": cmd_subscribe,
        "sow-and-subscribe": cmd_subscribe,
    }
    try:
        return int(handlers[args.command](args))
    except SowError as exc:
        sys.stderr.write(f"sow {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
