"""How a ``sow`` command reaches the query service: its address and its security (TLS,
credentials), from the command's options, then the environment."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from processor.cli.guards import served
from processor.client.options import OPTIONS
from processor.config import DEFAULT_GRPC_ADDRESS, Settings

if TYPE_CHECKING:
    from processor.client.credentials import ClientSecurity
    from processor.client.sow_client import SowClient


#: The metavar of client options whose value is not a file's path.
_VALUES = {"token": "TOKEN", "username": "NAME", "server_name": "NAME"}


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that calls the query service: ``--server``, then TLS and
    credentials (processor/client/options.py), each defaulting to its variable."""
    parser.add_argument(
        "--server",
        default=None,
        help=f"address of a running 'sow serve' (default: $SOW_GRPC_ADDRESS or "
        f"{DEFAULT_GRPC_ADDRESS})",
    )
    security = parser.add_argument_group(
        "TLS and authentication (docs/security.md)",
        "each option's default is its environment variable ($SOW_PASSWORD: the password "
        "itself); credentials given here replace the environment's",
    )
    for option in OPTIONS:
        if option.flag:
            security.add_argument(
                option.flag,
                dest=f"security_{option.field}",
                default=None,
                metavar=_VALUES.get(option.field, "FILE"),
                help=f"{option.meaning} (${option.env})",
            )


def address(args: argparse.Namespace) -> str:
    """The query service to call: --server, SOW_GRPC_ADDRESS, the `sow serve` running
    beside this command (its state directory's record), or the default address."""
    if args.server:
        return str(args.server)
    settings = Settings.from_env()
    if os.environ.get("SOW_GRPC_ADDRESS"):
        return settings.grpc_address
    return served(settings.state_dir).get("grpc", settings.grpc_address)


def security(args: argparse.Namespace) -> ClientSecurity:
    """The command's TLS and credentials: its options (``--tls-ca``, ``--token-file``...),
    else the environment's (processor/client/options.py)."""
    from processor.client.credentials import ClientSecurity

    given = {
        name.removeprefix("security_"): value
        for name, value in vars(args).items()
        if name.startswith("security_")
    }
    return ClientSecurity.from_env(**given)


def client(args: argparse.Namespace) -> SowClient:
    """A SowClient of the query service the command calls, secured as asked."""
    from processor.client.sow_client import SowClient

    return SowClient(address(args), security=security(args))
