"""The derived topics and actions of a topology, wired for the processor: views and
conflated topics (:mod:`processor.views`), queues (:mod:`processor.queues`), actions
(:mod:`processor.actions`) and upsert topics (:mod:`processor.upserts`)."""

from __future__ import annotations

from typing import Any

from processor.actions import action_wiring
from processor.queues import queue_wiring
from processor.topology import Topology
from processor.upserts import upsert_wiring
from processor.views import view_wiring


def derived_wiring(topology: Topology) -> dict[str, Any]:
    """The processor's ``listeners``, ``derived`` and ``timers`` options for the
    topology's views, conflated topics, queues, actions and upsert topics (empty when it
    has none)."""
    views, queues, actions = view_wiring(topology), queue_wiring(topology), action_wiring(topology)
    listeners = {**views.get("listeners", {})}
    upserts = upsert_wiring(topology)
    for wired in (queues.get("listeners", {}), actions.get("listeners", {}), upserts):
        for name, more in wired.items():
            listeners[name] = [*listeners.get(name, ()), *more]
    derived = {**views.get("derived", {}), **queues.get("derived", {})}
    options: dict[str, Any] = {"listeners": listeners} if derived or actions or upserts else {}
    if derived:
        options["derived"] = derived
    if actions:
        options["timers"] = actions["timers"]
    return options
