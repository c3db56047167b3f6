"""The ``<Actions>`` section of an AMPS configuration (docs/actions.md)::

    <Actions>
      <Action>
        <On>
          <Module>amps-action-on-schedule</Module>
          <Options><Every>1h</Every><Name>hourly-purge</Name></Options>
        </On>
        <Do>
          <Module>amps-action-do-delete-sow</Module>
          <Options><Topic>ORDERS</Topic><Filter>/status = 'closed'</Filter></Options>
        </Do>
      </Action>
    </Actions>

One ``On`` and one or more ``Do`` per ``Action``, run in order; the modules and options
kafka-sow runs are listed in :mod:`processor.topology.actions`, which checks them against
the topics. An ``If`` (AMPS's conditions on the file system or an expression) is refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from processor.errors import ValueFormatError
from processor.topology.action_rules import build_do, build_on
from processor.topology.actions import (
    DO_OPTIONS,
    ON_OPTIONS,
    ActionDo,
    ActionSpec,
    do_module,
    on_module,
)
from processor.topology.amps_reader import AmpsReader, children
from processor.topology.quantities import unknown_name


def read_actions(reader: AmpsReader, root: ET.Element) -> tuple[ActionSpec, ...]:
    """Every ``AMPSConfig/Actions/Action``, in document order (unchecked against topics)."""
    actions: list[ActionSpec] = []
    for section, section_where in children(root, root.tag):
        if section.tag != "Actions":
            continue
        for child, where in children(section, section_where, numbered=("Action",)):
            if child.tag != "Action":
                reader.fail(unknown_name("element", child.tag, ("Action",), "<Actions>"), where)
            actions.append(_action(reader, child, where, len(actions) + 1))
    return tuple(actions)


def _action(reader: AmpsReader, element: ET.Element, where: str, number: int) -> ActionSpec:
    groups = reader.group(element, where, ("On", "Do", "If"), repeatable=("Do",))
    if "If" in groups:
        reader.fail(
            "<If> (AMPS's conditions on the file system or an expression) is not supported: "
            "put the condition in the On module's Filter",
            groups["If"][0][1],
        )
    for needed in ("On", "Do"):
        if needed not in groups:
            reader.fail(f"an <Action> needs <{needed}>", where)
    on_element, on_where = groups["On"][0]
    module_text, options = _module(reader, on_element, on_where)
    try:
        module = on_module(module_text)
        _check_names(options, ON_OPTIONS[module], module.value)
        on = build_on(module, options)
    except ValueFormatError as exc:
        reader.fail(str(exc), on_where)
    do: list[ActionDo] = []
    for do_element, do_where in groups["Do"]:
        module_text, step_options = _module(reader, do_element, do_where)
        try:
            step_module = do_module(module_text)
            _check_names(step_options, DO_OPTIONS[step_module], step_module.value)
            do.append(build_do(step_module, step_options, do_where))
        except ValueFormatError as exc:
            reader.fail(str(exc), do_where)
    name = options.get("Name", "").strip() or f"action {number}"
    return ActionSpec(name, on, tuple(do), reader.source, where)


def _module(reader: AmpsReader, element: ET.Element, where: str) -> tuple[str, dict[str, str]]:
    """The ``Module`` text and the ``Options`` (element name -> text) of an On or a Do."""
    groups = reader.group(element, where, ("Module", "Options"), repeatable=())
    if "Module" not in groups:
        reader.fail(f"<{element.tag}> needs a <Module>", where)
    module_element, module_where = groups["Module"][0]
    module = reader.text(module_element, module_where)
    options: dict[str, str] = {}
    for options_element, options_where in groups.get("Options", []):
        for child, child_where in children(options_element, options_where):
            if child.tag in options:
                reader.fail(f"<{child.tag}> is given twice; give it once", child_where)
            options[child.tag] = reader.text(child, child_where, empty=child.tag == "Data")
    return module, options


def _check_names(options: dict[str, str], allowed: tuple[str, ...], module: str) -> None:
    for name in options:
        if name not in allowed:
            raise ValueFormatError(unknown_name(f"{module} option", f"<{name}>", allowed))
