"""The YAML topology's ``actions:`` list (docs/actions.md): each item an action with an
optional ``name``, ``on`` (a mapping: ``module`` and its options) and ``do`` (one such
mapping or a list of them)::

    actions:
      - name: hourly-purge
        on: {module: schedule, every: 1h}
        do:
          - {module: delete-sow, topic: ORDERS, filter: "/status = 'closed'"}
          - {module: compact-sow, topic: ORDERS}
      - on: {module: sow-expire-message, topic: ORDERS}
        do: {module: publish-message, topic: EXPIRED_ORDERS}

A module is AMPS's name (``amps-action-on-schedule``) or the same without
``amps-action-on-`` / ``amps-action-do-``; options are AMPS's in snake_case (``Every``:
``every``, ``MessageType``: ``message_type``). Checked against the topics by
:func:`processor.topology.actions.check_actions`.
"""

from __future__ import annotations

import re

from processor.errors import TopologyError, ValueFormatError
from processor.topology import quantities
from processor.topology.action_rules import build_do, build_on
from processor.topology.actions import (
    DO_OPTIONS,
    ON_OPTIONS,
    ActionDo,
    ActionSpec,
    do_module,
    on_module,
)
from processor.topology.yaml_fields import describe

ACTION_FIELDS = ("name", "on", "do")


def snake(option: str) -> str:
    """The YAML name of an AMPS option: ``MessageType`` -> ``message_type``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", option).lower()


def read_actions(raw: object, source: str) -> tuple[ActionSpec, ...]:
    """The actions of a document's ``actions`` value (unchecked against the topics)."""
    if not isinstance(raw, list):
        raise TopologyError(
            f"expected a list of actions, got {describe(raw)}", source=source, where="actions"
        )
    return tuple(_action(item, index, source) for index, item in enumerate(raw))


def _action(raw: object, index: int, source: str) -> ActionSpec:
    where = f"actions[{index}]"
    if not isinstance(raw, dict):
        raise TopologyError(
            f"expected a mapping with 'on' and 'do', got {describe(raw)}",
            source=source,
            where=where,
        )
    # YAML 1.1 reads a bare ``on`` key as the boolean true.
    raw = {"on" if key is True else key: value for key, value in raw.items()}
    for key in raw:
        if key not in ACTION_FIELDS:
            message = quantities.unknown_name("action field", str(key), ACTION_FIELDS)
            raise TopologyError(message, source=source, where=f"{where}.{key}")
    name = raw.get("name", "")
    if not isinstance(name, str):
        raise TopologyError("expected a name (text)", source=source, where=f"{where}.name")
    for needed in ("on", "do"):
        if needed not in raw:
            raise TopologyError(
                f"an action needs '{needed}'", source=source, where=f"{where}.{needed}"
            )
    module_text, options = _module_options(raw["on"], source, f"{where}.on")
    try:
        module = on_module(module_text)
        _check_names(options, ON_OPTIONS[module], module.value)
        on = build_on(module, options)
        options_name = options.get("Name", "").strip()
    except ValueFormatError as exc:
        raise TopologyError(str(exc), source=source, where=f"{where}.on") from exc
    steps = raw["do"] if isinstance(raw["do"], list) else [raw["do"]]
    if not steps:
        raise TopologyError("'do' is empty; give at least one step", source=source, where=where)
    do: list[ActionDo] = []
    for number, step in enumerate(steps):
        at = f"{where}.do[{number}]" if isinstance(raw["do"], list) else f"{where}.do"
        module_text, options = _module_options(step, source, at)
        try:
            step_module = do_module(module_text)
            _check_names(options, DO_OPTIONS[step_module], step_module.value)
            do.append(build_do(step_module, options, at))
        except ValueFormatError as exc:
            raise TopologyError(str(exc), source=source, where=at) from exc
    name = name.strip() or options_name or f"action {index + 1}"
    return ActionSpec(name, on, tuple(do), source, where)


def _module_options(raw: object, source: str, where: str) -> tuple[str, dict[str, str]]:
    """``module`` and the other keys (AMPS option names, values as text)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("module"), str):
        raise TopologyError(
            f"expected a mapping with 'module' and its options, got {describe(raw)}",
            source=source,
            where=where,
        )
    options: dict[str, str] = {}
    for key, value in raw.items():
        if key == "module":
            continue
        if isinstance(value, bool):  # Delta, UpdateOnly
            options[str(key)] = "true" if value else "false"
            continue
        if not isinstance(value, str | int | float):
            raise TopologyError(
                f"expected text for {key!r}, got {describe(value)}",
                source=source,
                where=f"{where}.{key}",
            )
        options[str(key)] = str(value)
    return raw["module"], options


def _check_names(options: dict[str, str], allowed: tuple[str, ...], module: str) -> None:
    """Turn the YAML names into AMPS's, refusing those ``module`` does not take."""
    by_yaml = {snake(name): name for name in allowed}
    renamed = {}
    for key, value in options.items():
        if key not in by_yaml:
            raise ValueFormatError(quantities.unknown_name(f"{module} option", key, by_yaml))
        renamed[by_yaml[key]] = value
    options.clear()
    options.update(renamed)
