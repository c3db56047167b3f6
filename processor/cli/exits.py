"""The ``sow`` command's exit codes: what went wrong, for scripts to tell apart."""

from __future__ import annotations

from processor import errors

OK = 0
#: A failure with no more specific code (a component stopped, a write not confirmed...).
FAILED = 1
#: The command line is wrong (argparse's own code).
USAGE = 2
#: A request or a file the command was given is invalid: a bad filter, topology, message.
INVALID = 3
#: A topic, record or subscription does not exist.
NOT_FOUND = 4
#: No query service (or broker) answered, or it is not ready yet.
UNAVAILABLE = 5
#: The command's deadline (--timeout) passed.
TIMEOUT = 6
#: The query service refused the client: its TLS handshake failed, or the caller is not
#: authenticated (UNAUTHENTICATED) or not entitled (PERMISSION_DENIED). Retrying does not
#: help; the message says what to fix.
DENIED = 7
#: Ctrl-C.
INTERRUPTED = 130
#: The reader of standard output went away (``sow query ... | head -1``): 128 + SIGPIPE,
#: the status a Unix tool killed by the signal has.
OUTPUT_CLOSED = 141

#: gRPC status name -> exit code (the rest: FAILED).
_BY_STATUS = {
    "INVALID_ARGUMENT": INVALID,
    "FAILED_PRECONDITION": INVALID,
    "OUT_OF_RANGE": INVALID,
    "UNIMPLEMENTED": INVALID,
    "NOT_FOUND": NOT_FOUND,
    "UNAVAILABLE": UNAVAILABLE,
    "DEADLINE_EXCEEDED": TIMEOUT,
    "UNAUTHENTICATED": DENIED,
    "PERMISSION_DENIED": DENIED,
}

HELP = f"""\
exit codes: {OK} ok, {FAILED} failed, {USAGE} usage, {INVALID} invalid argument (filter, \
topology, message), {NOT_FOUND} not found, {UNAVAILABLE} unavailable (no server answered, or \
not ready), {TIMEOUT} timeout, {DENIED} denied (TLS handshake, not authenticated or not \
entitled), {INTERRUPTED} interrupted, {OUTPUT_CLOSED} standard output \
closed by its reader."""


def code_for(error: errors.SowError) -> int:
    """The exit code of a command that failed with ``error``."""
    if isinstance(error, errors.ChannelSecurityError):
        return DENIED
    status = getattr(error, "code", None)  # a ServiceError carries the gRPC status name
    if isinstance(status, str):
        return _BY_STATUS.get(status, FAILED)
    if isinstance(error, errors.UnknownTopicError):
        return NOT_FOUND
    if isinstance(
        error, errors.InvalidRequestError | errors.ConfigurationError | errors.MessageError
    ):
        return INVALID
    if isinstance(error, errors.CatchingUpError | errors.BrokerError):
        return UNAVAILABLE
    if isinstance(error, errors.PositionTimeoutError | errors.DeadlineError):
        return TIMEOUT
    return FAILED
