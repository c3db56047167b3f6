"""``sow serve`` and ``sow process``: run the product until a signal or a failure."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from processor import progress
from processor.cli.guards import check_port_free, hold_state_dir, record_served
from processor.cli.signals import on_signals
from processor.config import Settings
from processor.errors import ComponentFailedError, SowError, StartCancelledError
from processor.worker import follow_parent, report_status

#: Where ``sow serve`` serves /metrics, /healthz and /readyz when not told: loopback, any
#: free port (recorded in the state directory for ``sow status``).
DEFAULT_METRICS_ADDRESS = "127.0.0.1:0"

if TYPE_CHECKING:
    from processor.app import Application


#: The settings ``sow serve`` and ``sow process`` take as flags (over the environment).
FLAGS = (
    "topology",
    "bootstrap_servers",
    "state_dir",
    "grpc_address",
    "metrics_address",
    "group_id",
    "instance_id",
    "max_batch",
    "standby",
    "membership",
    "embedded_broker",
    "embedded_brokers",
    "group_protocol",
)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(**{name: getattr(args, name, None) for name in FLAGS})


def _say(text: str) -> None:
    """A start/stop status line on stderr. The processor child of ``sow serve`` keeps
    quiet: its parent says the same, and relays what the child writes."""
    if not os.environ.get(progress.RELAY_ENV):
        sys.stderr.write(text)


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    on_signals((signal.SIGINT, signal.SIGTERM), stop.set)  # handlers that take no lock
    return stop


def _failed(command: str, app: Application, failure: ComponentFailedError) -> int:
    """Report a component that stopped, stop the rest; the exit status of ``sow serve``."""
    sys.stderr.write(f"sow {command}: error: {failure}\nstopping...\n")
    app.stop()
    return 1


def cmd_serve(
    args: argparse.Namespace,
    stop: threading.Event | None = None,
    *,
    processor: bool = True,
    service: bool = True,
) -> int:
    """Run until a signal (exit 0) or until a component thread stops on its own: then the
    whole process stops with a message naming the component and exits 1, rather than
    serving on without it. ``stop``: set by the signal handlers ``sow`` installed first
    thing (default: install them now)."""
    if stop is None:
        stop = _stop_on_signal()  # from here on Ctrl-C asks for a clean stop, at any moment
    follow_parent(stop)  # a processor child stops when its sow serve has ended
    settings = _settings(args)
    if not (processor and service) and not settings.bootstrap_servers:
        raise SowError(
            f"sow {args.command} runs against an existing Kafka: pass --bootstrap-servers or "
            "set KAFKA_BOOTSTRAP_SERVERS (use sow serve for the all-in-one embedded setup)"
        )
    if service:
        check_port_free(settings.grpc_address)
        try:  # held until this process and its processor child end
            hold_state_dir(settings.state_dir, stop)
        except StartCancelledError:
            _say("stopped while starting\n")
            return 0
        if not settings.metrics_address:
            # Served anyway, on loopback, so that `sow status` works beside a plain
            # `sow serve` (it finds the address in the state directory).
            settings = dataclasses.replace(settings, metrics_address=DEFAULT_METRICS_ADDRESS)
    from processor.app import start  # the heavy imports (Kafka, RocksDB, gRPC) come after

    try:
        app = start(
            settings,
            processor=processor,
            service=service,
            processor_process=processor and service,
            cancelled=stop,
        )
    except StartCancelledError:
        _say("stopped while starting\n")
        return 0
    if stop.is_set():
        _say("stopping...\n")
        app.stop()
        return 0
    ready = app.processor_ready
    to_parent = ready is not None and report_status(
        ready,
        lambda: app.processor_stalled,
        "" if app.observer is None else app.observer.address,
        stop,
    )
    if ready is not None:
        _say("waiting for the processor to join its group and restore its stores...\n")
        started = time.monotonic()
        reported = 0
        while not ready.wait(0.2):
            failure = app.failure()
            if failure is not None:
                return _failed(args.command, app, failure)
            if stop.is_set():
                app.stop()
                return 0
            waited = int(time.monotonic() - started)
            if waited >= reported + 5:
                reported = waited
                _say(f"  still starting after {waited}s (see the log lines above)\n")
    if service:
        record_served(
            settings.state_dir,
            app.grpc_address,
            None if app.observer is None else app.observer.address,
            app.broker.bootstrap_servers,
            settings.topology,
        )
    lines = [
        "kafka-sow is ready",
        f"  broker:     {app.broker.description}",
        f"  topology:   {settings.topology} ({', '.join(sorted(app.topology.topics))})",
        f"  state:      {settings.state_dir.resolve()}",
    ]
    if service:
        lines.append(
            f"  gRPC:       {app.grpc_address}  (try: sow query ORDERS --server {app.grpc_address})"
        )
    if app.observer is not None:
        lines.append(f"  metrics:    http://{app.observer.address}/metrics  (/healthz, /readyz)")
    if app.http is not None and app.observer is not None:
        lines.append(f"  console:    http://{app.observer.address}/console/")
    lines.append("  stop with Ctrl-C")
    if not to_parent:  # a processor child's parent says it, from the status channel
        sys.stderr.write("\n".join(lines) + "\n")
    try:
        failure = app.wait(stop)
    except BaseException:
        app.stop()
        raise
    if failure is not None:
        return _failed(args.command, app, failure)
    _say("stopping...\n")
    app.stop()
    return 1 if app.failure() else 0
