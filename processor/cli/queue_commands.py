"""``sow consume`` and ``sow queue-ack`` / ``queue-cancel`` / ``queue-expire``: the queues
from the command line (docs/queues.md)."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from typing import Any

from processor.cli.signals import on_signals
from processor.errors import DeadlineError, SowError

Adder = Callable[..., None]


def add_queue_parsers(sub: Any, common_server: Adder, timeout: Adder) -> None:
    """Add the queue subcommands to the ``sow`` parser."""
    consume = sub.add_parser(
        "consume",
        help="Consume a queue: print each message leased as a JSON line.",
        description="Subscribe to a queue and print a JSON line per lease (bookmark, "
        'deliveries, lease deadline, the message), after a first {"registered"} line. '
        "With --ack each message is acknowledged once printed (it leaves the queue); "
        "without it, the leases return when the command ends. --count N ends after N "
        "messages; otherwise Ctrl-C (or SIGTERM) ends it and exits 0.",
    )
    consume.add_argument("queue", help="queue name")
    consume.add_argument("--filter", default="", help="AMPS content filter over its messages")
    consume.add_argument(
        "--max-backlog",
        type=int,
        default=None,
        help="most unacknowledged leases held at once (capped by the queue's "
        "MaxPerSubscriptionBacklog; default 1)",
    )
    consume.add_argument("--ack", action="store_true", help="acknowledge each message printed")
    consume.add_argument("--count", type=int, default=0, help="stop after N messages")
    common_server(consume)
    timeout(consume, "the service may take to register the subscription")
    for action, text in (
        ("ack", "Acknowledge messages of a queue (sow_delete): they leave it."),
        ("cancel", "Return leased messages to a queue (their cancel counts + 1)."),
        ("expire", "Expire messages of a queue now (to the dead-letter topic)."),
    ):
        command = sub.add_parser(f"queue-{action}", help=text, description=text)
        command.add_argument("queue", help="queue name")
        command.add_argument(
            "bookmarks", nargs="*", help="bookmarks of the messages, as consume prints them"
        )
        if action == "ack":
            command.add_argument("--filter", default="", help="every message it matches")
        common_server(command)
        timeout(command, "the command")


def cmd_consume(args: argparse.Namespace) -> int:
    """Print a queue's leases until stopped (or ``--count``)."""
    from processor.cli.client_commands import _out, _record_json
    from processor.cli.connect import client

    with client(args) as service:
        stream = service.consume(
            args.queue, filter=args.filter, max_backlog=args.max_backlog, text_form=True
        )
        on_signals((signal.SIGTERM,), stream.close)  # on a thread: a handler takes no lock
        registered = threading.Event()

        def give_up() -> None:
            if not registered.wait(args.timeout):
                stream.close()

        threading.Thread(target=give_up, daemon=True).start()
        printed = 0
        try:
            for message in stream:
                if message.WhichOneof("part") == "registered":
                    registered.set()
                    _out({"registered": {"queue": args.queue}})
                    continue
                lease = message.lease
                _out(_lease_json(lease, _record_json(lease.record)))
                if args.ack:
                    stream.ack([lease.bookmark])
                printed += 1
                if args.count and printed >= args.count:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()
        if not registered.is_set():
            raise DeadlineError(
                f"the service did not register the subscription within {args.timeout:g}s"
            )
    return 0


def _lease_json(lease: Any, record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "barrier" if lease.barrier else "lease",
        "bookmark": lease.bookmark,
        "deliveries": lease.deliveries,
        "topic": lease.record.topic,
        "data": record["data"],
    }
    if lease.lease_deadline_ms:
        out["lease_deadline_ms"] = lease.lease_deadline_ms
    return out


def cmd_queue_action(args: argparse.Namespace) -> int:
    """Acknowledge, cancel or expire messages of a queue; prints the commands written
    and, for an acknowledgement, the messages it removed."""
    from processor.cli.client_commands import _out
    from processor.cli.connect import client

    action = args.command.removeprefix("queue-")
    given = getattr(args, "filter", "")
    if bool(args.bookmarks) == bool(given):
        raise SowError(f"sow queue-{action}: give bookmarks or --filter (ack only), not both")
    with client(args) as service:
        reply = service.queue_act(
            args.queue, action, bookmarks=args.bookmarks, filter=given, timeout=args.timeout
        )
    done = {action: len(args.bookmarks) if args.bookmarks else "filter", "commands": reply.commands}
    _out(done | ({"removed": reply.removed} if action == "ack" else {}))
    return 0
