"""The SOW processor: consume the transaction log, apply it, commit exactly once.

One processor is one consumer-group member, or in static assignment mode the one
instance that takes every partition. It owns the store partitions of the input partitions
it is given (input topic partition p and repartition topic partition p belong to store
partition p of the SOW topic; the range assignor keeps them together).

Rebalances come as the group protocol makes them (:class:`processor.log.kafka.KafkaInputLog`):
the classic, eager protocol revokes every partition and then assigns a whole new set; the
consumer protocol (KIP-848) revokes and assigns only the partitions that change owner, the
rest being fetched and applied throughout. The callbacks handle both the same way, one
log partition at a time: a store partition opens with the first of its two log
partitions assigned and closes once neither is, so the two may also arrive or leave in
separate callbacks.

Recovery runs in the poll loop, as in Kafka Streams and Quix Streams: a newly assigned
persistent partition's input is held back (not fetched) while its store replays its
changelog (and republishes a lost one), one step between polls, so a long restore never
holds up the consumer's poll and the other partitions keep being processed.

Expiration (:mod:`processor.engine.expiry`) runs in the same loop: every transaction
also deletes the records due by then (bounded per transaction), and an idle processor
checks its due indexes after each idle wait (``IDLE_WAIT_S``) and commits a transaction
of expiries alone when some are due. Partitions still recovering are left out.

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

import gc
import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass

from processor.engine.apply import Applier, Route
from processor.engine.commit import CrashHook, commit
from processor.engine.expiry import DueIndex, Expirer, expiring_states
from processor.engine.partition import PartitionState, make_writers
from processor.engine.recovery import (
    Restored,
    restore_steps,
    transient_start_offset,
    write_reset,
)
from processor.engine.republish import republish_pending, republish_steps
from processor.engine.standby import Standby
from processor.engine.transaction import ChangeListener, Listeners, Transaction
from processor.engine.watchdog import DEFAULT_STALL_AFTER_S, LoopReport, StallJudge
from processor.errors import BrokerError, FencedError, StaleGroupError, StalledError
from processor.keys import key_function
from processor.log import (
    ChangelogTail,
    EndOffsets,
    InputLog,
    PartitionReader,
    Record,
    TopicPartitionKey,
    TransactionalLog,
)
from processor.messages import codec_for
from processor.state import Store
from processor.topology.model import SowTopic, Topology

log = logging.getLogger(__name__)

StoreOpener = Callable[[SowTopic, int], Store]

#: Records per transaction at most. A batch is whatever the consumer has fetched when the
#: previous transaction ends (``Processor._next_batch``), so the cap only binds on a
#: backlog, where a larger batch costs fewer transactions and fewer store writes (keys
#: repeat within it): 50,000 ingests ~1.4x the rate of 10,000 on the ingest bench.
DEFAULT_MAX_BATCH = 50_000
#: The young-generation threshold while a processor runs (CPython's default is 700).
GC_YOUNG_THRESHOLD = 20_000


def batch_friendly_gc() -> None:
    """Collect garbage less often while batches run (a process-wide setting).

    A batch allocates tens of thousands of short-lived objects (the consumer's messages,
    decoded values, keys), none of them cyclic. At the default threshold each batch
    triggers dozens of young collections and, through them, full collections of every
    object the process holds. Only ever raises the threshold. (Nothing is frozen out of
    collections: a process that runs several processors, as the tests do, would keep
    the garbage of the earlier ones, and their Kafka clients with it, for good.)
    """
    young, middle, old = gc.get_threshold()
    if young and young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


@dataclass(slots=True)
class Recovery:
    """A store partition being recovered: its steps and the input partitions held for it
    (with the committed offset each was assigned at)."""

    state: PartitionState
    steps: Generator[object, None, Restored]
    held: dict[TopicPartitionKey, int]
    #: Changelog records replayed so far (counted into ``restored_records`` as it goes).
    replayed: int = 0


@dataclass(frozen=True, slots=True)
class ProcessorConnections:
    """Factories for the processor's log clients (built by :mod:`processor.app`)."""

    input_log: Callable[[], InputLog]
    transactional_log: Callable[[], TransactionalLog]
    reader: Callable[[], PartitionReader]
    #: Where the input partitions end, for the watchdog (None: no watchdog).
    end_offsets: Callable[[], EndOffsets] | None = None


class Processor:
    """Applies every SOW topic of a topology from the log into state stores.

    ``run`` blocks until ``stop`` is called (from any thread). A failed transaction tears
    the pipeline down and starts it again from the committed offsets (stores replay their
    changelog); a fenced processor stops with FencedError.
    """

    #: How long an idle processor blocks waiting for a record (it checks ``stop`` between).
    IDLE_WAIT_S = 0.1

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
    ) -> None:
        """``standby_tail`` makes changelog tails for standby stores (None: no standby
        stores); only a consumer-group member has partitions it does not own.
        ``stall_after_s``: how long a sign of being stuck may last before the watchdog
        (when ``connections.end_offsets`` is given) calls the processor stuck.
        ``clock``: the time in seconds that apply times and expirations are taken from.
        ``listeners``: more change listeners per SOW topic name, fed every change the
        processor makes to its records (expiry's due index is always one for a topic
        with expiration)."""
        self.topology = topology
        self._connections = connections
        self._open_store = open_store
        self._dead_letter_topic = dead_letter_topic
        self._max_batch = max_batch
        self._crash = crash_hook
        self._republish_chunk = republish_chunk
        self._standby_tail = standby_tail
        self._standby: Standby | None = None
        self._standby_records_before = 0
        self._recoveries: dict[tuple[str, int], Recovery] = {}
        #: Input offsets found applied past the committed ones (see _start_after_recovery),
        #: to commit before the next batch so the group's offsets tell the truth.
        self._offsets_behind: dict[TopicPartitionKey, int] = {}
        self._input: InputLog | None = None
        self._stop = threading.Event()
        self._clock = clock
        self._started_ms = int(clock() * 1000)
        self._by_log_topic: dict[str, tuple[SowTopic, bool]] = {}
        for topic in topology.topics.values():
            self._by_log_topic[topic.kafka_topic] = (topic, True)
            self._by_log_topic[topic.repartition_topic] = (topic, False)
        self._states: dict[tuple[str, int], PartitionState] = {}
        due_index = DueIndex()
        self._listeners: dict[str, tuple[ChangeListener, ...]] = {
            name: (
                *((due_index,) if topic.expiration_s is not None else ()),
                *(listeners or {}).get(name, ()),
            )
            for name, topic in topology.topics.items()
        }
        self._applier: Applier | None = None
        self._expirer: Expirer | None = None
        #: Records deleted as expired by earlier pipelines (the current one counts its own).
        self._expired_before = 0
        self._reader: PartitionReader | None = None
        self._producer: TransactionalLog | None = None
        #: Committed transactions and the records they held (monitoring, benchmarks).
        self.transactions = 0
        self.records = 0
        #: Changelog records replayed by recoveries since start (a failover to a warm
        #: standby replays only the changelog's tail).
        self.restored_records = 0
        #: ``time.perf_counter()`` when the first batch arrived (None before).
        self.first_batch_at: float | None = None
        #: Set once the processor has its partitions and every store is recovered.
        self.ready = threading.Event()
        self._stall_after_s = stall_after_s
        #: What the watchdog found stuck (None while the processor works or idles).
        self._stalled: str | None = None
        #: Set by the watchdog: the loop restarts its pipeline at its next turn.
        self._restart = threading.Event()
        #: ``time.monotonic()`` of the poll loop's last turn, and what it did then.
        self._beat = time.monotonic()
        self._phase = "starting"
        #: Counts pipelines started (the watchdog starts over with each new consumer).
        self._pipelines = 0
        #: Times the watchdog found the processor stuck (monitoring, tests).
        self.stalls = 0
        #: Next input offset to apply per fetching partition (where it resumed, then
        #: after each batch); written by the loop, read by the watchdog.
        self._positions: dict[TopicPartitionKey, int] = {}
        #: Transactions in a row whose offsets the group refused (see _read_again).
        self._stale_group = 0

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
    def recovering(self) -> int:
        """Store partitions still replaying their changelog (their input held back);
        thread-safe. With :attr:`restored_records`, a recovery's progress."""
        return len(self._recoveries)

    @property
    def standby_records(self) -> int:
        """Changelog records written into standby stores since start."""
        current = 0 if self._standby is None else self._standby.records
        return self._standby_records_before + current

    @property
    def owned_partitions(self) -> list[tuple[str, int]]:
        """The store partitions (SOW topic, partition) this processor owns now. Same
        thread rule as ``standby_partitions``."""
        return sorted(self._states)

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
        transaction commits again). Anything else (FencedError, StoreError, a bug) is
        raised: the caller must stop the process rather than run without a processor.
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
            except FencedError:
                raise
            except StalledError:
                continue  # the watchdog said why; a new consumer starts at once
            except BrokerError as exc:
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
        """The watchdog thread: judge the loop about once a second (module docstring)."""
        judge = StallJudge(self._stall_after_s)
        end_offsets = make_end_offsets()
        pipeline = self._pipelines
        applied_at_stall = 0
        try:
            while not self._stop.wait(1.0):
                consumer = self._input
                if self._pipelines != pipeline:
                    pipeline = self._pipelines
                    judge.reset()
                positions = dict(self._positions)
                asked_at = time.monotonic()
                ends = end_offsets.ends(sorted(positions), timeout_s=1.0)
                report = LoopReport(
                    beat=self._beat,
                    phase=self._phase,
                    positions=positions,
                    ends=ends,
                    group_state="" if consumer is None else consumer.group_state(),
                    asked_at=asked_at,
                )
                verdict = judge.judge(report, time.monotonic())
                log.debug("watchdog: %s -> %s", report, verdict)
                if verdict is not None and self._stalled is None:
                    applied_at_stall = self.records
                    self._stuck(verdict)
                elif verdict is None and self._stalled is not None:
                    # Working again once it applies something, or has nothing to apply.
                    caught_up = ends is not None and all(
                        ends.get(tp, 0) - position <= 1 for tp, position in positions.items()
                    )
                    if self.records > applied_at_stall or (positions and caught_up):
                        log.info("processor resumed: it applies its input again")
                        self._stalled = None
        finally:
            end_offsets.close()

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
        self._positions = {}
        self._stale_group = 0
        self._pipelines += 1
        self._restart.clear()
        self._offsets_behind = {}
        producer = self._producer = self._connections.transactional_log()
        consumer = self._input = self._connections.input_log()
        self._reader = self._connections.reader()
        applier = self._applier = Applier(
            producer.raw_produce, self._dead_letter_topic, producer.drain, producer.produce_error
        )
        if self._expirer is not None:
            self._expired_before += self._expirer.expired
        expirer = self._expirer = Expirer(producer.raw_produce, producer.drain)
        if self._standby is not None:
            self._standby_records_before += self._standby.records
        standby = self._standby = None
        if self._standby_tail is not None:
            standby = self._standby = Standby(self.topology, self._open_store, self._standby_tail)
        try:
            if standby is not None:
                standby.follow(set())  # warm while the group join runs
            log.info(
                "processor taking its partitions of %s", ", ".join(sorted(self.topology.topics))
            )
            self._phase = "joining the group"
            self._beat = time.monotonic()
            consumer.subscribe(sorted(self._by_log_topic), self._on_assign, self._on_revoke)
            while not self._stop.is_set():
                self._beat = time.monotonic()
                if self._restart.is_set():
                    raise StalledError(self._stalled or "stuck")
                self._phase = "fetching"
                if self._offsets_behind:
                    self._commit_offsets_behind(producer, consumer)
                if self._recoveries:
                    self._recover_step()
                    records = consumer.consume(self._max_batch, 0)
                elif standby is not None and standby.step():
                    records = consumer.consume(self._max_batch, 0)
                else:
                    records = self._next_batch(consumer)
                now_ms = int(self._clock() * 1000)
                expiring = expiring_states(self._states, self._recoveries)
                if not records and not (expiring and expirer.due(expiring, now_ms)):
                    continue
                if records and self.first_batch_at is None:
                    self.first_batch_at = time.perf_counter()
                self._phase = "applying and committing a batch"
                # A failure anywhere below raises out of the pipeline, which drops every
                # partition's pending state and restarts from the committed offsets; but
                # offsets refused by a group that moved on abort the batch alone.
                transaction = Transaction(self.transactions, now_ms, self._listeners)
                counted = applier.counters()
                producer.begin()
                offsets = applier.apply(transaction, records)
                if expiring:
                    expirer.expire(transaction, expiring)
                try:
                    if transaction.batches:
                        commit(
                            transaction, producer, offsets, consumer.group_metadata(), self._crash
                        )
                    else:
                        producer.abort()
                except StaleGroupError as exc:
                    self._read_again(records, producer, consumer, exc)
                    applier.restore_counters(counted)
                    continue
                self._positions.update(offsets)
                self._stale_group = 0
                self.transactions += 1
                self.records += len(records)
        finally:
            self._close_states(list(self._states))
            if standby is not None:
                standby.close()
            self._input = None
            consumer.close()
            producer.close()
            self._reader.close()

    def _next_batch(self, consumer: InputLog) -> Sequence[Record]:
        """The next batch: whatever is already fetched (up to ``max_batch``) without
        waiting; when nothing is, wait up to ``IDLE_WAIT_S`` for the first record and take
        it with whatever arrived alongside. A batch thus grows with the load (records
        queue up while the previous transaction commits) and a lone record is applied as
        soon as it arrives, never after a fixed batching delay."""
        records = consumer.consume(self._max_batch, 0)
        if records:
            return records
        first = consumer.consume(1, self.IDLE_WAIT_S)
        if not first or self._max_batch == 1:
            return first
        rest = consumer.consume(self._max_batch - 1, 0)
        return [*first, *rest] if rest else first

    def _on_assign(
        self,
        partitions: Sequence[TopicPartitionKey],
        committed: Mapping[TopicPartitionKey, int],
    ) -> Mapping[TopicPartitionKey, int | None]:
        """Open the stores of newly assigned partitions; hold the input of those that
        must recover (None) until :meth:`_recover_step` finishes them."""
        assert self._applier is not None
        assert self._reader is not None
        starts: dict[TopicPartitionKey, int | None] = {}
        for log_topic, partition in sorted(partitions):
            topic, from_input = self._by_log_topic[log_topic]
            key = (topic.name, partition)
            state = self._states.get(key)
            if state is None:
                state = self._open(topic, partition)
                self._states[key] = state
            self._applier.routes[(log_topic, partition)] = Route(state, log_topic, from_input)
            tp = (log_topic, partition)
            if state.transient:
                starts[tp] = transient_start_offset(
                    topic, log_topic, partition, self._reader, self._started_ms
                )
            elif key in self._recoveries:
                self._recoveries[key].held[tp] = committed.get(tp, -1)
                starts[tp] = None
            else:
                start = self._start_after_recovery(state, tp, committed.get(tp, -1))
                if start is not None:
                    starts[tp] = start
        for tp in partitions:
            if tp in starts and starts[tp] is None:
                continue  # held for its store's recovery: placed when resumed
            self._place(tp, starts.get(tp), committed.get(tp, -1))
        if self._standby is not None:
            self._standby.follow(set(self._states))
        # Nothing given: a member left without partitions, or (incremental protocol) the
        # callback that follows a revocation.
        names = ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)) or "nothing"
        if self._recoveries:
            log.info("given %s; recovering %d store partitions first", names, len(self._recoveries))
        else:
            log.info("assigned %s", names)
            self.ready.set()
        return starts

    def _commit_offsets_behind(self, producer: TransactionalLog, consumer: InputLog) -> None:
        """Commit input offsets that recovery found already applied (a transaction with
        offsets only): otherwise they would stay behind until new input arrives."""
        offsets, self._offsets_behind = self._offsets_behind, {}
        producer.begin()
        try:
            producer.send_offsets(offsets, consumer.group_metadata())
        except StaleGroupError as exc:
            self._stale(producer, exc)
            self._offsets_behind = {**offsets, **self._offsets_behind}  # tried again
            return
        producer.commit()
        self._stale_group = 0

    #: Batches in a row whose offsets a moved-on group may refuse before the pipeline
    #: restarts (the consumer should catch up with the group within one consume).
    STALE_GROUP_RETRIES = 5

    def _stale(self, producer: TransactionalLog, exc: StaleGroupError) -> None:
        """Abort the transaction the group refused; raise ``exc`` (a pipeline restart)
        when that keeps happening."""
        self._stale_group += 1
        if self._stale_group > self.STALE_GROUP_RETRIES:
            raise exc
        log.info("%s; aborting the transaction and reading its batch again", exc)
        producer.abort()
        self._stop.wait(0.01 * self._stale_group)

    def _read_again(
        self,
        records: Sequence[Record],
        producer: TransactionalLog,
        consumer: InputLog,
        exc: StaleGroupError,
    ) -> None:
        """The group refused the batch's offsets: it moved to a new generation or member
        epoch while the transaction was open (KIP-848 hands out a new epoch as it gives
        this member partitions, between two polls). Abort the transaction, drop what it
        changed in the store partitions, and fetch its records again: the next consume
        runs the pending rebalance callback first, and the batch is applied again under
        the group's new metadata. Nothing of it was committed or written to a store."""
        self._stale(producer, exc)
        for key, state in self._states.items():
            if key not in self._recoveries:
                state.discard()
        starts: dict[TopicPartitionKey, int] = {}
        for record in records:
            if record.error() is None:
                tp = (record.topic(), record.partition())
                offset = record.offset()
                if tp not in starts or offset < starts[tp]:
                    starts[tp] = offset
        consumer.rewind(starts)

    def _start_after_recovery(
        self, state: PartitionState, tp: TopicPartitionKey, committed: int
    ) -> int | None:
        """Where a recovered partition's input resumes: None for its committed offset,
        or the changelog's position when that is later."""
        applied = state.log_next.get(tp[0])
        resume = max(committed, 0)  # <0: none committed
        if applied is None or applied <= resume:
            return None
        log.warning(
            "%s[%d]: the changelog shows input applied up to offset %d, past the committed "
            "offset %d (the broker kept a transaction a crash left open); resuming there so "
            "nothing is applied twice",
            tp[0],
            tp[1],
            applied,
            resume,
        )
        self._offsets_behind[tp] = applied
        return applied

    def _open(self, topic: SowTopic, partition: int) -> PartitionState:
        assert self._reader is not None
        assert self._producer is not None
        taken = None
        if self._standby is not None:
            taken = self._standby.take((topic.name, partition))
        store, warm_log_next = taken if taken is not None else (None, {})
        if store is None:
            store = self._open_store(topic, partition)
        state = PartitionState(
            topic=topic,
            partition=partition,
            store=store,
            codec=codec_for(topic),
            key_function=key_function(topic),
            writers=make_writers(topic, partition),
        )
        if state.transient:
            write_reset(state, self._producer)
        else:
            steps = self._recover(state, warm_log_next)
            self._recoveries[(topic.name, partition)] = Recovery(state, steps, {})
        return state

    def _recover(
        self, state: PartitionState, warm_log_next: Mapping[str, int]
    ) -> Generator[object, None, Restored]:
        """The steps of one store partition's recovery: replay, then republish if the
        log was lost (or a republish was cut short). ``warm_log_next`` is what a standby
        store's replay showed applied before the handover (its changelog was read there)."""
        assert self._reader is not None
        assert self._producer is not None
        restored = yield from restore_steps(state.store, state.topic, state.partition, self._reader)
        for log_topic, nxt in warm_log_next.items():
            restored.log_next[log_topic] = max(restored.log_next.get(log_topic, 0), nxt)
        if republish_pending(state.store):
            yield from republish_steps(
                state, self._producer, self._republish_chunk, crash=self._crash
            )
        return restored

    def _recover_step(self) -> None:
        """Run one step of the first unfinished recovery; on its end, resume its input."""
        key, recovery = next(iter(self._recoveries.items()))
        try:
            step = next(recovery.steps)
            if isinstance(step, int):  # a replay step: records replayed so far
                self.restored_records += step - recovery.replayed
                recovery.replayed = step
            return
        except StopIteration as done:
            restored: Restored = done.value
        del self._recoveries[key]
        self.restored_records += restored.applied - recovery.replayed
        state = recovery.state
        state.log_next = restored.log_next
        state.publishers.load()
        starts = {
            tp: self._start_after_recovery(state, tp, committed)
            for tp, committed in recovery.held.items()
        }
        assert self._input is not None
        self._input.resume(starts)
        for tp, committed in recovery.held.items():
            self._place(tp, starts[tp], committed)
        log.info(
            "recovered %s[%d]; resuming %s",
            state.topic.name,
            state.partition,
            ", ".join(f"{t}[{p}]" for t, p in sorted(starts)),
        )
        if not self._recoveries:
            assert self._applier is not None
            routes = sorted(self._applier.routes)
            log.info("assigned %s", ", ".join(f"{t}[{p}]" for t, p in routes))
            self.ready.set()

    def _place(self, tp: TopicPartitionKey, start: int | None, committed: int) -> None:
        """Note where a partition's input resumes, when known (with no offset given or
        committed it is read from the start, ``auto.offset.reset``): for the watchdog,
        and as applied so far in the store partition's PROGRESS records, which thus name
        this input from the first transaction on."""
        begin = max(committed, 0) if start is None else start
        if begin >= 0:
            self._positions[tp] = begin
            assert self._applier is not None
            route = self._applier.routes.get(tp)
            if route is not None:
                applied = route.state.applied
                applied[tp[0]] = max(applied.get(tp[0], 0), begin)

    def _on_revoke(self, partitions: Sequence[TopicPartitionKey]) -> None:
        """Drop revoked log partitions (every one under the eager protocol, only those
        moving to another member under KIP-848's)."""
        assert self._applier is not None
        revoked: set[tuple[str, int]] = set()
        for log_topic, partition in partitions:
            tp = (log_topic, partition)
            self._positions.pop(tp, None)
            self._applier.routes.pop(tp, None)
            self._offsets_behind.pop(tp, None)
            topic, _ = self._by_log_topic[log_topic]
            revoked.add((topic.name, partition))
            recovery = self._recoveries.get((topic.name, partition))
            if recovery is not None:  # its other log partition may stay: not to resume
                recovery.held.pop(tp, None)
        # A store partition closes once neither of its log topics is assigned.
        still = {(r.state.topic.name, r.state.partition) for r in self._applier.routes.values()}
        self._close_states([k for k in revoked if k not in still], warm=True)
        log.info("revoked %s", ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)))

    def _close_states(self, keys: list[tuple[str, int]], warm: bool = False) -> None:
        """Drop store partitions; with ``warm``, their stores become standbys (when this
        processor keeps standbys) instead of closing."""
        for key in keys:
            recovery = self._recoveries.pop(key, None)
            if recovery is not None:
                recovery.steps.close()  # releases its reader and store iterators first
            state = self._states.pop(key, None)
            if state is None:
                continue
            if warm and self._standby is not None:
                self._standby.give(state.topic, state.partition, state.store)
            else:
                state.store.close()
