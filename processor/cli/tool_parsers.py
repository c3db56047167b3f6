"""The parsers of the operator's tools that need no running service of their own:
``sow status``, ``sow check-config`` and ``sow eval``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_tool_parsers(sub: Any, timeout: Callable[[argparse.ArgumentParser, str], None]) -> None:
    """Add ``status``, ``check-config`` and ``eval`` to the subcommands ``sub``;
    ``timeout`` adds a command's --timeout option."""
    status = sub.add_parser(
        "status",
        help="Print a running server's readiness and figures as a table.",
        description="Read the metrics endpoint of a running `sow serve` and print "
        "readiness, records per topic, applied records, dead letters, replica staleness, "
        "subscriptions and gRPC calls. Without an address it finds the `sow serve` of the "
        "state directory (it records its metrics address there).",
    )
    status.add_argument(
        "--metrics-address",
        default=None,
        help="the server's metrics HOST:PORT (default: SOW_METRICS_ADDRESS, else the one "
        "recorded by the sow serve of --state-dir)",
    )
    status.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the state directory of the sow serve to read (default: SOW_STATE_DIR or sow-state)",
    )
    timeout(status, "each of the two reads of the metrics endpoint")
    check = sub.add_parser(
        "check-config",
        help="Validate topology files (YAML or AMPS XML) without starting anything.",
        description="Load each topology file or directory as `sow serve` would (schemas, "
        "key generators and all), print one JSON line per topic saying what the product "
        "will do with it, and exit 3 at the first problem, naming the file and the place.",
    )
    check.add_argument("paths", nargs="+", type=Path, help="topology files or directories")
    check.add_argument(
        "--bootstrap-servers",
        default=None,
        help="the Kafka cluster sow serve would use (default: KAFKA_BOOTSTRAP_SERVERS): asked "
        "how many brokers it has, to say the replication its topics would get",
    )
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
