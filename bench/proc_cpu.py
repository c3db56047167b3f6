"""CPU seconds used by processes, read from /proc (Linux): what each process of a
benchmark paid, so a figure can say "µs of CPU per message" per process.

    from proc_cpu import CpuMeter
    meter = CpuMeter({"client": os.getpid(), "sow serve": serve.pid}, children_of="sow serve")
    ... work ...
    used = meter.used()  # {"client": 1.2, "sow serve": 3.4, "sow serve/child 123": 2.0}
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class CpuMeter:
    """CPU used by named processes (and the children of ``with_children``) since made."""

    def __init__(self, processes: dict[str, int], with_children: tuple[str, ...] = ()) -> None:
        self._pids = dict(processes)
        for name in with_children:
            for child in children(processes[name]):
                self._pids[f"{name}: child {child}"] = child
        self._start = {name: cpu_seconds(pid) for name, pid in self._pids.items()}

    def used(self) -> dict[str, float]:
        """CPU seconds per process since the meter was made."""
        return {name: cpu_seconds(pid) - self._start[name] for name, pid in self._pids.items()}
