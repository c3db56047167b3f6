"""Actions (AMPS's ``<Actions>``, docs/actions.md): what the processor does by itself, on a
schedule or when a SOW record expires, is deleted, goes out of focus or stays matching a
filter too long. Both topology formats read them into :class:`ActionSpec`; this module
holds the model and the checks every format shares (:func:`check_actions`, run once the
topics are known).

Supported, with AMPS's module names (anything else is refused naming these):

* ``On``: ``amps-action-on-schedule`` (``Every``, ``Name``);
  ``amps-action-on-sow-expire-message`` (``Topic``, ``MessageType``, ``Reason``),
  ``amps-action-on-sow-delete-message`` (``Topic``, ``MessageType``),
  ``amps-action-on-oof-message`` (``Topic``, ``MessageType``, ``Filter``, ``Type``),
  ``amps-action-on-message-condition-timeout`` (``Topic``, ``MessageType``, ``Filter``,
  ``Duration``); a ``Filter`` on an expiry or a delete is a kafka-sow extension.
* ``Do``: ``amps-action-do-publish-message`` (``Topic``, ``MessageType``, ``Data``,
  ``Delta``; ``UpdateOnly`` only false) after a message event;
  ``amps-action-do-delete-sow`` (``Topic``, ``MessageType``, ``Filter``) and
  ``amps-action-do-compact-sow`` (``Topic``, ``MessageType``; none: every SOW topic) on a
  schedule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import TypeVar

from processor.errors import ValueFormatError
from processor.topology.schedule import Schedule


class OnModule(Enum):
    """When an action runs (AMPS module names)."""

    SCHEDULE = "amps-action-on-schedule"
    SOW_EXPIRE = "amps-action-on-sow-expire-message"
    SOW_DELETE = "amps-action-on-sow-delete-message"
    OOF = "amps-action-on-oof-message"
    CONDITION_TIMEOUT = "amps-action-on-message-condition-timeout"


class DoModule(Enum):
    """What an action does (AMPS module names)."""

    PUBLISH = "amps-action-do-publish-message"
    DELETE_SOW = "amps-action-do-delete-sow"
    COMPACT_SOW = "amps-action-do-compact-sow"


#: The message events: each names the SOW topic whose records it watches.
MESSAGE_EVENTS = (
    OnModule.SOW_EXPIRE,
    OnModule.SOW_DELETE,
    OnModule.OOF,
    OnModule.CONDITION_TIMEOUT,
)
#: What each kind of event may do.
ALLOWED_DO: dict[OnModule, tuple[DoModule, ...]] = {
    OnModule.SCHEDULE: (DoModule.DELETE_SOW, DoModule.COMPACT_SOW),
    **{event: (DoModule.PUBLISH,) for event in MESSAGE_EVENTS},
}
#: The options of each module (AMPS's names; the YAML format writes them in snake_case).
ON_OPTIONS: dict[OnModule, tuple[str, ...]] = {
    OnModule.SCHEDULE: ("Every", "Name"),
    OnModule.SOW_EXPIRE: ("Topic", "MessageType", "Reason", "Filter"),
    OnModule.SOW_DELETE: ("Topic", "MessageType", "Filter"),
    OnModule.OOF: ("Topic", "MessageType", "Filter", "Type"),
    OnModule.CONDITION_TIMEOUT: ("Topic", "MessageType", "Filter", "Duration"),
}
DO_OPTIONS: dict[DoModule, tuple[str, ...]] = {
    DoModule.PUBLISH: ("Topic", "MessageType", "Data", "Delta", "UpdateOnly"),
    DoModule.DELETE_SOW: ("Topic", "MessageType", "Filter"),
    DoModule.COMPACT_SOW: ("Topic", "MessageType"),
}
#: Why a SOW record expires, as AMPS's ``AMPS_REASON`` of ``amps-action-on-sow-expire-
#: message`` says it (its ``Reason`` option picks among them): the expiration time
#: passed; a queue message acknowledged with ``expire``, or cancelled ``MaxCancels``
#: times. kafka-sow gives every expiration ``time_limit`` (a queue message's too).
EXPIRE_REASONS = ("time_limit", "forced_expire", "max_cancels")
#: The OOFs ``amps-action-on-oof-message``'s ``Type`` picks: no longer matching the
#: Filter, deleted (with the ``Reason`` of AMPS's OOF messages each gives).
OOF_TYPES = {"match": "match", "delete": "deleted"}
#: The variables a publish action's ``Data`` may use: the event's (AMPS's, and the
#: kafka-sow extension ``AMPS_SOW_KEY``), AMPS's defaults, and ``AMPS_BYTE_XX``.
DATA_VARIABLES = (
    "AMPS_DATA",
    "AMPS_DATA_LENGTH",
    "AMPS_TOPIC",
    "AMPS_SOW_KEY",
    "AMPS_REASON",
    "AMPS_CORRELATION_ID",
    "AMPS_DATETIME",
    "AMPS_UNIX_TIMESTAMP",
)
_VARIABLE = re.compile(r"\{\{\s*([^}]*?)\s*\}\}")
_BYTE = re.compile(r"AMPS_BYTE_[0-9A-F]{2}")


def supported() -> str:
    """The modules kafka-sow runs, for refusals."""
    ons = ", ".join(m.value for m in OnModule)
    dos = ", ".join(m.value for m in DoModule)
    return f"On: {ons}; Do: {dos}"


M = TypeVar("M", OnModule, DoModule)


def on_module(text: str) -> OnModule:
    """The ``On`` module named ``text`` (AMPS's name, or the YAML short form without
    ``amps-action-on-``); raises ValueFormatError naming what is supported."""
    return _module(text, OnModule, "amps-action-on-")


def do_module(text: str) -> DoModule:
    """The ``Do`` module named ``text`` (as :func:`on_module`)."""
    return _module(text, DoModule, "amps-action-do-")


def _module(text: str, kind: type[M], prefix: str) -> M:
    name = text.strip().lower()
    full = name if name.startswith("amps-action-") else prefix + name
    for module in kind:
        if module.value == full:
            return module
    if name.startswith(prefix):
        raise ValueFormatError(
            f"{text.strip()!r} is an AMPS action kafka-sow does not run: it runs the actions on "
            f"SOW topics ({supported()}); logs, files, transports, replication, security and "
            "the server itself are managed outside kafka-sow"
        )
    raise ValueFormatError(
        f"unknown action module {text.strip()!r} for <{prefix.split('-')[2].title()}>; "
        f"supported: {supported()}"
    )


def data_variables(data: str) -> list[str]:
    """The ``{{VARIABLE}}`` names in a publish action's ``Data``."""
    return _VARIABLE.findall(data)


def known_variable(name: str, names: tuple[str, ...] = DATA_VARIABLES) -> bool:
    """Whether ``{{name}}`` is one of ``names`` (by default: those a publish action's
    ``Data`` may use) or an ``AMPS_BYTE_XX``."""
    return name in names or _BYTE.fullmatch(name) is not None


def time_variables(now_ms: int) -> dict[str, str]:
    """AMPS's default time variables at ``now_ms``: ``AMPS_DATETIME`` (ISO-8601, UTC) and
    ``AMPS_UNIX_TIMESTAMP`` (whole seconds since the epoch)."""
    moment = datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return {
        "AMPS_DATETIME": moment.replace("+00:00", "Z"),
        "AMPS_UNIX_TIMESTAMP": str(now_ms // 1000),
    }


def substitute(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{{NAME}}`` replaced by ``values[NAME]`` (``AMPS_BYTE_XX``: the
    character of code XX); the names are checked when the topology is read."""

    def value(match: re.Match[str]) -> str:
        name = match[1]
        if _BYTE.fullmatch(name):
            return chr(int(name[10:], 16))
        return values[name]

    return _VARIABLE.sub(value, text)


#: The variables a scheduled ``amps-action-do-delete-sow``'s ``Filter`` may use (the
#: tick's time: ``LAST_UPDATED() < {{AMPS_UNIX_TIMESTAMP}} - 86400``), and AMPS_BYTE_XX.
FILTER_VARIABLES = ("AMPS_DATETIME", "AMPS_UNIX_TIMESTAMP")


@dataclass(frozen=True, slots=True)
class ActionOn:
    """When: the module, and its options (``topic`` resolved to a topology name by
    :func:`check_actions`; ``duration_ms`` for a condition timeout; ``reasons``: the
    reasons an expiry or OOF action acts on, empty for all)."""

    module: OnModule
    topic: str = ""
    message_type: str = ""
    filter: str = ""
    every: Schedule | None = None
    duration_ms: int = 0
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ActionDo:
    """One step: the module and its options (``topic`` empty: every SOW topic, for
    compaction; ``delta``: a publish is a delta publish)."""

    module: DoModule
    topic: str = ""
    message_type: str = ""
    filter: str = ""
    data: str = ""
    where: str = ""
    delta: bool = False


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action: a name (the schedule's ``Name``, else ``action N``), when, and its
    steps in order; ``source``/``where`` locate it for messages."""

    name: str
    on: ActionOn
    do: tuple[ActionDo, ...]
    source: str = ""
    where: str = ""

    @property
    def topics(self) -> tuple[str, ...]:
        """The SOW topics whose partitions run the action: the watched topic of a message
        event, the steps' topics of a schedule."""
        if self.on.module is not OnModule.SCHEDULE:
            return (self.on.topic,)
        return tuple(dict.fromkeys(step.topic for step in self.do))

    def describe(self) -> str:
        """One line for ``sow check-config``."""
        on = self.on
        if on.every is not None:
            when = f"every {on.every.text!r}"
        else:
            when = f"{on.module.value.removeprefix('amps-action-on-')} on {on.topic}"
            if on.filter:
                when += f" where {on.filter}"
            if on.duration_ms:
                when += f" for {on.duration_ms / 1000:g}s"
            if on.reasons:
                when += f" ({', '.join(on.reasons)})"
        steps = []
        for step in self.do:
            what = step.module.value.removeprefix("amps-action-do-")
            steps.append(f"{what} {step.topic}" + (f" where {step.filter}" if step.filter else ""))
        return f"{self.name}: {when} -> {'; '.join(steps)}"
