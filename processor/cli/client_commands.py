"""The client subcommands: publish, query, delete, subscribe, eval (JSON lines out)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from processor.cli import connect
from processor.cli.guards import served
from processor.cli.signals import on_signals
from processor.config import Settings
from processor.errors import ConfigurationError, DeadlineError, SowError
from processor.topology.message_types import TRAITS


def _out(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _direct_route(args: argparse.Namespace) -> tuple[str, str] | None:
    """(bootstrap, topology) when ``sow publish`` writes straight to Kafka, else None
    (through the query service). ``--via auto`` goes direct when a `sow serve` runs beside
    it (its state directory names the broker and the topology) and no --server is given.
    (A processed acknowledgement is then asked of that service.)"""
    if args.via == "grpc" or (args.sow_key and args.data is None):
        return None  # (one SowKey for a whole stream: the service's columnar form has it)
    record = served(Settings.from_env().state_dir)
    route = (record.get("bootstrap", ""), record.get("topology", ""))
    if args.via == "kafka":
        if not all(route):
            raise SowError(
                "--via kafka publishes to the broker of the `sow serve` running in this "
                "folder (its state directory, SOW_STATE_DIR), and none runs here"
            )
        return route
    return route if all(route) and not args.server else None


def _direct_replies(
    args: argparse.Namespace, bootstrap: str, topology: str, lines: Any
) -> Iterator[Any]:
    """``sow publish`` straight to Kafka: the replies in the gRPC path's shape."""
    from processor.client.direct import DirectPublisher
    from processor.client.publishing import LogPosition, PublishResult

    server = connect.address(args) if args.ack == "processed" else None
    options: dict[str, Any] = {
        "text_form": True,
        "expiration": args.expiration,
        "correlation_id": args.correlation_id,
        "delta": args.delta,
        "timeout": args.timeout,
        "ack": args.ack,
    }
    security = connect.security(args) if server is not None else None
    with DirectPublisher(bootstrap, topology, server=server, security=security) as publisher:
        results: Iterable[Any]
        if args.data is not None:
            data = args.data.encode()
            results = [publisher.publish(args.topic, data, sow_key=args.sow_key, **options)]
        else:
            results = publisher.publish_stream(args.topic, lines, **options)
        for result in results:
            if isinstance(result, SowError):
                yield PublishResult("", None, type(result).__name__, str(result))
            else:
                yield PublishResult(result.sow_key, LogPosition(*result.position))


def _record_json(record: Any) -> dict[str, Any]:
    """A record as printed: ``data`` in text form: JSON for the types whose text form is
    JSON (json, avro, bson, msgpack, protobuf...; and an aggregated row); the message
    text, as a string, for fix, nvfix and xml; Base64 text for binary."""
    json_text = record.message_type not in TRAITS or TRAITS[record.message_type].json_text
    data: Any = (
        record.data.decode(errors="replace")
        if not json_text and record.position.topic
        else orjson.loads(record.data)
    )
    out: dict[str, Any] = {"sow_key": record.sow_key, "data": data}
    if record.position.topic:  # aggregated rows come from no single message
        position = record.position
        out["position"] = f"{position.topic}/{position.partition}/{position.offset}"
    if record.correlation_id:
        out["correlation_id"] = record.correlation_id
    if record.expiration_ms:
        out["expiration_ms"] = record.expiration_ms
    if record.HasField("queue_state"):  # a queue's message
        state = record.queue_state
        out["queue_state"] = {
            "leased_to": state.leased_to or None,
            "lease_deadline_ms": state.lease_deadline_ms or None,
            "deliveries": state.deliveries,
            "cancels": state.cancels,
        }
    return out


def cmd_publish(args: argparse.Namespace) -> int:
    options = {
        "sow_key": args.sow_key,
        "expiration": args.expiration,
        "correlation_id": args.correlation_id,
        "delta": args.delta,
        "ack": args.ack,
    }
    published = refused = 0
    vector: dict[tuple[str, int], int] = {}
    last_key = ""
    read = [0]  # characters of standard input read so far (the progress bar's measure)
    progress = _Progress("published", None if args.data is not None else _input_size())
    direct = _direct_route(args)

    def counted(lines: Any) -> Any:
        for line in lines:
            read[0] += len(line)
            if line.strip():
                yield line.strip().encode()

    with connect.client(args) as client:
        if direct is not None:
            replies: Any = _direct_replies(args, *direct, counted(sys.stdin))
        elif args.data is not None:
            replies = [
                client.publish(
                    args.topic, args.data.encode(), text_form=True, timeout=args.timeout, **options
                )
            ]
        else:
            lines = counted(sys.stdin)
            replies = client.publish_stream(
                args.topic, lines, text_form=True, ack_timeout=args.timeout, **options
            )
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
            progress.tick(published, read[0])
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
    """Progress of long bulk commands on stderr, from the first second on: on a terminal
    one line rewritten in place (with a bar and a percentage when the input's size is
    known), otherwise a log line a second."""

    def __init__(self, verb: str, total_bytes: int | None = None) -> None:
        self.verb = verb
        self.total = total_bytes
        self.started = self.last = time.monotonic()
        self.shown = False
        self.terminal = sys.stderr.isatty()

    def tick(self, count: int, done_bytes: int = 0) -> None:
        if count % 1000:
            return
        now = time.monotonic()
        if now - self.last >= (0.2 if self.terminal else 1.0) and now - self.started >= 1.0:
            self.last = now
            self.shown = True
            rate = count / max(now - self.started, 1e-9)
            text = f"  {self.verb} {count:,} messages ({rate:,.0f}/s)"
            if self.total:
                share = min(done_bytes / self.total, 1.0)
                bar = "#" * int(share * 30)
                text = f"  [{bar:<30}] {share:6.1%}" + text[1:]
            sys.stderr.write(f"\r{text}\x1b[K" if self.terminal else text + "\n")
            sys.stderr.flush()

    def done(self, count: int) -> None:
        if self.shown:
            elapsed = time.monotonic() - self.started
            line = (
                f"  {self.verb} {count:,} messages in {elapsed:.1f}s "
                f"({count / max(elapsed, 1e-9):,.0f}/s)"
            )
            sys.stderr.write(f"\r{line}\x1b[K\n" if self.terminal else line + "\n")


def _input_size() -> int | None:
    """The size of standard input when it is a regular file (a redirect), else None."""
    try:
        status = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) and status.st_size else None


def _position_text(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


def _parse_positions(texts: list[str]) -> list[Any]:
    """``--min-position`` values: each TOPIC/PARTITION/OFFSET, several joined by commas,
    or the JSON array ``sow publish --wait`` prints as "applied" (pasted as it is)."""
    found: list[Any] = []
    for text in texts:
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                items = json.loads(stripped)
            except ValueError:
                items = None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise SowError(
                    f"--min-position {text!r} is not a JSON array of TOPIC/PARTITION/OFFSET "
                    "strings (as sow publish --wait prints them)"
                )
        else:
            items = stripped.split(",")
        found += [_parse_position(item.strip()) for item in items if item.strip()]
    return found


def _parse_position(text: str) -> Any:
    from processor.wire import sow_pb2

    try:
        topic, partition, offset = text.rsplit("/", 2)
        return sow_pb2.Position(topic=topic, partition=int(partition), offset=int(offset))
    except ValueError:
        raise SowError(
            f"--min-position {text!r} is not TOPIC/PARTITION/OFFSET (as printed by sow publish)"
        ) from None


def cmd_query(args: argparse.Namespace) -> int:
    keys = [k for k in args.sow_keys.split(",") if k]
    positions = _parse_positions(args.min_position)
    with connect.client(args) as client:
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
            select=args.select,
            wait_for_catch_up=True,
            bookmark=args.bookmark,
            timeout=args.timeout,
        ):
            part = reply.WhichOneof("part")
            if part == "group_begin" and args.query_id:
                begin = reply.group_begin
                snapshot = [_position_json(p) for p in begin.snapshot]
                _out({"group_begin": {"query_id": begin.query_id, "snapshot": snapshot}})
            elif part == "batch":
                for record in reply.batch.records:
                    line = _record_json(record)
                    if record.topic != args.topic:  # a regular-expression topic
                        line = {"topic": record.topic, **line}
                    _out(line)
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
    with connect.client(args) as client:
        timeout = args.timeout
        if args.filter is not None:
            reply = client.delete(args.topic, timeout=timeout, filter=args.filter)
        elif args.data is not None:
            reply = client.delete(
                args.topic, timeout=timeout, data=args.data.encode(), text_form=True
            )
        else:
            keys = [k for k in args.sow_keys.split(",") if k]
            reply = client.delete(args.topic, keys, timeout=timeout)
    _out({"records_deleted": reply.records_deleted})
    return 0


def _position_json(position: Any) -> str:
    return _position_text(position.topic, position.partition, position.offset)


def _change_json(change: Any) -> dict[str, Any]:
    """A delivered change as printed."""
    from processor.wire import sow_pb2

    out: dict[str, Any] = {
        "kind": sow_pb2.ChangeKind.Name(change.kind).removeprefix("CHANGE_").lower(),
        "topic": change.topic,
        **_record_json(change.record),
        "changelog_position": _position_json(change.changelog_position),
    }
    if change.oof_reason:
        out["reason"] = change.oof_reason
    if change.delta:
        out["delta"] = True
    if change.HasField("current"):
        out["current"] = _record_json(change.current)["data"]
    return out


def _timestamp_bookmark(text: str) -> str:
    """``--from``: an ISO 8601 time (UTC unless it says otherwise) as a timestamp
    bookmark (YYYYmmddTHHMMSSZ); "" stays "" (no replay)."""
    if not text:
        return ""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise SowError(
            f"--from {text!r} is not a time: use ISO 8601 such as 2026-11-23T20:00:00 "
            "(UTC) or 2026-11-23T21:00:00+01:00, or 20261123T200000Z"
        ) from None
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC)
    return when.strftime("%Y%m%dT%H%M%SZ")


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Print a subscription's messages until stopped; Ctrl-C (or SIGTERM) exits 0."""
    options: dict[str, Any] = {
        "filter": args.filter,
        "oof": args.oof,
        "send_deletes": args.send_deletes,
        "oof_last_received": args.oof_last_received,
        "no_empties": args.no_empties,
        "sub_id": args.sub_id,
        "max_backlog": args.max_backlog,
        "delta": args.delta,
        "select": args.select,
        "conflation": args.conflation,
        "conflation_key": args.conflation_key,
        "grouping": args.grouping,
        "projection": args.projection,
        "text_form": True,
        "bookmark": args.bookmark or _timestamp_bookmark(args.from_time),
    }
    with connect.client(args) as client:
        if args.command == "subscribe":
            stream = client.subscribe(args.topic, **options)
        else:
            stream = client.sow_and_subscribe(
                args.topic,
                batch_size=args.batch_size,
                order_by=args.order_by,
                top_n=args.top_n,
                **({} if args.skip_n is None else {"skip_n": args.skip_n}),
                **options,
            )
        on_signals((signal.SIGTERM,), stream.cancel)  # on a thread: a handler takes no lock
        registration = _Registration(stream, args.timeout, connect.address(args))
        try:
            for message in registration.watch(stream):
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
                elif part == "completed":
                    reached = [_position_json(p) for p in message.completed.position]
                    _out({"completed": {"position": reached}})
        except KeyboardInterrupt:
            stream.cancel()
    return 0


class _Registration:
    """``--timeout`` of a subscription: the service must send the first message (its
    registration, or the query's first batch) within ``timeout_s``; otherwise the stream
    is cancelled and :meth:`watch` raises DeadlineError. Later silence is normal."""

    def __init__(self, stream: Any, timeout_s: float, address: str) -> None:
        self.timeout_s = timeout_s
        self.address = address
        self.answered = threading.Event()
        self.expired = threading.Event()

        def expire() -> None:
            if not self.answered.is_set():
                self.expired.set()
                stream.cancel()

        self.timer = threading.Timer(timeout_s, expire)
        self.timer.daemon = True
        self.timer.start()

    def watch(self, messages: Iterable[Any]) -> Iterator[Any]:
        """``messages``, noting the first; DeadlineError if the timer ended them."""
        try:
            for message in messages:
                self.answered.set()
                yield message
        finally:
            self.timer.cancel()
        if self.expired.is_set():
            raise DeadlineError(
                f"the service at {self.address} did not register the subscription within "
                f"--timeout {self.timeout_s:g}s"
            )


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
