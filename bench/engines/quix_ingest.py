"""Ingest benchmark engine: quixstreams (confluent-kafka + rocksdict state + changelog).

Run by ``bench/ingest.py`` with ``.bench-venv/quix/bin/python``; the command line and the
JSON result line follow ``bench/engines/_contract.py``.

The application keeps the last value per message key in a RocksDB state store
(``state.set("last", value)`` in a stateful ``update``); quixstreams writes every state
change to its changelog topic and, with ``--exactly-once``, commits input offsets and
changelog records in one Kafka transaction per checkpoint (``commit_interval``, default
5 s, plus a forced checkpoint at the end). Timing stops when that final checkpoint has
been committed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import _contract as contract

ENGINE = "quixstreams"

# Tansu: a group join takes ~23 s with default timeouts and ~3 s with these.
CONSUMER_EXTRA = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def quix_version() -> str:
    """The installed quixstreams version."""
    from importlib.metadata import version

    return version("quixstreams")


def count_state_keys(state_dir: Path) -> int:
    """Distinct message keys in the ``default`` column family of every RocksDB under
    ``state_dir`` (one store per partition). Keys look like ``<message key>|<state key>``.
    """
    from rocksdict import AccessType, Rdict

    keys: set[bytes] = set()
    for current in sorted(state_dir.rglob("CURRENT")):
        db = Rdict(str(current.parent), access_type=AccessType.read_only())
        try:
            for raw in db.keys():  # noqa: SIM118 - Rdict is not iterable itself
                raw_key = raw if isinstance(raw, bytes) else str(raw).encode()
                keys.add(raw_key.rsplit(b"|", 1)[0])
        finally:
            db.close()
    return len(keys)


def run(args: contract.EngineArgs) -> dict[str, Any]:
    """Build the app, run it until ``args.messages`` are processed, return the result."""
    from quixstreams import Application, State

    version = quix_version()
    guarantee = contract.guarantee_name(args.exactly_once)
    meter = contract.Meter(target=args.messages)
    final_commit: list[float] = []

    def on_timeout() -> dict[str, Any]:
        return contract.failure(
            engine=ENGINE,
            version=version,
            args=args,
            guarantee=guarantee,
            error=f"timed out after {args.timeout:.0f}s with {meter.count} messages processed",
        )

    contract.start_watchdog(args.timeout, on_timeout)

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if args.exactly_once else "at-least-once",
        state_dir=args.state_dir,
        consumer_extra_config=CONSUMER_EXTRA,
        use_changelog_topics=True,
        loglevel="WARNING",
    )
    topic = app.topic(args.topic, value_deserializer="json", key_deserializer="str")
    sdf = app.dataframe(topic)

    def keep_last(value: Any, state: State[Any, Any]) -> None:
        state.set("last", value)
        meter.tick()

    sdf.update(keep_last, stateful=True)

    # The final forced checkpoint (state flush + changelog + offsets, one transaction under
    # exactly-once) is what "committed" means; note when it returns.
    context = getattr(app, "_processing_context", None)
    original_commit = getattr(context, "commit_checkpoint", None)
    if context is not None and original_commit is not None:

        def commit_checkpoint(force: bool = False, revoking: bool = False) -> None:
            original_commit(force=force, revoking=revoking)
            if force and meter.reached.is_set() and not final_commit:
                final_commit.append(time.perf_counter())

        context.commit_checkpoint = commit_checkpoint

    app.run(count=args.messages, collect=False)
    returned = time.perf_counter()
    if meter.first is None or meter.count < args.messages:
        return contract.failure(
            engine=ENGINE,
            version=version,
            args=args,
            guarantee=guarantee,
            error=f"the app stopped after {meter.count} of {args.messages} messages",
        )
    end = final_commit[0] if final_commit else returned
    keys_in_state = count_state_keys(Path(args.state_dir))
    notes = (
        "StreamingDataFrame.update(stateful) -> RocksDB state (rocksdict) + changelog topic; "
        "commit_interval=5s; consumer session.timeout.ms=6000 heartbeat.interval.ms=500; "
        "timed to the final forced checkpoint"
        + ("" if final_commit else " (hook missing: timed to Application.run() return)")
        + f"; shutdown after it took {returned - end:.2f}s (not counted)"
    )
    return contract.success(
        engine=ENGINE,
        version=version,
        args=args,
        messages=meter.count,
        seconds=end - meter.first,
        guarantee=guarantee,
        notes=notes,
        keys_in_state=keys_in_state,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the contract's command line, run, print the one JSON line."""
    args = contract.parse_args(__doc__.splitlines()[0], argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        result = run(args)
    except Exception as exc:
        result = contract.failure(
            engine=ENGINE,
            version=quix_version(),
            args=args,
            guarantee=contract.guarantee_name(args.exactly_once),
            error=f"{type(exc).__name__}: {exc}",
        )
    contract.emit(result)
    return 0 if result.get("ok") else contract.EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
