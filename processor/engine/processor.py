"""The SOW processor: consume the transaction log, apply it, commit exactly once.

One processor is one consumer-group member, or in static assignment mode the one
instance that takes every partition. It owns the store partitions of the input partitions
it is given (input topic partition p and repartition topic partition p belong to store
partition p of the SOW topic; the range assignor keeps them together).

Rebalances (eager or KIP-848's incremental ones) open and close store partitions through
the pipeline's :class:`~processor.engine.assignment.Assignment`; recovery runs in the poll
loop, as in Kafka Streams and Quix Streams: a newly assigned persistent partition's input
is held back while its store replays its changelog, one step between polls, so a long
restore never holds up the consumer's poll and the other partitions keep being processed.

Expiration (:mod:`processor.engine.expiry`) and timed work (``timers``: actions) run in
the same loop: a transaction also does what is due by then (expiries bounded), and an idle
processor checks after each idle wait (``IDLE_WAIT_S``); recovering partitions wait.

A watchdog thread (:mod:`processor.engine.watchdog`) samples the loop about once a second:
when the processor is stuck (blocked in a call, not consuming records that arrived, out of
its group, or facing a broker that does not answer) it says so in one log line and through
:attr:`Processor.stalled` (readiness turns false), and a loop that still turns restarts its
pipeline from the committed offsets with a new consumer (nothing lost, nothing applied
twice: the same path as a broker failure).

With standby stores (:mod:`processor.engine.standby`) the loop also keeps warm copies of
the store partitions it does not own, a bounded chunk per iteration after recovery; a
newly assigned partition takes its standby's store and replays only the changelog's tail,
and a revoked one becomes a standby.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from processor import errors
from processor.engine.apply import Applier
from processor.engine.assignment import Assignment, StoreOpener
from processor.engine.commit import CrashHook
from processor.engine.derived import DerivedTopic, Timed, due_timers
from processor.engine.expiry import DueIndex, Expirer, expiring_states
from processor.engine.gc_tuning import batch_friendly_gc
from processor.engine.live import LiveFeed, LiveSink
from processor.engine.pipeline import Batches, GatedProduce, expire_and_tick
from processor.engine.refusals import GroupRefusals
from processor.engine.standby import Standby
from processor.engine.transaction import ChangeListener, Listeners, retrying
from processor.engine.watchdog import DEFAULT_STALL_AFTER_S, LoopState, Watchdog
from processor.errors import BrokerError, FencedError, StaleGroupError, StalledError
from processor.log import (
    ChangelogTail,
    EndOffsets,
    InputLog,
    ProcessorConnections,
    Record,
    TopicPartitionKey,
    TransactionalLog,
)
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

#: Records per transaction at most. A batch is whatever the consumer has fetched when the
#: previous transaction ends (``Processor._next_batch``), so the cap only binds on a
#: backlog, where a larger batch costs fewer transactions and fewer store writes (keys
#: repeat within it): 50,000 ingests ~1.4x the rate of 10,000 on the ingest bench.
DEFAULT_MAX_BATCH = 50_000


class Processor:
    """Applies every SOW topic of a topology from the log into state stores.

    ``run`` blocks until ``stop`` is called (from any thread). A failed transaction tears
    the pipeline down and starts it again from the committed offsets (stores replay their
    changelog); a fenced processor stops with FencedError.
    """

    #: How long an idle processor blocks waiting for a record (it checks ``stop`` between).
    IDLE_WAIT_S = 0.1
    BUSY_WAIT_S = 0.003  # the same while a commit runs in the background (engine/pipeline.py)

    def __init__(
        self,
        topology: Topology,
        connections: ProcessorConnections,
        open_store: StoreOpener,
        dead_letter_topic: str,
        max_batch: int = DEFAULT_MAX_BATCH,
        crash_hook: CrashHook | None = None,
        republish_chunk: int = 10000,
        standby_tail: Callable[[], ChangelogTail] | None = None,
        stall_after_s: float = DEFAULT_STALL_AFTER_S,
        clock: Callable[[], float] = time.time,
        listeners: Listeners | None = None,
        derived: Mapping[str, DerivedTopic] | None = None,
        pipelined: bool = False,
        timers: Sequence[Timed] = (),
    ) -> None:
        """``standby_tail`` makes changelog tails for standby stores (None: no standby
        stores); only a consumer-group member has partitions it does not own.
        ``stall_after_s``: how long a sign of being stuck may last before the watchdog
        (when ``connections.end_offsets`` is given) calls the processor stuck.
        ``clock``: the time in seconds that apply times and expirations are taken from.
        ``listeners``: more change listeners per SOW topic name, fed every change the
        processor makes to its records (expiry's due index is always one for a topic
        with expiration). ``derived``: the derived topics (views, queues) by name, whose
        records their :class:`~processor.engine.derived.DerivedTopic` computes from their
        input (:mod:`processor.wiring` makes both). ``pipelined``: apply the next batch
        while the previous one commits, where that is safe (:mod:`processor.engine.pipeline`).
        ``timers``: timed work on the partitions it owns (actions, docs/actions.md)."""
        self.topology, self._connections, self._open_store = topology, connections, open_store
        self._dead_letter_topic, self._max_batch = dead_letter_topic, max_batch
        #: When the log is ready for the next transaction (monotonic; ``_next_batch``).
        self._settled_at = 0.0
        self._crash, self._republish_chunk = crash_hook, republish_chunk
        self._standby_tail = standby_tail
        self._standby: Standby | None = None
        self._standby_records_before = 0
        self._producer: TransactionalLog | None = None  # the current pipeline's
        #: The store partitions the current pipeline owns (None between pipelines).
        self._assignment: Assignment | None = None
        self._input: InputLog | None = None
        self._stop = threading.Event()
        self._clock = clock
        self._started_ms = int(clock() * 1000)
        self._by_log_topic: dict[str, tuple[SowTopic, bool]] = {}
        for topic in topology.topics.values():
            self._by_log_topic[topic.kafka_topic] = (topic, True)
            self._by_log_topic[topic.repartition_topic] = (topic, False)
        due_index = DueIndex()
        self._listeners: dict[str, tuple[ChangeListener, ...]] = {
            name: (
                *((due_index,) if topic.expiration_s is not None else ()),
                *(listeners or {}).get(name, ()),
            )
            for name, topic in topology.topics.items()
        }
        self.derived: Mapping[str, DerivedTopic] = derived or {}
        self._applier: Applier | None = None
        self._expirer: Expirer | None = None
        #: Records deleted as expired by earlier pipelines (the current one counts its own).
        self._expired_before = 0
        #: Committed transactions and the records they held (monitoring, benchmarks).
        self.transactions = 0
        self.records = 0
        #: Changelog records replayed by the recoveries of earlier pipelines.
        self._restored_before = 0
        #: ``time.perf_counter()`` when the first batch arrived (None before).
        self.first_batch_at: float | None = None
        #: Set once the processor has its partitions and every store is recovered.
        self.ready = threading.Event()
        self._stall_after_s = stall_after_s
        #: What the watchdog found stuck (None while the processor works or idles).
        self._stalled: str | None = None
        #: Set by the watchdog: the loop restarts its pipeline at its next turn.
        self._restart = threading.Event()
        #: What the poll loop says of itself, for the watchdog.
        self._loop = LoopState(
            group_state=lambda: "" if self._input is None else self._input.group_state(),
            applied=lambda: self.records,
        )
        #: Times the watchdog found the processor stuck (monitoring, tests).
        self.stalls = 0
        #: Transactions in a row whose offsets the group refused.
        self._refusals = GroupRefusals(self._stop)
        self._live: LiveFeed | None = None  # hands changes over before the commit
        self._pipelined, self._timers = pipelined, tuple(timers)

    def attach_live(self, sink: LiveSink, units: bool = True) -> None:
        """Hand ``sink`` changes (``units``) and handed records as applied (engine/live.py)."""
        feed = self._live = LiveFeed(self.topology, sink, units)
        for name in feed.topics:
            self._listeners[name] = (*self._listeners[name], feed)

    @property
    def live(self) -> LiveFeed | None:
        """What hands changes over before their commit (None: nothing does)."""
        return self._live

    @property
    def applied(self) -> int:
        """Records applied to state (or dead-lettered) since start: re-keyed records count
        once, when they come back from the repartition topic."""
        return self.records - (0 if self._applier is None else self._applier.repartitioned)

    @property
    def dead_lettered(self) -> int:
        """Records sent to the dead-letter topic since start."""
        return 0 if self._applier is None else self._applier.dead_lettered

    @property
    def expired(self) -> int:
        """Records deleted as expired since start, for monitoring: it counts the current
        transaction's before it commits, and again those a failed transaction redoes."""
        current = 0 if self._expirer is None else self._expirer.expired
        return self._expired_before + current

    @property
    def duplicates(self) -> int:
        """Commands discarded by duplicate detection since start."""
        return 0 if self._applier is None else self._applier.duplicates

    def input_lag(self) -> dict[str, int]:
        """Committed input records not yet applied, per SOW topic (its input and
        repartition partitions this processor fetches), as of the consumer's latest
        statistics (about a second old); thread-safe. Partitions held for recovery are
        not fetched and not counted: see :attr:`recovering`."""
        lag = dict.fromkeys(self.topology.topics, 0)
        consumer = self._input
        if consumer is not None:
            for (log_topic, _), behind in consumer.lag().items():
                known = self._by_log_topic.get(log_topic)
                if known is not None:
                    lag[known[0].name] += behind
        return lag

    @property
    def pipelines(self) -> int:
        """Pipelines started so far: one, and one per restart (monitoring, tests)."""
        return self._loop.pipelines

    @property
    def recovering(self) -> int:
        """Store partitions still replaying their changelog (their input held back);
        thread-safe. With :attr:`restored_records`, a recovery's progress."""
        assignment = self._assignment
        return 0 if assignment is None else len(assignment.recoveries)

    @property
    def restored_records(self) -> int:
        """Changelog records replayed by recoveries since start (a failover to a warm
        standby replays only the changelog's tail)."""
        assignment = self._assignment
        return self._restored_before + (0 if assignment is None else assignment.restored)

    @property
    def standby_records(self) -> int:
        """Changelog records written into standby stores since start."""
        current = 0 if self._standby is None else self._standby.records
        return self._standby_records_before + current

    @property
    def owned_partitions(self) -> list[tuple[str, int]]:
        """The store partitions (SOW topic, partition) this processor owns now. Same
        thread rule as ``standby_partitions``."""
        return [] if self._assignment is None else sorted(self._assignment.states)

    @property
    def standby_partitions(self) -> list[tuple[str, int]]:
        """The store partitions (SOW topic, partition) kept warm now; read it from the
        poll loop's thread or while the processor is idle (monitoring, tests)."""
        return [] if self._standby is None else self._standby.partitions

    def standby_behind(self) -> int | None:
        """Changelog records the standby stores lag behind (None: not known yet; 0
        without standbys). Same thread rule as ``standby_partitions``."""
        return 0 if self._standby is None else self._standby.behind()

    @property
    def stalled(self) -> str | None:
        """What is stuck, in words, while the watchdog finds the processor stuck (readiness
        is false then); None while it works or idles. Thread-safe."""
        return self._stalled

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch; thread-safe."""
        self._stop.set()

    def run(self) -> None:
        """Process until stopped.

        A broker failure tears the pipeline down and restarts it from the committed
        offsets after a back-off (0.5 s doubling to 10 s, back to 0.5 s once a
        transaction commits again). Anything else (FencedError, KafkaSecurityError, a
        bug) is raised: the caller must stop the process rather than run without one.
        """
        backoff = 0.5
        batch_friendly_gc()
        watchdog = None
        if self._connections.end_offsets is not None:
            watchdog = threading.Thread(
                target=self._watch,
                args=(self._connections.end_offsets,),
                daemon=True,
                name="sow-processor-watchdog",
            )
            watchdog.start()
        try:
            self._run_until_stopped(backoff)
        finally:
            self._stop.set()
            if watchdog is not None:
                watchdog.join(timeout=5)

    def _run_until_stopped(self, backoff: float) -> None:
        while not self._stop.is_set():
            committed = self.transactions
            try:
                self._run_pipeline()
                return
            except (FencedError, errors.KafkaSecurityError):
                raise  # another owner, or a refusal no restart changes: stop the process
            except StalledError:
                continue  # the watchdog said why; a new consumer starts at once
            except (BrokerError, errors.SchemaRegistryUnavailableError) as exc:
                if self.transactions > committed:
                    backoff = 0.5
                log.error(
                    "processing failed (%s); restarting from committed offsets in %.1fs",
                    exc,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _watch(self, make_end_offsets: Callable[[], EndOffsets]) -> None:
        """The watchdog thread (:class:`~processor.engine.watchdog.Watchdog`)."""
        watchdog = Watchdog(
            self._loop, make_end_offsets(), self._stall_after_s, self._stuck, self._resumed
        )
        watchdog.run(self._stop)

    def _resumed(self) -> None:
        log.info("processor resumed: it applies its input again")
        self._stalled = None

    def _stuck(self, verdict: str) -> None:
        """Say once that the processor is stuck; ask a loop that still turns to restart
        its pipeline (a blocked one goes on when its call times out)."""
        self.stalls += 1
        self._stalled = verdict
        blocked = verdict.startswith("its poll loop")
        action = (
            "waiting for the call to time out"
            if blocked
            else "restarting its consumer from the committed offsets"
        )
        log.error("processor stuck: %s; %s", verdict, action)
        if not blocked:
            self._restart.set()

    def _run_pipeline(self) -> None:
        self._loop.positions = {}
        self._refusals.accepted()
        self._loop.pipelines += 1
        self._restart.clear()
        producer = self._producer = self._connections.transactional_log()
        consumer = self._input = self._connections.input_log()
        reader = self._connections.reader()
        # The one produce of every transaction (and of the dead letters): it waits while
        # the producer's queue is full.
        produce = GatedProduce(retrying(producer.raw_produce, producer.drain))
        applier = self._applier = Applier(produce, self._dead_letter_topic, producer.produce_error)
        if self._expirer is not None:
            self._expired_before += self._expirer.expired
        expirer = self._expirer = Expirer()
        if self._standby is not None:
            self._standby_records_before += self._standby.records
        standby = self._standby = None
        if self._standby_tail is not None:
            standby = self._standby = Standby(self.topology, self._open_store, self._standby_tail)
        assignment = self._assignment = Assignment(
            self._by_log_topic,
            self._open_store,
            applier,
            reader,
            producer,
            standby,
            self._loop.positions,
            self.ready,
            started_ms=self._started_ms,
            crash=self._crash,
            republish_chunk=self._republish_chunk,
            derived=self.derived,
            listeners=self._listeners,
        )
        assignment.input = consumer
        live = self._live
        if live is not None:
            live.reset(consumer.quiet)
        batches = Batches(
            producer,
            consumer,
            applier,
            assignment,
            produce,
            live,
            self._refusals,
            self._crash,
            self._landed,
            self._pipelined,
        )
        assignment.settle = batches.settle
        try:
            if standby is not None:
                standby.follow(set())  # warm while the group join runs
            log.info("processor taking its partitions of %s", ", ".join(self.topology.topics))
            self._loop.phase = "joining the group"
            self._loop.beat = time.monotonic()
            consumer.subscribe(
                sorted(self._by_log_topic), assignment.on_assign, assignment.on_revoke
            )
            while not self._stop.is_set():
                self._loop.beat = time.monotonic()
                if self._restart.is_set():
                    raise StalledError(self._stalled or "stuck")
                self._loop.phase = "fetching"
                if not batches.idle and assignment.maintenance_due(standby):
                    batches.settle()  # their transactions come between the batches'
                if assignment.offsets_behind:
                    self._commit_offsets_behind(producer, consumer, assignment)
                if assignment.barriers_due:
                    assignment.write_barriers()
                if assignment.recoveries:
                    assignment.recover_step()
                    records = consumer.consume(self._max_batch, 0)
                elif standby is not None and standby.step():
                    records = consumer.consume(self._max_batch, 0)
                else:
                    records = self._next_batch(consumer, batches.idle)
                now_ms = int(self._clock() * 1000)
                expiring = expiring_states(assignment.states, assignment.recoveries)
                ticking = assignment.ticking(now_ms)
                due = expiring and expirer.due(expiring, now_ms)
                placing = batches.unplaced()
                timed = due_timers(self._timers, assignment.states, assignment.recoveries, now_ms)
                work = bool(records or ticking or due or placing or timed[0])
                if not work and batches.idle:
                    continue
                self._loop.phase = "applying and committing a batch"
                # A failure anywhere below raises out of the pipeline, which drops every
                # partition's pending state and restarts from the committed offsets; but
                # offsets refused by a group that moved on abort the batch alone.
                if records and self.first_batch_at is None:
                    self.first_batch_at = time.perf_counter()
                expiries = (expirer, expiring, ticking, now_ms, applier.reject, placing, timed)
                expire = partial(expire_and_tick, *expiries)
                batches.apply(records, (self.transactions, now_ms, self._listeners), expire, work)
            batches.settle()
        finally:
            batches.abandon()
            assignment.close_states(list(assignment.states))
            self._restored_before += assignment.restored
            self._assignment = None
            if standby is not None:
                standby.close()
            self._input = None
            consumer.close()
            producer.close()
            reader.close()

    def _next_batch(self, consumer: InputLog, idle: bool = True) -> Sequence[Record]:
        """The next batch: whatever is already fetched (up to ``max_batch``) without
        waiting; when nothing is, wait up to ``IDLE_WAIT_S`` for the first record (while a
        commit runs in the background, ``not idle``: ``BUSY_WAIT_S``, to land it soon) and
        take it with whatever arrived alongside. A batch grows with the load and a lone
        record is applied as soon as it arrives, never after a fixed batching delay; but
        one begun within the log's ``commit_settle_s`` of the last commit takes what
        arrives until then (the log would make its transaction wait longer)."""
        records = consumer.consume(self._max_batch, 0)
        if not records:
            records = consumer.consume(1, self.IDLE_WAIT_S if idle else self.BUSY_WAIT_S)
            if not records or self._max_batch == 1 or not idle:
                return records
        missing = self._max_batch - len(records)
        if missing > 0:
            settle = max(self._settled_at - time.monotonic(), 0.0)
            rest = consumer.consume(missing, settle)
            if rest:
                records = [*records, *rest]
        return records

    def _landed(self, records: int, offsets: dict[TopicPartitionKey, int]) -> None:
        """A transaction of ``records`` committed (:class:`Batches`)."""
        producer = self._producer
        settle_s = 0.0 if producer is None else producer.commit_settle_s
        self._settled_at = time.monotonic() + settle_s
        self._loop.positions.update(offsets)
        self._refusals.accepted()
        self.transactions += 1
        self.records += records

    def _commit_offsets_behind(
        self, producer: TransactionalLog, consumer: InputLog, assignment: Assignment
    ) -> None:
        """Commit input offsets that recovery found already applied (a transaction with
        offsets only): otherwise they would stay behind until new input arrives."""
        offsets, assignment.offsets_behind = assignment.offsets_behind, {}
        producer.begin()
        try:
            producer.send_offsets(offsets, consumer.group_metadata())
        except StaleGroupError as exc:
            self._refusals.refused(producer, exc)
            assignment.offsets_behind = {**offsets, **assignment.offsets_behind}  # tried again
            return
        producer.commit()
        self._refusals.accepted()
