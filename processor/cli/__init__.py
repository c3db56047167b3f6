"""The ``sow`` command: argument parsing only; the work happens in app, service and query.

Output is JSON lines on stdout; progress and logs go to stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from processor.cli import signals
from processor.cli.parser import build_parser, parse

__all__ = ["build_parser", "main"]

#: Commands that run until stopped: Ctrl-C asks them for a clean stop, at any moment.
RUNNERS = ("serve", "process", "query-service")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sow`` console script."""
    # First thing, before the heavy imports: a Ctrl-C from here on is a request to stop,
    # which `sow serve` honours at any moment of its start-up.
    # The handlers take no lock (processor/cli/signals.py): any number of signals, at any
    # moment, sets ``stop`` from a thread of its own.
    stop = threading.Event()
    stopping = (signal.SIGINT, signal.SIGTERM)
    signals.on_signals(stopping, stop.set)
    args = parse(argv)
    if args.command not in RUNNERS:
        if not args.verbose:
            # gRPC's core logs a failed TLS handshake on stderr itself; the command says
            # it in one line (processor/client/failures.py). -v keeps gRPC's lines.
            os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        signals.restore(stopping)
        if signals.received():
            return 130
    return _run(args, stop)


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    import logging

    from processor import progress
    from processor.cli import exits
    from processor.cli.acls_command import cmd_acls
    from processor.cli.check import cmd_check_config
    from processor.cli.client_commands import (
        cmd_delete,
        cmd_eval,
        cmd_publish,
        cmd_query,
        cmd_subscribe,
    )
    from processor.cli.queue_commands import cmd_consume, cmd_queue_action
    from processor.cli.security_commands import cmd_hash_password
    from processor.cli.serve import cmd_serve
    from processor.cli.status import cmd_status
    from processor.config import Settings
    from processor.errors import SowError

    progress.install(logging.DEBUG if args.verbose else logging.INFO)
    handlers = {
        "serve": lambda a: cmd_serve(a, stop),
        "process": lambda a: cmd_serve(a, stop, service=False),
        "query-service": lambda a: cmd_serve(a, stop, processor=False),
        "publish": cmd_publish,
        "query": cmd_query,
        "delete": cmd_delete,
        "eval": cmd_eval,
        "check-config": cmd_check_config,
        "hash-password": cmd_hash_password,
        "acls": cmd_acls,
        "status": cmd_status,
        "subscribe": cmd_subscribe,
        "sow-and-subscribe": cmd_subscribe,
        "consume": cmd_consume,
        "queue-ack": cmd_queue_action,
        "queue-cancel": cmd_queue_action,
        "queue-expire": cmd_queue_action,
    }
    try:
        code = int(handlers[args.command](args))
        sys.stdout.flush()  # here, where a reader that went away is handled below
        return code
    except SowError as exc:
        sys.stderr.write(f"sow {args.command}: error: {exc}\n")
        code = exits.code_for(exc)
        if code == exits.UNAVAILABLE and hasattr(args, "server"):
            address = args.server or Settings.from_env().grpc_address
            sys.stderr.write(
                f"  no query service answered at {address}: start one with `sow serve`, or "
                "point at a running one with --server HOST:PORT (or SOW_GRPC_ADDRESS)\n"
            )
        return code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except BrokenPipeError:
        return _output_closed()


def _output_closed() -> int:
    """The reader of standard output went away (``| head``): stop quietly.

    What is still buffered for stdout cannot be written either; pointing stdout at
    /dev/null keeps the interpreter's final flush from printing a second traceback.
    """
    import os

    from processor.cli import exits

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return exits.OUTPUT_CLOSED
