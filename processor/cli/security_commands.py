"""``sow hash-password`` (a users file's line), and what ``sow check-config`` says of the
gRPC security settings (docs/security.md)."""

from __future__ import annotations

import argparse
import getpass
import sys

from processor.config import Settings
from processor.errors import ConfigurationError
from processor.topology.model import Topology


def add_security_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = (
        "Print a users file line (user:scrypt-hash[:roles]) for SOW_USERS_FILE. The password "
        "is read from standard input (one line) or, at a terminal, asked for twice."
    )
    short = "Print a users file line for a user and password."
    command = sub.add_parser("hash-password", help=short, description=text)
    command.add_argument("user", help="the user name (no ':')")
    command.add_argument("--roles", default="", help="comma-separated roles, e.g. traders,ops")


def cmd_hash_password(args: argparse.Namespace) -> int:
    from processor.security.authentication import MAX_PASSWORD_CHARS, hash_password

    if not args.user or ":" in args.user or any(c.isspace() for c in args.user):
        raise ConfigurationError(f"the user name {args.user!r} must be non-empty, without ':'")
    roles = ",".join(r.strip() for r in args.roles.split(",") if r.strip())
    if ":" in roles:
        raise ConfigurationError(f"roles {args.roles!r} must not contain ':'")
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise ConfigurationError("the two passwords differ; nothing printed")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password or len(password) > MAX_PASSWORD_CHARS:
        raise ConfigurationError(f"the password must have 1 to {MAX_PASSWORD_CHARS} characters")
    line = f"{args.user}:{hash_password(password)}" + (f":{roles}" if roles else "")
    sys.stdout.write(line + "\n")
    return 0


def security_summary(settings: Settings, topology: Topology | None = None) -> list[str]:
    """What gRPC security the settings (and the security ``topology`` names, where the
    settings leave it) turn on, checked as ``sow serve`` would check them (files read,
    combinations refused), one line each."""
    from processor.server.auth import server_security

    lines = server_security(settings, topology=topology).summary
    return lines or ["gRPC security: off (plaintext, no logon)"]
