"""Ingest benchmark engine: faust-streaming (aiokafka + RocksDB table via rocksdict + changelog).

Run by ``bench/ingest.py`` with ``.bench-venv/faust/bin/python``; the command line and the
JSON result line follow ``bench/engines/_contract.py``.

An agent reads the input topic and writes every value into a RocksDB-backed ``Table``
(``table[key] = value``); faust sends each table write to the table's changelog topic
and, with ``--exactly-once`` (``processing_guarantee="exactly_once"``), commits offsets
and changelog records in Kafka transactions (one transactional producer per partition).
faust commits every ``broker_commit_every`` messages / ``broker_commit_interval`` seconds
(defaults 10,000 / 2.8 s); once the last message is processed a finisher task forces
commits until the committed input offsets cover all N messages: that moment ends the
timing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import _contract as contract

ENGINE = "faust-streaming"
TABLE = "last"

INIT_PRODUCER_ID_NOTE = (
    "exactly_once makes faust start idempotent/transactional aiokafka producers; aiokafka "
    "only speaks InitProducerId v0 (no producer id/epoch fields) and the embedded Tansu "
    "broker answers it with an unknown server error (its log: 'tansu_storage::dynostore "
    "producer=None epoch=None'); a plain aiokafka producer works, an idempotent or "
    "transactional one does not, so faust cannot run exactly-once on this broker"
)


def faust_version() -> str:
    """The installed faust-streaming version."""
    from importlib.metadata import version

    return version("faust-streaming")


async def topic_partitions(bootstrap: str, topic: str, timeout_s: float = 30.0) -> int:
    """The input topic's partition count (the table must be co-partitioned with it)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if topic in await consumer.topics():  # refreshes the cluster metadata
                parts = consumer.partitions_for_topic(topic)
            else:
                parts = None
            if parts:
                return len(parts)
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
    raise RuntimeError(f"topic {topic!r} not found on {bootstrap}")


def run(args: contract.EngineArgs) -> dict[str, Any]:
    """Run a faust worker until the N messages are processed and committed.

    Returns the result dict only when the app fails before producing one; the normal path
    emits the result from inside the app and ends the process (see ``finish``).
    """
    import faust

    version = faust_version()
    guarantee = contract.guarantee_name(args.exactly_once)
    meter = contract.Meter(target=args.messages)

    def on_timeout() -> dict[str, Any]:
        return contract.failure(
            engine=ENGINE,
            version=version,
            args=args,
            guarantee=guarantee,
            error=f"timed out after {args.timeout:.0f}s with {meter.count} messages processed",
        )

    contract.start_watchdog(args.timeout, on_timeout)
    errors = contract.ErrorLog()
    partitions = asyncio.run(topic_partitions(args.bootstrap, args.topic))

    app = faust.App(
        args.group,
        broker=f"kafka://{args.bootstrap}",
        store="rocksdb://",
        datadir=args.state_dir,
        processing_guarantee="exactly_once" if args.exactly_once else "at_least_once",
        # Tansu: a group join takes ~23 s with default timeouts and ~3 s with these.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        consumer_auto_offset_reset="earliest",
        topic_partitions=partitions,
        topic_replication_factor=1,
        table_standby_replicas=0,
        web_enabled=False,
        loghandlers=[errors],  # the worker's logging setup replaces the root handlers
        # Tables and topics use these: keys stay bytes, values are JSON documents.
        key_serializer="raw",
        value_serializer="json",
    )
    source = app.topic(args.topic, key_serializer="raw", value_serializer="json")
    table = app.Table(
        TABLE,
        default=None,
        partitions=partitions,
        options={"driver": "rocksdict"},
    )

    @app.agent(source)
    async def ingest(stream: Any) -> None:
        async for key, value in stream.items():
            table[key] = value
            meter.tick()

    def committed_total() -> int | None:
        committed = getattr(app.consumer, "_committed_offset", None)
        if committed is None:
            return None
        return sum(offset or 0 for tp, offset in list(committed.items()) if tp.topic == args.topic)

    async def finish() -> None:
        while not meter.reached.is_set():
            await asyncio.sleep(0.002)
        # The agent acks the last event when it asks for the next one; commit until the
        # committed offsets (next offset to read, summed over partitions) cover all N.
        while True:
            await app.consumer.commit()
            total = committed_total()
            if total is None or total >= args.messages:
                break
            await asyncio.sleep(0.005)
        end = time.perf_counter()
        assert meter.first is not None
        keys_in_state = len(table)
        notes = (
            "agent -> Table (RocksDB via rocksdict) + changelog topic; "
            "broker_commit_every=10000, broker_commit_interval=2.8s (defaults); "
            "broker_session_timeout=6s, broker_heartbeat_interval=0.5s; "
            "timed to the commit covering all N offsets"
            + ("" if total is not None else " (offset hook missing: timed to a forced commit)")
        )
        contract.emit(
            contract.success(
                engine=ENGINE,
                version=version,
                args=args,
                messages=meter.count,
                seconds=end - meter.first,
                guarantee=guarantee,
                notes=notes,
                keys_in_state=keys_in_state,
                committed_offsets=total,
                partitions=partitions,
            )
        )
        # The result is out; a graceful faust shutdown adds nothing to the measurement and
        # can linger on this broker, so end the process here.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)

    app.task(finish)
    worker = faust.Worker(
        app,
        loglevel="WARNING",
        quiet=True,
        stdout=sys.stderr,
        stderr=sys.stderr,
        redirect_stdouts=False,
    )
    status: object = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        status = exc.code
    crash = getattr(worker, "crash_reason", None) or getattr(app, "crash_reason", None)
    why = errors.summary() or (f"{type(crash).__name__}: {crash}" if crash else "no error logged")
    notes = ""
    if "InitProducerId" in why:
        notes = INIT_PRODUCER_ID_NOTE
    return contract.failure(
        engine=ENGINE,
        version=version,
        args=args,
        guarantee=guarantee,
        error=(
            f"the faust worker exited (status {status}) after {meter.count} messages "
            f"processed: {why}"
        ),
        notes=notes,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the contract's command line, run, print the one JSON line."""
    args = contract.parse_args(__doc__.splitlines()[0], argv)
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        result = run(args)
    except Exception as exc:
        result = contract.failure(
            engine=ENGINE,
            version=faust_version(),
            args=args,
            guarantee=contract.guarantee_name(args.exactly_once),
            error=f"{type(exc).__name__}: {exc}",
        )
    contract.emit(result)
    return 0 if result.get("ok") else contract.EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
