"""The derived topics of a topology, wired for the processor: views and conflated topics
(:mod:`processor.views`) and queues (:mod:`processor.queues`)."""

from __future__ import annotations

from typing import Any

from processor.queues import queue_wiring
from processor.topology import Topology
from processor.views import view_wiring


def derived_wiring(topology: Topology) -> dict[str, Any]:
    """The processor's ``listeners`` and ``derived`` options for the topology's views,
    conflated topics and queues (empty when it has none)."""
    views, queues = view_wiring(topology), queue_wiring(topology)
    listeners = {**views.get("listeners", {})}
    for name, more in queues.get("listeners", {}).items():
        listeners[name] = [*listeners.get(name, ()), *more]
    derived = {**views.get("derived", {}), **queues.get("derived", {})}
    return {"listeners": listeners, "derived": derived} if derived else {}
