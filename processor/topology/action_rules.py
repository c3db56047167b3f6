"""The rules of actions every topology format shares (docs/actions.md): a module's
options read into :class:`~processor.topology.actions.ActionOn` and
:class:`~processor.topology.actions.ActionDo` (:func:`build_on`, :func:`build_do`,
:func:`parse_schedule`), and the actions checked against the topology's topics once they
are known (:func:`check_actions`). Problems raise ValueFormatError (the format adds where)
or TopologyError naming the action."""

from __future__ import annotations

from dataclasses import replace

from processor.errors import ExpressionError, ParseError, TopologyError, ValueFormatError
from processor.expr import compile as compile_expression
from processor.topology.actions import (
    ALLOWED_DO,
    DATA_VARIABLES,
    EXPIRE_REASONS,
    FILTER_VARIABLES,
    MESSAGE_EVENTS,
    OOF_TYPES,
    ActionDo,
    ActionOn,
    ActionSpec,
    DoModule,
    OnModule,
    data_variables,
    known_variable,
    substitute,
    time_variables,
)
from processor.topology.quantities import parse_interval
from processor.topology.schedule import MIN_INTERVAL_MS, Schedule, calendar_schedule

_HELP = (
    "a duration (30s, 5m, 4h, 1d), a 24-hour daily time (00:30, 17:47; local time, "
    "17:47Z for UTC), a day and time (Saturday at 11:00) or a five-field cron "
    "expression (*/15 * * * *)"
)


def parse_schedule(text: str) -> Schedule:
    """The schedule ``Every`` gives (:mod:`processor.topology.schedule`); raises
    ValueFormatError."""
    stripped = " ".join(text.split())
    if not stripped:
        raise ValueFormatError(f"the schedule is empty; give {_HELP}")
    calendar = calendar_schedule(stripped)
    if calendar is not None:
        return calendar
    try:
        seconds = parse_interval(stripped)
    except ValueFormatError as exc:
        raise ValueFormatError(f"schedule {stripped!r} is not {_HELP} ({exc})") from exc
    interval_ms = round(seconds * 1000)
    if interval_ms < MIN_INTERVAL_MS:
        raise ValueFormatError(
            f"schedule {stripped!r} is shorter than 1s; each tick is a transaction on every "
            "partition the action acts on: give 1s or more"
        )
    return Schedule(stripped, interval_ms=interval_ms)


def check_actions(
    actions: tuple[ActionSpec, ...], sow: dict[str, tuple[str, bool]], plain: dict[str, str]
) -> tuple[ActionSpec, ...]:
    """Check ``actions`` against the topology's topics (``sow``: name -> (message type,
    whether the processor computes it), ``plain``: name -> message type) and return them
    with every topic resolved; compaction without a Topic becomes one step per SOW topic.
    Raises TopologyError naming the action's element or field."""
    names: set[str] = set()
    out: list[ActionSpec] = []
    for action in actions:
        if action.name in names:
            raise TopologyError(
                f"two actions are named {action.name!r}; give each its own Name",
                source=action.source,
                where=action.where,
            )
        names.add(action.name)
        on = action.on
        if on.module in MESSAGE_EVENTS:
            topic = _sow_topic(action, on.topic, on.message_type, sow, "On")
            _filter(action, on.filter, topic, "On")
            on = replace(on, topic=topic)
        steps: list[ActionDo] = []
        for step in action.do:
            if step.module not in ALLOWED_DO[on.module]:
                allowed = ", ".join(m.value for m in ALLOWED_DO[on.module])
                raise TopologyError(
                    f"{on.module.value} cannot run {step.module.value}; after it kafka-sow "
                    f"runs {allowed}",
                    source=action.source,
                    where=step.where,
                )
            steps.extend(_step(action, step, sow, plain))
        for step in steps:
            kind = sow[step.topic][0] if step.topic in sow else plain.get(step.topic, "")
            if step.module is DoModule.PUBLISH and not step.data and kind != sow[on.topic][0]:
                raise TopologyError(
                    f"{step.topic} holds {kind} messages and the action publishes the "
                    f"{sow[on.topic][0]} messages of {on.topic}: give Data, or publish to a "
                    f"topic of {sow[on.topic][0]} messages",
                    source=action.source,
                    where=step.where,
                )
        out.append(ActionSpec(action.name, on, tuple(steps), action.source, action.where))
    return tuple(out)


def _step(
    action: ActionSpec,
    step: ActionDo,
    sow: dict[str, tuple[str, bool]],
    plain: dict[str, str],
) -> list[ActionDo]:
    if step.module is DoModule.COMPACT_SOW and not step.topic:
        if step.message_type:
            raise TopologyError(
                "amps-action-do-compact-sow takes MessageType only with a Topic: give both "
                "(one topic) or neither (every SOW topic)",
                source=action.source,
                where=step.where,
            )
        return [ActionDo(step.module, name, where=step.where) for name in sow]
    if step.module is DoModule.PUBLISH:
        target = _publish_topic(action, step, sow, plain)
        for name in data_variables(step.data):
            if not known_variable(name):
                raise TopologyError(
                    f"Data uses {{{{{name}}}}}; the variables are {', '.join(DATA_VARIABLES)} "
                    "and AMPS_BYTE_XX (XX: two uppercase hex digits)",
                    source=action.source,
                    where=step.where,
                )
        return [replace(step, topic=target, filter="")]
    topic = _sow_topic(action, step.topic, step.message_type, sow, "Do", step.where)
    if step.module is DoModule.DELETE_SOW:
        if not step.filter:
            raise TopologyError(
                "amps-action-do-delete-sow needs a Filter (1=1 deletes every record)",
                source=action.source,
                where=step.where,
            )
        if sow[topic][1]:
            raise TopologyError(
                f"{topic} is computed by the processor (a view, conflated topic or queue); "
                "its records cannot be deleted by an action",
                source=action.source,
                where=step.where,
            )
        for name in data_variables(step.filter):
            if not known_variable(name, FILTER_VARIABLES):
                raise TopologyError(
                    f"the Filter uses {{{{{name}}}}}; a scheduled delete's Filter may use "
                    f"{', '.join(FILTER_VARIABLES)} and AMPS_BYTE_XX (the tick's time)",
                    source=action.source,
                    where=step.where,
                )
        _filter(action, substitute(step.filter, time_variables(0)), topic, "Do", step.where)
    return [ActionDo(step.module, topic, step.message_type, step.filter, "", step.where)]


def _sow_topic(
    action: ActionSpec,
    name: str,
    message_type: str,
    sow: dict[str, tuple[str, bool]],
    part: str,
    where: str = "",
) -> str:
    at = where or action.where
    if not name:
        raise TopologyError(
            f"the {part} module needs a Topic (a SOW topic of the topology)",
            source=action.source,
            where=at,
        )
    scoped = f"[{message_type}].[{name}]" if message_type else name
    found = scoped if scoped in sow else name if name in sow else None
    if found is None:
        raise TopologyError(
            f"Topic {name!r} is not a SOW topic of the topology"
            + (f" of MessageType {message_type}" if message_type else "")
            + f"; known: {', '.join(sow) or 'none'}",
            source=action.source,
            where=at,
        )
    if message_type and sow[found][0] != message_type:
        raise TopologyError(
            f"Topic {name!r} holds {sow[found][0]} messages, not {message_type}",
            source=action.source,
            where=at,
        )
    return found


def _publish_topic(
    action: ActionSpec, step: ActionDo, sow: dict[str, tuple[str, bool]], plain: dict[str, str]
) -> str:
    name = step.topic
    if name in plain and name not in sow:
        if step.message_type and plain[name] != step.message_type:
            raise TopologyError(
                f"Topic {name!r} holds {plain[name]} messages, not {step.message_type}",
                source=action.source,
                where=step.where,
            )
        return name
    topic = _sow_topic(action, name, step.message_type, sow, "Do", step.where)
    if sow[topic][1]:
        raise TopologyError(
            f"{topic} is computed by the processor (a view, conflated topic or queue); "
            "publish the action's message to a topic publishers write",
            source=action.source,
            where=step.where,
        )
    return topic


def _filter(action: ActionSpec, text: str, topic: str, part: str, where: str = "") -> None:
    if not text:
        return
    try:
        compile_expression(text)
    except (ParseError, ExpressionError) as exc:
        raise TopologyError(
            f"the {part} Filter of {topic} is not a valid filter: {exc}",
            source=action.source,
            where=where or action.where,
        ) from exc


def build_on(module: OnModule, options: dict[str, str]) -> ActionOn:
    """The ``On`` of ``module`` from its options (AMPS names, values as text); raises
    ValueFormatError for a missing or malformed one (unknown names are the format's to
    refuse, against :data:`ON_OPTIONS`)."""
    if module is OnModule.SCHEDULE:
        if "Every" not in options:
            raise ValueFormatError("amps-action-on-schedule needs Every (when it runs)")
        return ActionOn(module, every=parse_schedule(options["Every"]))
    duration_ms = 0
    if module is OnModule.CONDITION_TIMEOUT:
        if "Duration" not in options:
            raise ValueFormatError(
                "amps-action-on-message-condition-timeout needs Duration (how long a message "
                "must keep matching the Filter)"
            )
        duration_ms = round(parse_interval(options["Duration"]) * 1000)
        if duration_ms <= 0:
            raise ValueFormatError("Duration must be more than 0")
        if not options.get("Filter"):
            raise ValueFormatError(
                "amps-action-on-message-condition-timeout needs a Filter (the condition)"
            )
    return ActionOn(
        module,
        topic=options.get("Topic", ""),
        message_type=options.get("MessageType", ""),
        filter=options.get("Filter", ""),
        duration_ms=duration_ms,
        reasons=_reasons(module, options),
    )


def _reasons(module: OnModule, options: dict[str, str]) -> tuple[str, ...]:
    """The reasons an expiry (``Reason``) or OOF (``Type``) action acts on: AMPS's
    comma-delimited names; empty for all."""
    option = "Reason" if module is OnModule.SOW_EXPIRE else "Type"
    names = [name.strip().lower() for name in options.get(option, "").split(",")]
    names = [name for name in names if name]
    allowed = EXPIRE_REASONS if module is OnModule.SOW_EXPIRE else tuple(OOF_TYPES)
    for name in names:
        if name not in allowed:
            raise ValueFormatError(
                f"{option} {name!r} is not one of {module.value}'s: {', '.join(allowed)}"
            )
    if module is OnModule.SOW_EXPIRE:
        if names and "time_limit" not in names:
            raise ValueFormatError(
                "kafka-sow gives every expiration the reason time_limit (a queue "
                "message's too: its forced_expire or max_cancels is not told apart): with "
                "this Reason the action would never run; include time_limit or leave "
                "Reason out"
            )
        return tuple(names)
    return tuple(OOF_TYPES[name] for name in names)


def build_do(module: DoModule, options: dict[str, str], where: str) -> ActionDo:
    """A ``Do`` step of ``module`` from its options (as :func:`build_on`)."""
    if module is DoModule.PUBLISH and not options.get("Topic"):
        raise ValueFormatError("amps-action-do-publish-message needs a Topic to publish to")
    if _flag(options, "UpdateOnly"):
        raise ValueFormatError(
            "UpdateOnly true is not supported: kafka-sow's delta publish inserts a record "
            "that is not there; leave UpdateOnly out (or false)"
        )
    return ActionDo(
        module,
        topic=options.get("Topic", ""),
        message_type=options.get("MessageType", ""),
        filter=options.get("Filter", ""),
        data=options.get("Data", ""),
        where=where,
        delta=_flag(options, "Delta"),
    )


def _flag(options: dict[str, str], name: str) -> bool:
    """A true/false option (absent: false)."""
    text = options.get(name, "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueFormatError(f"{name} is true or false, not {options[name]!r}")
    return text == "true"
