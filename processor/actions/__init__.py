"""Actions (docs/actions.md; AMPS's ``<Actions>``): what the processor does by itself on
SOW topics, on a schedule (:mod:`processor.actions.scheduled`) or on message events
(:mod:`processor.actions.events`, :mod:`processor.actions.timeout`), exactly once per
event inside the transaction that makes it. :func:`action_wiring` gives the processor
its change listeners and timers."""

from __future__ import annotations

from typing import Any

from processor.actions.events import EventAction, EventActions
from processor.actions.publish import ActionPublisher, Watched
from processor.actions.scheduled import ScheduledAction, scheduled
from processor.actions.timeout import ConditionTimeout
from processor.engine.derived import Timed
from processor.engine.transaction import ChangeListener
from processor.topology.actions import DoModule, OnModule
from processor.topology.model import Topic, Topology

__all__ = ["ConditionTimeout", "EventActions", "ScheduledAction", "action_wiring"]


def action_wiring(topology: Topology) -> dict[str, Any]:
    """The processor's ``listeners`` (by SOW topic name) and ``timers`` for the
    topology's actions (empty when it has none)."""
    if not topology.actions:
        return {}
    targets: dict[str, Topic] = {**topology.plain_topics, **topology.topics}
    events: dict[str, list[EventAction]] = {}
    listeners: dict[str, list[ChangeListener]] = {}
    timers: list[Timed] = [*scheduled(topology.actions)]
    for action in topology.actions:
        module = action.on.module
        if module is OnModule.SCHEDULE:
            continue
        watched = Watched(topology.topics[action.on.topic], action.on.filter)
        publishers = [
            ActionPublisher(action, step, targets[step.topic])
            for step in action.do
            if step.module is DoModule.PUBLISH
        ]
        if module is OnModule.CONDITION_TIMEOUT:
            timeout = ConditionTimeout(action, watched, publishers)
            listeners.setdefault(action.on.topic, []).append(timeout)
            timers.append(timeout)
        else:
            event = EventAction(
                module, watched, publishers, action.on.reasons if module is OnModule.OOF else ()
            )
            events.setdefault(action.on.topic, []).append(event)
    for name, watching in events.items():
        listeners.setdefault(name, []).append(EventActions(watching))
    return {"listeners": listeners, "timers": timers}
