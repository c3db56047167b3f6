"""Views benchmark: a grouped SUM view absorbing underlying updates, kafka-sow beside Kafka Streams.

One broker, one workload, one engine at a time (issue 21's acceptance):

* **Workload** (built in memory from ``--seed``, the same bytes for both engines): ``--records``
  JSON records ``{"id": i, "grp": "g42", "qty": 311}`` over ``--groups`` groups, then
  ``--updates`` changes of random records: a new ``qty`` (1-1000), a move to another group
  for ``--move-fraction`` of them, a delete (a tombstone) for ``--delete-fraction`` (an
  update of a deleted record brings it back). Everything is produced to the engine's
  input topic before the engine starts, so each absorbs a backlog. kafka-sow's input is
  keyed by SowKey on the SowKey's partition (as its publishers write), Kafka Streams' by
  ``str(id)`` (as a plain Kafka application writes); the values are identical.
* **kafka-sow**: ``sow process`` (started as a user starts it) with an AMPS XML topology: a
  SOW topic keyed by ``/id`` and a View of it, ``SUM(/qty) AS /total, COUNT(/id) AS /n,
  /grp AS /grp`` grouped by ``/grp``. Its output: the view's changelog
  (``<view>.sow-changelog``; control records skipped, envelopes decoded).
* **Kafka Streams** 4.2.1 (``bench/engines/kstreams/``, class ``KStreamsViews``, built
  with Maven like the ingest peer): ``builder.table(input).groupBy(grp).aggregate(init,
  adder, subtractor)``, RocksDB stores with changelogs, ``exactly_once_v2``, one stream
  thread, output ``{"total", "n", "grp"}`` per group to a topic.

**Rate**: this process reads the engine's output with a ``read_committed`` consumer and
keeps each group's latest value; the clock stops the first time every group equals the
Python recomputation from the workload (and nothing changes for ``--settle`` seconds after).
``seconds`` runs from the first input record processed (kafka-sow: the apply time in the
first envelope of the underlying topic's changelog; Kafka Streams: the first call of its
timestamp extractor) to then; ``records/s = input records / seconds``. ``wall`` runs from
spawning the process to then (start-up, group join and store opening included).

**Latency**: then, on the same running engine, a publisher process writes
``--latency-rate`` updates per second for ``--latency-seconds`` to the input topic, each
adding 1 to a live record's ``qty``, so each group's total only grows: a publish is visible
at the first output record of its group whose total reaches the total it implies
(CLOCK_MONOTONIC, shared by the processes; send time taken before ``produce``). The
first ``--latency-warmup`` seconds (30) of publishes are left out of the figures and
summarised apart (``warmup`` in the JSON): the broker the bench starts is a new JVM, whose
JIT compiles the transaction, produce and fetch paths the 1k msg/s stream exercises (its C2
compiler thread at 30-60% of a core for over a minute); on that new broker kafka-sow's
view batch -> visible p50 falls from ~50 ms to ~10 ms over the first 20-30 s, on the same
broker run a second time it is 7-11 ms from the first second (docs/benchmarks.md).
``per_second`` in the JSON (and a progress line) gives p50 / p99 for each second of
publishing, warm-up included.

Usage (from the repository root)::

    PYTHONPATH=. python bench/views.py --json-out bench/results/kafka/views.json
    PYTHONPATH=. python bench/views.py --updates 20000 --latency-seconds 3   # smoke

The broker is the embedded Apache Kafka (``processor.log.broker.start_broker``), unless
``KAFKA_BOOTSTRAP_SERVERS`` names one or ``SOW_EMBEDDED_BROKER`` asks for another.
Progress goes to stderr, the Markdown table to stdout, everything to ``--json-out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import queue
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ENGINES_DIR = BENCH / "engines"
sys.path.insert(0, str(ENGINES_DIR))  # kstreams_ingest (the Maven build) and _contract

import workload  # noqa: E402 - bench/ is sys.path[0]; create_topic
from proc_cpu import cpu_seconds  # noqa: E402

ENGINES = ("kafka_sow", "kstreams")
KSTREAMS_CLASS = "kafkasow.bench.KStreamsViews"
SOW_TOPIC = "POSITIONS"
DEFAULT_EMBEDDED_BROKER = "kafka"
HEARTBEAT_S = 15.0
#: Projection and grouping of the view (kafka-sow), computed the same way by Kafka Streams.
PROJECTION = ("SUM(/qty) AS /total", "COUNT(/id) AS /n", "/grp AS /grp")
GROUPING = "/grp"

#: A group's value: (total, n).
Totals = dict[str, tuple[float, int]]


def progress(text: str) -> None:
    """One progress line on stderr."""
    print(f"[views {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- The workload ---------------------------------------------------------------------------


@dataclass(slots=True)
class Workload:
    """The records and their changes, in order, and the view they must end in."""

    records: int
    groups: int
    updates: int
    move_fraction: float
    delete_fraction: float
    seed: int
    #: (id, value bytes or None for a delete), in publish order.
    ops: list[tuple[int, bytes | None]] = field(default_factory=list)
    #: Each live record's last message.
    final: dict[int, dict[str, Any]] = field(default_factory=dict)
    moves: int = 0
    deletes: int = 0
    payload_bytes: int = 0

    def expected(self) -> Totals:
        """The view recomputed from the final records: per group, SUM(qty) and COUNT(id)."""
        sums: dict[str, list[int]] = {}
        for message in self.final.values():
            entry = sums.setdefault(message["grp"], [0, 0])
            entry[0] += message["qty"]
            entry[1] += 1
        return {grp: (float(total), n) for grp, (total, n) in sums.items()}


def group_name(n: int, groups: int) -> str:
    return f"g{n:0{len(str(max(groups - 1, 1)))}d}"


def build_workload(
    records: int, groups: int, updates: int, move_fraction: float, delete_fraction: float, seed: int
) -> Workload:
    """The workload (pure: the same arguments give the same bytes)."""
    rng = random.Random(seed)
    load = Workload(records, groups, updates, move_fraction, delete_fraction, seed)
    live = load.final

    def put(record_id: int, grp: str) -> None:
        message = {"id": record_id, "grp": grp, "qty": rng.randint(1, 1000)}
        value = orjson.dumps(message)
        load.ops.append((record_id, value))
        load.payload_bytes += len(value)
        live[record_id] = message

    for record_id in range(records):
        put(record_id, group_name(record_id % groups, groups))
    for _ in range(updates):
        record_id = rng.randrange(records)
        if rng.random() < delete_fraction:
            load.ops.append((record_id, None))
            load.deletes += 1
            live.pop(record_id, None)
            continue
        current = live.get(record_id)
        if current is None or rng.random() < move_fraction:
            grp = group_name(rng.randrange(groups), groups)
            if current is not None and grp != current["grp"]:
                load.moves += 1
        else:
            grp = current["grp"]
        put(record_id, grp)
    return load


@dataclass(slots=True)
class LatencyPlan:
    """The paced updates of the latency phase: each adds 1 to a live record's qty."""

    #: (id, value) per publish.
    ops: list[tuple[int, bytes]]
    #: Per publish: its group and the group's total once it is applied.
    expect: list[tuple[str, float]]
    #: The view after every publish.
    final: Totals


def latency_plan(load: Workload, count: int, seed: int) -> LatencyPlan:
    rng = random.Random(seed + 1)
    messages = {k: dict(v) for k, v in load.final.items()}
    ids = sorted(messages)
    totals = {grp: list(value) for grp, value in load.expected().items()}
    ops: list[tuple[int, bytes]] = []
    expect: list[tuple[str, float]] = []
    for _ in range(count):
        record_id = rng.choice(ids)
        message = messages[record_id]
        message["qty"] += 1
        ops.append((record_id, orjson.dumps(message)))
        totals[message["grp"]][0] += 1
        expect.append((message["grp"], float(totals[message["grp"]][0])))
    final = {grp: (float(total), int(n)) for grp, (total, n) in totals.items()}
    return LatencyPlan(ops, expect, final)


def keyed(
    ops: Iterable[tuple[int, bytes | None]], keying: str, domain: str, partitions: int
) -> list[tuple[bytes, bytes | None, int]]:
    """(key, value, partition) per op: ``sowkey`` (the SowKey of ``{"id"}`` in ``domain`` on
    its partition, as kafka-sow publishers write) or ``natural`` (``str(id)``, partition -1:
    the producer's partitioner)."""
    if keying == "natural":
        return [(str(record_id).encode(), value, -1) for record_id, value in ops]
    from processor.keys import FieldKeyGenerator, partition_for

    generator = FieldKeyGenerator(domain, ("/id",))
    cache: dict[int, tuple[bytes, int]] = {}
    out: list[tuple[bytes, bytes | None, int]] = []
    for record_id, value in ops:
        found = cache.get(record_id)
        if found is None:
            raw = generator({"id": record_id}).encode()
            found = cache[record_id] = (raw, partition_for(raw, partitions))
        out.append((found[0], value, found[1]))
    return out


def produce_all(
    bootstrap: str, topic: str, items: Sequence[tuple[bytes, bytes | None, int]]
) -> float:
    """Produce ``items`` in order (batched, acks=all, idempotent: each key keeps its order
    through retries); return the seconds it took."""
    started = time.perf_counter()
    workload.produce_items(bootstrap, topic, items, len(items), idempotent=True)
    return time.perf_counter() - started


# --- Reading an engine's output ----------------------------------------------------------------


#: (group, total, n, (publish ms, apply ms) of a kafka-sow envelope or None), or None: skip.
Decoded = tuple[str, float, int, tuple[int, int] | None] | None


class OutputWatch:
    """Follows an engine's output topic from its start (``read_committed``), keeping each
    group's latest (total, n); ``decode(key, value)`` gives (grp, total, n), or None for a
    record to skip; a tombstone removes the group its key last carried."""

    def __init__(
        self, bootstrap: str, topic: str, decode: Callable[[bytes, bytes], Decoded]
    ) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self._decode = decode
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-bench-watch",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
                "log_level": 3,
            }
        )
        self._assigned = False
        self.latest: Totals = {}
        self._group_of: dict[bytes, str] = {}
        self.records = 0  # every record read
        self.data_records = 0  # group values and deletes
        #: (group, total, monotonic time read, envelope times) of each group value, while
        #: ``track`` is set.
        self.arrivals: list[tuple[str, float, float, tuple[int, int] | None]] = []
        self.track = False

    def assign(self, deadline: float) -> bool:
        """Assign every partition from offset 0 once the topic exists; False if it does not
        exist by ``deadline`` (monotonic)."""
        from confluent_kafka import TopicPartition

        while not self._assigned:
            metadata = self._consumer.list_topics(self.topic, timeout=5.0).topics.get(self.topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                self._consumer.assign(
                    [TopicPartition(self.topic, p, 0) for p in sorted(metadata.partitions)]
                )
                self._assigned = True
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def poll(self, timeout_s: float) -> int:
        """Read what is there (waiting up to ``timeout_s``); return how many group values and
        deletes it held."""
        if not self._assigned:
            time.sleep(timeout_s)
            return 0
        if self.track:
            # One at a time: consume() waits for a full batch or its timeout, which would
            # delay the time a record is seen.
            first = self._consumer.poll(timeout_s)
            messages = [] if first is None else [first]
            while first is not None and len(messages) < 1_000:
                more = self._consumer.poll(0)
                if more is None:
                    break
                messages.append(more)
        else:
            messages = self._consumer.consume(5_000, timeout=timeout_s)
        now = time.monotonic()
        changed = 0
        for message in messages:
            if message.error() is not None:
                continue
            self.records += 1
            key = message.key() or b""
            value = message.value()
            if value is None:
                grp = self._group_of.get(key)
                if grp is not None and not key.startswith(b"\x00"):
                    self.latest.pop(grp, None)
                    changed += 1
                continue
            found = self._decode(key, value)
            if found is None:
                continue
            grp, total, n, times = found
            self._group_of[key] = grp
            if n == 0:  # Kafka Streams keeps an emptied group's aggregate; the view deletes it
                self.latest.pop(grp, None)
            else:
                self.latest[grp] = (total, n)
            changed += 1
            if self.track:
                self.arrivals.append((grp, total, now, times))
        self.data_records += changed
        return changed

    def close(self) -> None:
        self._consumer.close()


def sow_view_decoder() -> Callable[[bytes, bytes], Decoded]:
    """A kafka-sow view changelog record: an envelope whose data is the view's JSON message
    (control records, whose keys start with NUL, are skipped)."""
    from processor import changelog

    def decode(key: bytes, value: bytes) -> Decoded:
        if key.startswith(changelog.CONTROL_PREFIX):
            return None
        envelope = changelog.decode(value)
        message = orjson.loads(envelope.data)
        times = (envelope.publish_time_ms, envelope.apply_time_ms)
        return str(message["grp"]), float(message["total"]), int(message["n"]), times

    return decode


def kstreams_decoder(key: bytes, value: bytes) -> Decoded:
    message = orjson.loads(value)
    return key.decode(), float(message["total"]), int(message["n"]), None


# --- Running one engine ----------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """One engine's process and where its output is."""

    name: str
    process: subprocess.Popen[bytes]
    spawned_mono: float
    spawned_wall: float
    watch: OutputWatch
    input_topic: str
    keying: str
    domain: str
    log: Path
    #: The wall-clock second the first input record was processed (None: not known yet).
    first_record: Callable[[], float | None]
    info: dict[str, Any] = field(default_factory=dict)


def first_apply_time(bootstrap: str, changelog_topic: str, partitions: int) -> float | None:
    """The earliest apply time (wall-clock seconds) among the first data records of each
    partition of a kafka-sow changelog: when the processor applied its first input record."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from processor import changelog

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{changelog_topic}-bench-first",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(changelog_topic, p, 0) for p in range(partitions)])
        pending = set(range(partitions))
        first: list[int] = []
        deadline = time.monotonic() + 30.0
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(1_000, timeout=0.5):
                partition = message.partition()
                if partition not in pending:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(partition)
                    continue
                key, value = message.key() or b"", message.value()
                if value is None or key.startswith(changelog.CONTROL_PREFIX):
                    continue
                first.append(changelog.decode(value).apply_time_ms)
                pending.discard(partition)
        return min(first) / 1000.0 if first else None
    finally:
        consumer.close()


AMPS_CONFIG = """<AMPSConfig>
  <SOW>
    <Topic>
      <Name>{topic}</Name>
      <MessageType>json</MessageType>
      <Key>/id</Key>
      <KafkaTopic>{kafka_topic}</KafkaTopic>
      <Partitions>{partitions}</Partitions>
    </Topic>
    <View>
      <Name>{view}</Name>
      <UnderlyingTopic>{topic}</UnderlyingTopic>
      <MessageType>json</MessageType>
      <Projection>
{fields}
      </Projection>
      <Grouping><Field>{grouping}</Field></Grouping>
      <Conflation>{conflation}</Conflation>
    </View>
  </SOW>
</AMPSConfig>
"""


def start_kafka_sow(
    bootstrap: str,
    run_id: str,
    partitions: int,
    work: Path,
    group_protocol: str,
    timeout_s: float,
    conflation: str = "none",
) -> tuple[Callable[[], Run], dict[str, Any]]:
    """Write the topology; return a starter of ``sow process`` and what the run needs."""
    from processor.topology.loader import load_topology

    kafka_topic = f"views-{run_id}-positions"
    view_name = f"TOTALS_{run_id}"
    config = work / "views.xml"
    config.write_text(
        AMPS_CONFIG.format(
            topic=SOW_TOPIC,
            kafka_topic=kafka_topic,
            partitions=partitions,
            view=view_name,
            fields="\n".join(f"        <Field>{text}</Field>" for text in PROJECTION),
            grouping=GROUPING,
            conflation=conflation,
        )
    )
    topology = load_topology(config)  # refuses a bad file here, before anything runs
    view = topology.topics[view_name]
    underlying = topology.topics[SOW_TOPIC]
    details = {
        "topology": config.read_text(),
        "input_topic": underlying.kafka_topic,
        "underlying_changelog": underlying.changelog_topic,
        "view_topic": view.kafka_topic,
        "view_changelog": view.changelog_topic,
        "view_partitions": view.partitions,
        "domain": underlying.domain,
    }
    log_path = work / "sow-process.log"

    def start() -> Run:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SOW_"))},
            "SOW_DEAD_LETTER_TOPIC": f"views-{run_id}.dead-letter",
            "PYTHONUNBUFFERED": "1",
        }
        command = [
            *(sys.executable, "-m", "processor.cli", "process"),
            *("--bootstrap-servers", bootstrap, "--topology", str(config)),
            *("--state-dir", str(work / "sow-state"), "--group-id", f"views-{run_id}-sow"),
            *("--group-protocol", group_protocol),
        ]
        watch = OutputWatch(bootstrap, view.changelog_topic, sow_view_decoder())
        spawned_mono, spawned_wall = time.monotonic(), time.time()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )
        found: list[float | None] = [None]

        def first_record() -> float | None:
            if found[0] is None:
                found[0] = first_apply_time(bootstrap, underlying.changelog_topic, partitions)
            return found[0]

        return Run(
            name="kafka_sow",
            process=process,
            spawned_mono=spawned_mono,
            spawned_wall=spawned_wall,
            watch=watch,
            input_topic=underlying.kafka_topic,
            keying="sowkey",
            domain=underlying.domain,
            log=log_path,
            first_record=first_record,
            info={"command": shlex.join(command), "guarantee": "exactly-once"},
        )

    return start, details


def start_kstreams(
    bootstrap: str, run_id: str, partitions: int, work: Path, timeout_s: float
) -> tuple[Callable[[], Run], dict[str, Any]]:
    """Build the Java application if needed; return a starter of it and what the run needs."""
    import kstreams_ingest

    from processor.log.broker.maven import require_java

    classpath = kstreams_ingest.build()
    input_topic = f"views-{run_id}-kstreams-input"
    output_topic = f"views-{run_id}-kstreams-totals"
    app_id = f"views-{run_id}-kstreams"
    details = {
        "input_topic": input_topic,
        "output_topic": output_topic,
        "application_id": app_id,
        "domain": "",
    }
    log_path = work / "kstreams.log"

    def start() -> Run:
        workload.create_topic(bootstrap, output_topic, partitions)
        command = [
            require_java().path,
            kstreams_ingest.HEAP,
            *shlex.split(os.environ.get(kstreams_ingest.JAVA_OPTS_ENV, "")),
            *("-cp", classpath, KSTREAMS_CLASS),
            *("--bootstrap", bootstrap, "--topic", input_topic, "--output", output_topic),
            *("--state-dir", str(work / "kstreams-state"), "--group", app_id),
            *("--timeout", str(timeout_s + 120.0), "--exactly-once"),
        ]
        watch = OutputWatch(bootstrap, output_topic, kstreams_decoder)
        spawned_mono, spawned_wall = time.monotonic(), time.time()
        log = open(log_path, "wb")  # noqa: SIM115 - the process holds it; closed at stop
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        seen: list[dict[str, Any]] = []

        def read_events() -> None:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        events.put(json.loads(line))

        threading.Thread(target=read_events, name="kstreams-events", daemon=True).start()
        info: dict[str, Any] = {"command": shlex.join(command), "events": seen, "log_handle": log}

        def drain() -> None:
            while True:
                try:
                    event = events.get_nowait()
                except queue.Empty:
                    return
                seen.append(event)
                if event.get("event") == "started":
                    info["version"] = event.get("version")
                    info["guarantee"] = event.get("guarantee")
                    info["config"] = {
                        k: event.get(k)
                        for k in (
                            "processing_guarantee",
                            "commit_interval_ms",
                            "cache_max_bytes",
                            "stream_threads",
                            "jackson",
                        )
                    }
                elif event.get("event") == "error":
                    info["error"] = event.get("error")

        def first_record() -> float | None:
            drain()
            for event in seen:
                if event.get("event") == "first_record":
                    return float(event["epoch_ms"]) / 1000.0
            return None

        info["drain"] = drain
        return Run(
            name="kstreams",
            process=process,
            spawned_mono=spawned_mono,
            spawned_wall=spawned_wall,
            watch=watch,
            input_topic=input_topic,
            keying="natural",
            domain="",
            log=log_path,
            first_record=first_record,
            info=info,
        )

    return start, details


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def absorb(run: Run, expected: Totals, timeout_s: float, settle_s: float) -> dict[str, Any]:
    """Wait until the output equals ``expected`` and stays so for ``settle_s``; the times."""
    started = run.spawned_mono
    deadline = started + timeout_s
    if not run.watch.assign(deadline):
        raise RuntimeError(f"the output topic {run.watch.topic} never appeared")
    final_mono: float | None = None
    final_wall: float | None = None
    left_final = 0
    next_beat = time.monotonic() + HEARTBEAT_S
    cpu_at_final: float | None = None
    while True:
        changed = run.watch.poll(0.01)
        now = time.monotonic()
        if changed:
            if run.watch.latest == expected:
                if final_mono is None:
                    final_mono, final_wall = now, time.time()
                    cpu_at_final = cpu_seconds(run.process.pid)
            elif final_mono is not None:
                left_final += 1  # it changed again after reaching the final state
                final_mono = final_wall = cpu_at_final = None
        if final_mono is not None and now - final_mono >= settle_s:
            break
        if run.process.poll() is not None:
            raise RuntimeError(
                f"{run.name} exited ({run.process.returncode}) before its output held the "
                f"final state; log {run.log}:\n{tail(run.log)}"
            )
        if now > deadline:
            wrong = sum(1 for g, v in expected.items() if run.watch.latest.get(g) != v)
            raise RuntimeError(
                f"{run.name}: the output did not reach the final state in {timeout_s:.0f}s "
                f"({wrong} of {len(expected)} groups differ, {run.watch.records:,} output "
                f"records read); log {run.log}:\n{tail(run.log)}"
            )
        if now >= next_beat:
            progress(
                f"{run.name}: {now - started:.0f}s, {run.watch.records:,} output records read, "
                f"{sum(1 for g, v in expected.items() if run.watch.latest.get(g) == v)} of "
                f"{len(expected)} groups final"
            )
            next_beat += HEARTBEAT_S
    assert final_mono is not None
    assert final_wall is not None
    return {
        "final_mono": final_mono,
        "final_wall": final_wall,
        "left_final_state": left_final,
        "cpu_at_final": cpu_at_final,
    }


# --- Latency ---------------------------------------------------------------------------------


def _paced_publisher(
    bootstrap: str,
    topic: str,
    items: list[tuple[bytes, bytes, int]],
    rate: float,
    go: Any,
    out: Any,
) -> None:
    """Child process: publish ``items`` at ``rate`` per second once ``go`` is set; send back
    each one's send time (CLOCK_MONOTONIC, taken before ``produce``)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0.5,  # as kafka-sow's own publishers (processor.log.kafka.writer)
            "acks": "all",
            "enable.idempotence": True,
            "log_level": 3,
        }
    )
    producer.list_topics(topic, timeout=10.0)  # connected before the clock starts
    go.wait()
    sent = [0.0] * len(items)
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    started = time.monotonic()
    for j, (key, value, partition) in enumerate(items):
        delay = started + j / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent[j] = time.monotonic()
        producer.produce(topic, value, key, partition, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(30.0)
    out.put({"sent": sent, "errors": errors, "seconds": time.monotonic() - started})


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_latency(
    run: Run, bootstrap: str, plan: LatencyPlan, rate: float, partitions: int, warmup_s: float
) -> dict[str, Any]:
    """Publish ``plan`` at ``rate`` to the running engine; publish -> view visible, per
    publish, leaving out the publishes of the first ``warmup_s`` seconds (summarised
    apart)."""
    items = keyed(plan.ops, run.keying, run.domain, partitions)
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    out = context.Queue()
    publisher = context.Process(
        target=_paced_publisher,
        args=(bootstrap, run.input_topic, items, rate, go, out),
        name="views-publisher",
    )
    publisher.start()
    time.sleep(2.0)  # the child imports and connects
    run.watch.arrivals.clear()
    run.watch.track = True
    # Wall-clock -> CLOCK_MONOTONIC, for the envelopes' wall-clock milliseconds.
    offsets = sorted(time.time() - time.monotonic() for _ in range(5))
    wall_offset = offsets[2]
    go.set()
    result: dict[str, Any] | None = None
    publish_s = len(items) / rate
    deadline = time.monotonic() + publish_s + 60.0
    done_at: float | None = None
    while True:
        run.watch.poll(0.02)
        if result is None:
            with contextlib.suppress(queue.Empty):
                result = out.get_nowait()
                done_at = time.monotonic()
        now = time.monotonic()
        if result is not None and run.watch.latest == plan.final:
            break
        if done_at is not None and now - done_at > 10.0:
            break  # some never became visible: counted below
        if now > deadline or run.process.poll() is not None:
            break
    run.watch.track = False
    publisher.join(30)
    if result is None:
        raise RuntimeError(f"{run.name}: the latency publisher sent no result")
    sent: list[float] = result["sent"]
    by_group: dict[str, list[tuple[float, float, tuple[int, int] | None]]] = {}
    for grp, total, at, times in run.watch.arrivals:
        by_group.setdefault(grp, []).append((total, at, times))
    cursor: dict[str, int] = {}
    latencies: list[float] = []
    warming: list[float] = []
    hops: dict[str, list[float]] = {"to_feed": [], "feed_to_view_apply": [], "view_commit": []}
    missing = 0
    warmup = int(warmup_s * rate)
    #: Per second of publishing (warm-up included): latencies, and the two hops either side
    #: of the underlying topic's transaction (kafka-sow only).
    seconds: dict[int, tuple[list[float], list[float], list[float]]] = {}
    for j, (grp, total) in enumerate(plan.expect):
        seen = by_group.get(grp, [])
        k = cursor.get(grp, 0)
        while k < len(seen) and seen[k][0] < total:
            k += 1
        cursor[grp] = k
        if k == len(seen):
            missing += 1
            continue
        _, at, times = seen[k]
        second = seconds.setdefault(int(j / rate), ([], [], []))
        second[0].append((at - sent[j]) * 1000.0)
        if times is not None:
            second[1].append((times[0] / 1000.0 - wall_offset - sent[j]) * 1000.0)
            second[2].append((at - times[1] / 1000.0 + wall_offset) * 1000.0)
        if j < warmup:
            warming.append((at - sent[j]) * 1000.0)
            continue
        latencies.append((at - sent[j]) * 1000.0)
        if times is not None:
            fed = times[0] / 1000.0 - wall_offset
            applied = times[1] / 1000.0 - wall_offset
            hops["to_feed"].append((fed - sent[j]) * 1000.0)
            hops["feed_to_view_apply"].append((applied - fed) * 1000.0)
            hops["view_commit"].append((at - applied) * 1000.0)
    summary: dict[str, Any] = {
        "rate": rate,
        "published": len(items),
        "publish_seconds": round(result["seconds"], 3),
        "publish_errors": result["errors"],
        "achieved_rate": round(len(items) / result["seconds"], 1) if result["seconds"] else None,
        "visible": len(latencies),
        "missing": missing,
        "view_final_ok": run.watch.latest == plan.final,
        "output_records": len(run.watch.arrivals),
    }
    if warming:
        summary["warmup"] = {
            "seconds": warmup_s,
            "publishes": len(warming),
            "p50_ms": round(percentile(warming, 0.50), 2),
            "p99_ms": round(percentile(warming, 0.99), 2),
            "max_ms": round(max(warming), 2),
        }
    if latencies:
        summary.update(
            p50_ms=round(percentile(latencies, 0.50), 2),
            p90_ms=round(percentile(latencies, 0.90), 2),
            p99_ms=round(percentile(latencies, 0.99), 2),
            max_ms=round(max(latencies), 2),
            mean_ms=round(sum(latencies) / len(latencies), 2),
        )
    summary["per_second"] = [
        {
            "second": second,
            "visible": len(lat),
            "p50_ms": round(percentile(lat, 0.50), 1),
            "p99_ms": round(percentile(lat, 0.99), 1),
            **({"to_feed_p50_ms": round(percentile(fed, 0.50), 1)} if fed else {}),
            **({"view_commit_p50_ms": round(percentile(com, 0.50), 1)} if com else {}),
        }
        for second, (lat, fed, com) in sorted(seconds.items())
    ]
    if hops["to_feed"]:
        # kafka-sow's way, cut at its view record's envelope: publish_time = when the
        # underlying topic's transaction produced the group's view input (the latest
        # one the view record reflects), apply_time = when the view's batch began.
        summary["hops_p50_p99_ms"] = {
            name: [round(percentile(values, 0.5), 1), round(percentile(values, 0.99), 1)]
            for name, values in hops.items()
        }
    return summary


def stop_process(process: subprocess.Popen[bytes], name: str) -> int | None:
    """SIGTERM the engine's process (its own session), then SIGKILL after 60 s."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            progress(f"{name}: no exit 60s after SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def run_engine(
    name: str,
    *,
    bootstrap: str,
    broker: Any,
    load: Workload,
    plan: LatencyPlan | None,
    args: argparse.Namespace,
    run_id: str,
    work: Path,
) -> dict[str, Any]:
    """Produce the backlog, run the engine until its output holds the final view, then the
    latency phase; the engine's result."""
    engine_work = work / name
    engine_work.mkdir(parents=True, exist_ok=True)
    tag = f"{run_id}-{name.replace('_', '')}"
    if name == "kafka_sow":
        starter, details = start_kafka_sow(
            bootstrap,
            tag,
            args.partitions,
            engine_work,
            broker.group_protocol,
            args.timeout,
            args.conflation,
        )
        keying = "sowkey"
    else:
        starter, details = start_kstreams(
            bootstrap, tag, args.partitions, engine_work, args.timeout
        )
        keying = "natural"
    input_topic = details["input_topic"]
    items = keyed(load.ops, keying, details["domain"], args.partitions)
    progress(f"{name}: producing {len(items):,} records into {input_topic} ({keying} keys)")
    workload.create_topic(bootstrap, input_topic, args.partitions)
    produced_s = produce_all(bootstrap, input_topic, items)
    progress(f"{name}: produced in {produced_s:.2f}s; starting the engine")
    expected = load.expected()
    load_before = os.getloadavg()
    broker_pid = getattr(broker, "pid", None)
    broker_cpu_before = cpu_seconds(broker_pid) if broker_pid else None
    run = starter()
    result: dict[str, Any] = {
        "engine": name,
        "ok": False,
        "input_topic": input_topic,
        "keying": keying,
        "produce_seconds": round(produced_s, 3),
        "load_average_before": [round(x, 2) for x in load_before],
        "log": str(run.log),
        **{k: v for k, v in details.items() if k != "domain"},
    }
    try:
        timing = absorb(run, expected, args.timeout, args.settle)
        broker_cpu_final = cpu_seconds(broker_pid) if broker_pid else None
        first = run.first_record()
        if "drain" in run.info:
            run.info["drain"]()
        messages = len(load.ops)
        seconds = None if first is None else timing["final_wall"] - first
        result.update(
            ok=True,
            version=run.info.get("version"),
            guarantee=run.info.get("guarantee"),
            messages=messages,
            seconds=None if seconds is None else round(seconds, 3),
            msgs_per_s=None if not seconds else round(messages / seconds, 1),
            wall_seconds=round(timing["final_mono"] - run.spawned_mono, 3),
            start_to_first_record_s=None if first is None else round(first - run.spawned_wall, 3),
            left_final_state=timing["left_final_state"],
            engine_cpu_s=round(timing["cpu_at_final"], 2),
            broker_cpu_s=None
            if broker_cpu_before is None or broker_cpu_final is None
            else round(broker_cpu_final - broker_cpu_before, 2),
            output_records=run.watch.records,
            output_group_values=run.watch.data_records,
            groups=len(run.watch.latest),
            view_ok=run.watch.latest == expected,
        )
        progress(
            f"{name}: final view after {result['seconds']}s from the first record "
            f"({result['msgs_per_s']:,} records/s), {result['wall_seconds']}s from start; "
            f"{run.watch.records:,} output records read"
        )
        if plan is not None:
            progress(
                f"{name}: latency: {len(plan.ops):,} updates at {args.latency_rate:,.0f}/s ..."
            )
            latency = measure_latency(
                run, bootstrap, plan, args.latency_rate, args.partitions, args.latency_warmup
            )
            result["latency"] = latency
            progress(
                f"{name}: per second of publishing (warm-up first), publish -> visible p50 / "
                "p99 ms [publish -> batch p50, view record -> visible p50]: "
                + ", ".join(
                    f"{s['second']}: {s['p50_ms']}/{s['p99_ms']}"
                    + (
                        f" [{s['to_feed_p50_ms']}, {s['view_commit_p50_ms']}]"
                        if "to_feed_p50_ms" in s
                        else ""
                    )
                    for s in latency["per_second"]
                )
            )
            progress(
                f"{name}: publish -> view visible p50 {latency.get('p50_ms')} ms, p99 "
                f"{latency.get('p99_ms')} ms, max {latency.get('max_ms')} ms "
                f"({latency['visible']:,} visible, {latency['missing']} missing)"
            )
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: FAILED: {result['error']}")
    finally:
        run.watch.close()
        result["exit_status"] = stop_process(run.process, name)
        if "drain" in run.info:
            run.info["drain"]()
        result["version"] = result.get("version") or run.info.get("version")
        result["guarantee"] = result.get("guarantee") or run.info.get("guarantee")
        for key in ("command", "config", "events"):
            if key in run.info:
                result[key] = run.info[key]
        if "error" in run.info:
            result["app_error"] = run.info["error"]
        if "log_handle" in run.info:
            run.info["log_handle"].close()
    for state in ("sow-state", "kstreams-state"):  # the logs stay
        shutil.rmtree(engine_work / state, ignore_errors=True)
    if name == "kafka_sow" and result.get("version") is None:
        import processor

        result["version"] = processor.__version__
    return result


# --- Report --------------------------------------------------------------------------------


LABELS = {
    "kafka_sow": "kafka-sow (sow process, View)",
    "kstreams": "Kafka Streams (KTable groupBy().aggregate())",
}


def markdown_table(results: list[dict[str, Any]]) -> str:
    baseline = next(
        (r.get("msgs_per_s") for r in results if r.get("engine") == "kstreams" and r.get("ok")),
        None,
    )
    lines = [
        "| engine | version | guarantee | input records | seconds | records/s | vs Kafka Streams "
        "| wall s | engine CPU s | output records read | final view | publish -> visible "
        "p50 / p99 / max ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        if not r.get("ok"):
            lines.append(
                f"| {LABELS.get(r['engine'], r['engine'])} | {r.get('version', '-')} | - | - | - "
                f"| FAILED | - | - | - | - | - | - |"
            )
            continue
        rate = r.get("msgs_per_s")
        relative = f"{rate / baseline:.2f}x" if rate and baseline else "-"
        latency = r.get("latency") or {}
        lat = (
            f"{latency['p50_ms']} / {latency['p99_ms']} / {latency['max_ms']}"
            + (f" ({latency['missing']} never seen)" if latency.get("missing") else "")
            if "p50_ms" in latency
            else "-"
        )
        lines.append(
            "| {label} | {version} | {guarantee} | {messages:,} | {seconds} | {rate} | {rel} "
            "| {wall} | {cpu} | {out:,} | {view} | {lat} |".format(
                label=LABELS.get(r["engine"], r["engine"]),
                version=r.get("version", "-"),
                guarantee=r.get("guarantee", "-"),
                messages=r["messages"],
                seconds=r.get("seconds"),
                rate=f"{rate:,.0f}" if rate else "-",
                rel=relative,
                wall=r.get("wall_seconds"),
                cpu=r.get("engine_cpu_s"),
                out=r.get("output_records", 0),
                view="ok" if r.get("view_ok") else "MISMATCH",
                lat=lat,
            )
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="distinct records (ids)")
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--updates", type=int, default=300_000, help="changes after the inserts")
    parser.add_argument("--move-fraction", type=float, default=0.1)
    parser.add_argument("--delete-fraction", type=float, default=0.01)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help=f"run order (default {','.join(ENGINES)})"
    )
    parser.add_argument("--latency-rate", type=float, default=1_000.0)
    parser.add_argument(
        "--latency-warmup",
        type=float,
        default=30.0,
        help="seconds published at the rate before the measured ones (summarised apart; "
        "the new broker's JIT warms up in them)",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="0 skips the latency phase"
    )
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds the final view must hold unchanged"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per engine, seconds")
    parser.add_argument(
        "--conflation",
        choices=("none", "inline"),
        default="none",
        help="the view's Conflation: none writes every update of a group in order; inline "
        "conflates a batch's updates of a record and of a group, as Kafka Streams' record "
        "cache does",
    )
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.records, args.groups, args.updates + 1, args.partitions) < 1:
        parser.error("--records, --groups and --partitions must be >= 1, --updates >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = [n.strip() for n in args.engines.split(",") if n.strip()]
    unknown = [n for n in selected if n not in ENGINES]
    if unknown or not selected:
        known = ", ".join(ENGINES)
        print(f"views: unknown engine(s) {unknown}; choose from {known}", file=sys.stderr)
        return 2
    if "kstreams" in selected:
        import kstreams_ingest

        progress("kstreams: building the Java application if needed")
        kstreams_ingest.build()

    load = build_workload(
        args.records, args.groups, args.updates, args.move_fraction, args.delete_fraction, args.seed
    )
    expected = load.expected()
    count = (
        int(args.latency_rate * (args.latency_warmup + args.latency_seconds))
        if args.latency_seconds > 0
        else 0
    )
    plan = latency_plan(load, count, args.seed) if count > 0 else None
    progress(
        f"workload: {len(load.ops):,} records ({args.records:,} inserts, {args.updates:,} "
        f"changes: {load.moves:,} moves, {load.deletes:,} deletes), {len(expected)} groups, "
        f"{len(load.final):,} live records at the end"
    )

    from processor.log.broker import EMBEDDED_ENV, start_broker

    run_id = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix=f"bench-views-{run_id}-"))
    progress("starting the broker")
    broker = start_broker(
        embedded=os.environ.get(EMBEDDED_ENV, "").strip() or DEFAULT_EMBEDDED_BROKER
    )
    progress(f"broker: {broker.description}; logs and state in {work}")
    results: list[dict[str, Any]] = []
    try:
        for name in selected:
            progress(f"--- {name}")
            results.append(
                run_engine(
                    name,
                    bootstrap=broker.bootstrap_servers,
                    broker=broker,
                    load=load,
                    plan=plan,
                    args=args,
                    run_id=run_id,
                    work=work,
                )
            )
    finally:
        progress("stopping the broker")
        broker.stop()

    table = markdown_table(results)
    print(table)
    sow = next((r for r in results if r["engine"] == "kafka_sow" and r.get("ok")), None)
    peer = next((r for r in results if r["engine"] == "kstreams" and r.get("ok")), None)
    ratio = (
        round(sow["msgs_per_s"] / peer["msgs_per_s"], 3)
        if sow and peer and sow.get("msgs_per_s") and peer.get("msgs_per_s")
        else None
    )
    sow_p99 = ((sow or {}).get("latency") or {}).get("p99_ms")
    targets = {
        "rate_vs_kafka_streams": ratio,
        "rate_target_met": None if ratio is None else ratio >= 1.0,
        "latency_p99_ms": sow_p99,
        "latency_target_met": None if sow_p99 is None else sow_p99 < 50.0,
    }
    print(
        f"\nkafka-sow vs Kafka Streams: {ratio}x (target >= 1.0x); kafka-sow publish -> view "
        f"p99 {sow_p99} ms at {args.latency_rate:,.0f} msg/s (target < 50 ms)"
    )
    document = {
        "benchmark": "views",
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "broker": broker.description,
        "workload": {
            "records": args.records,
            "groups": args.groups,
            "updates": args.updates,
            "move_fraction": args.move_fraction,
            "delete_fraction": args.delete_fraction,
            "seed": args.seed,
            "partitions": args.partitions,
            "conflation": args.conflation,
            "input_records": len(load.ops),
            "moves": load.moves,
            "deletes": load.deletes,
            "live_records_at_end": len(load.final),
            "payload_bytes": load.payload_bytes,
            "value_example": orjson.loads(next(v for _, v in load.ops if v is not None)),
            "view": {"projection": list(PROJECTION), "grouping": GROUPING},
        },
        "latency_phase": {
            "rate": args.latency_rate,
            "warmup_seconds": args.latency_warmup,
            "seconds": args.latency_seconds,
        },
        "timing": "seconds = first input record processed -> the engine's output (read_committed) "
        "first equals the recomputed view; wall_seconds = process spawn -> the same moment",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        "targets": targets,
        "results": results,
        "table_markdown": table,
    }
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(document, indent=2, default=str) + "\n")
        progress(f"wrote {args.json_out}")
    good = results and all(r.get("ok") and r.get("view_ok") for r in results)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
