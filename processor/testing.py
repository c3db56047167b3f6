"""A broker-free kafka-sow: the real processor loop, commit protocol, read replica, query
engine, subscriptions and gRPC service, over the in-process memory log.

:class:`MemoryBackend` is a :class:`~processor.app.LogBackend` over a
:class:`~processor.log.memory.broker.MemoryLog`; :func:`start_memory` starts an
:class:`~processor.app.Application` on it exactly as ``sow serve`` starts one on Kafka
(real RocksDB stores under ``state_dir``, a real gRPC server on loopback), in
milliseconds. Several applications may share one memory log, one after the other (a
restart) or side by side (a second service).

Crashes between commit steps: ``crash_at="committed"`` (a step of
:data:`processor.engine.commit.STEPS`, optionally ``:n`` for its n-th time) makes the
processor stop there with :class:`~processor.errors.SimulatedCrashError`, leaving what a
killed process leaves (an open transaction stays open until the next producer of its
transactional id fences it, stores keep what they had written). Start another
application on the same log and state directory to recover.

A clock may be given (seconds, like ``time.time``): apply times, expirations and record
times follow it, so expiry is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from processor.app import Application, LogBackend, processor_over, start
from processor.config import Settings
from processor.engine.commit import STEPS, CrashHook
from processor.engine.processor import Processor
from processor.errors import ConfigurationError, SimulatedCrashError, SowError
from processor.log import ChangelogReader, ChangelogTail, LogWriter, ProcessorConnections, TopicSpec
from processor.log.memory.broker import MemoryLog
from processor.log.memory.clients import (
    MemoryChangelogTail,
    MemoryEndOffsets,
    MemoryInputLog,
    MemoryLogWriter,
    MemoryReader,
    MemoryTransactionalLog,
)
from processor.topology.model import Topology

__all__ = ["MemoryBackend", "MemoryLog", "start_memory", "wait_ready"]


def crash_at(spec: str) -> CrashHook:
    """A crash hook raising SimulatedCrashError the n-th time a step is reached
    (``step`` or ``step:n``)."""
    step, _, count = spec.partition(":")
    if step not in STEPS:
        raise ConfigurationError(f"crash_at={spec!r}: the step must be one of {', '.join(STEPS)}")
    remaining = [int(count or "1")]

    def hook(reached: str) -> None:
        if reached == step:
            remaining[0] -= 1
            if remaining[0] == 0:
                raise SimulatedCrashError(f"crashed at commit step {step!r} as asked")

    return hook


class MemoryBackend:
    """Runs an application on a memory log (:class:`processor.app.LogBackend`)."""

    description = "the in-process memory log (processor.testing)"

    def __init__(
        self,
        log: MemoryLog | None = None,
        *,
        crash: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.log = log if log is not None else MemoryLog(clock=clock or time.time)
        self.clock = clock or self.log.clock
        self._crash = None if crash is None else crash_at(crash)

    def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        self.log.create_topics(specs)

    def processor(self, settings: Settings, topology: Topology) -> Processor:
        log = self.log
        connections = ProcessorConnections(
            input_log=lambda: MemoryInputLog(log, settings.group_id),
            transactional_log=lambda: MemoryTransactionalLog(log, settings.transactional_id),
            reader=lambda: MemoryReader(log),
            end_offsets=lambda: MemoryEndOffsets(log),
        )
        return processor_over(settings, topology, connections, self._crash, clock=self.clock)

    def changelog_tail(self) -> ChangelogTail:
        return MemoryChangelogTail(self.log)

    def changelog_reader(self) -> ChangelogReader:
        return MemoryReader(self.log)

    def log_writer(self) -> LogWriter:
        return MemoryLogWriter(self.log)

    def stop(self) -> None:
        """The log outlives the application: another may start on it."""


def start_memory(
    topology: Topology,
    state_dir: Path,
    *,
    backend: MemoryBackend | None = None,
    processor: bool = True,
    service: bool = True,
    **settings: Any,
) -> Application:
    """Start an application on a memory log (a new one unless ``backend`` is given), with
    gRPC on a free loopback port; ``settings`` override :class:`Settings` fields. Returns
    at once: wait for ``app.readiness()`` to be None before the first request, as a
    client of ``sow serve`` waits for health to say SERVING."""
    config = replace(
        Settings(state_dir=state_dir, grpc_address="127.0.0.1:0", assignment="static"),
        **settings,
    )
    chosen: LogBackend = backend if backend is not None else MemoryBackend()
    return start(config, topology=topology, processor=processor, service=service, backend=chosen)


def wait_ready(app: Application, timeout_s: float = 60.0) -> Application:
    """Wait until ``app`` is ready to serve (``app.readiness()`` is None) and return it;
    raise :class:`~processor.errors.SowError` saying what it still waits for after
    ``timeout_s``, or at once when one of its components failed."""
    deadline = time.monotonic() + timeout_s
    while (reason := app.readiness()) is not None:
        failed = app.failure()
        if failed is not None:
            raise failed
        if time.monotonic() >= deadline:
            raise SowError(f"the application is not ready after {timeout_s:g}s: {reason}")
        time.sleep(0.02)
    return app
