"""The ``sow`` command: argument parsing only; the work happens in app, service and query.

Output is JSON lines on stdout; progress and logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from processor.cli import exits
from processor.cli.check import cmd_check_config
from processor.cli.client_commands import (
    cmd_delete,
    cmd_eval,
    cmd_publish,
    cmd_query,
    cmd_subscribe,
)
from processor.cli.parser import build_parser
from processor.cli.serve import cmd_serve
from processor.config import Settings
from processor.errors import SowError

__all__ = ["build_parser", "main"]


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
        "check-config": cmd_check_config,
        "subscribe": cmd_subscribe,
        "sow-and-subscribe": cmd_subscribe,
    }
    try:
        return int(handlers[args.command](args))
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
