"""The store partitions one processor owns, as the group gives and takes them.

An :class:`Assignment` lives as long as one pipeline of the processor (one consumer,
one transactional producer). The rebalance callbacks run inside the consumer's calls:
:meth:`Assignment.on_assign` opens the stores of newly assigned partitions and holds
back the input of those that must recover first; :meth:`Assignment.recover_step` runs
one step of the first unfinished recovery between polls (replay the changelog, then
republish a lost one), and resumes the partition's input when it ends;
:meth:`Assignment.on_revoke` closes the stores nobody feeds any longer (or hands them to
the standby). The classic eager protocol and KIP-848's incremental one are handled
alike, one log partition at a time: a store partition opens with the first of its two
log partitions assigned and closes once neither is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field

from processor.engine.apply import Applier, Route
from processor.engine.commit import CrashHook
from processor.engine.derived import Closing, DerivedPartition, DerivedTopic, Direct, Ticking
from processor.engine.feeding import Feeding, feed_steps, feeding_needed, reset_steps
from processor.engine.partition import PartitionState, make_writers
from processor.engine.recovery import (
    Restored,
    restore_steps,
    transient_start_offset,
    write_reset,
)
from processor.engine.republish import republish_pending, republish_steps
from processor.engine.shaping import Shaping
from processor.engine.standby import Standby
from processor.keys import key_function
from processor.log import InputLog, PartitionReader, Record, TopicPartitionKey, TransactionalLog
from processor.messages import codec_for
from processor.state import Store
from processor.topology.model import SowTopic

log = logging.getLogger(__name__)

StoreOpener = Callable[[SowTopic, int], Store]


@dataclass(slots=True)
class Recovery:
    """A store partition being recovered: its steps and the input partitions held for it
    (with the committed offset each was assigned at)."""

    state: PartitionState
    steps: Generator[object, None, Restored]
    held: dict[TopicPartitionKey, int]
    #: Changelog records replayed so far (counted into ``restored_records`` as it goes).
    replayed: int = 0


@dataclass(eq=False)
class Assignment:
    """What one pipeline of the processor owns (see the module doc). Not thread-safe:
    the processor's loop (and the consumer calls it makes) owns it.

    ``positions`` is the processor's map of where each fetching input partition
    resumes (the watchdog reads it); ``ready`` is set once every assigned store partition
    has recovered; ``restored`` counts the changelog records replayed.
    """

    by_log_topic: Mapping[str, tuple[SowTopic, bool]]
    open_store: StoreOpener
    applier: Applier
    reader: PartitionReader
    producer: TransactionalLog
    standby: Standby | None
    positions: dict[TopicPartitionKey, int]
    ready: threading.Event
    started_ms: int = field(kw_only=True)
    crash: CrashHook | None = field(kw_only=True)
    republish_chunk: int = field(kw_only=True)
    #: The derived topics (views) by name: their partitions apply their own input.
    derived: Mapping[str, DerivedTopic] = field(kw_only=True, default_factory=dict)
    #: The change listeners of each topic: those that must see every record are fed
    #: the partition's current records in its recovery when they have not been yet.
    listeners: Mapping[str, Sequence[object]] = field(kw_only=True, default_factory=dict)
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict, init=False)
    #: The derived partitions of the open store partitions of derived topics.
    derivations: dict[tuple[str, int], DerivedPartition] = field(default_factory=dict, init=False)

    recoveries: dict[tuple[str, int], Recovery] = field(default_factory=dict, init=False)
    #: Input offsets found applied past the committed ones (see _start_after_recovery),
    #: to commit before the next batch so the group's offsets tell the truth.
    offsets_behind: dict[TopicPartitionKey, int] = field(default_factory=dict, init=False)
    #: The consumer, for resuming held partitions (set once it exists).
    input: InputLog | None = field(default=None, init=False)
    #: Commits what the processor applied before a rebalance changes what it owns
    #: (pipelined batches, :meth:`processor.engine.pipeline.Batches.settle`).
    settle: Callable[[], None] | None = field(default=None, init=False)
    restored: int = field(default=0, init=False)

    def on_assign(
        self,
        partitions: Sequence[TopicPartitionKey],
        committed: Mapping[TopicPartitionKey, int],
    ) -> Mapping[TopicPartitionKey, int | None]:
        """Open the stores of newly assigned partitions; hold the input of those that
        must recover (None) until :meth:`_recover_step` finishes them."""
        if self.settle is not None:
            self.settle()
        starts: dict[TopicPartitionKey, int | None] = {}
        for log_topic, partition in sorted(partitions):
            topic, from_input = self.by_log_topic[log_topic]
            key = (topic.name, partition)
            state = self.states.get(key)
            if state is None:
                state = self._open(topic, partition)
                self.states[key] = state
            self.applier.routes[(log_topic, partition)] = Route(
                state, log_topic, from_input, self.derivations.get(key)
            )
            tp = (log_topic, partition)
            if state.transient:
                starts[tp] = transient_start_offset(
                    topic, log_topic, partition, self.reader, self.started_ms
                )
            elif key in self.recoveries:
                self.recoveries[key].held[tp] = committed.get(tp, -1)
                starts[tp] = None
            else:
                start = self._start_after_recovery(state, tp, committed.get(tp, -1))
                if start is not None:
                    starts[tp] = start
        for derivation in self.derivations.values():
            if isinstance(derivation, Direct):  # every assignment: a barrier first
                derivation.ready = False
                derivation.barrier_due = True
        for tp in partitions:
            if tp in starts and starts[tp] is None:
                continue  # held for its store's recovery: placed when resumed
            self._place(tp, starts.get(tp), committed.get(tp, -1))
        if self.standby is not None:
            self.standby.follow(set(self.states))
        # Nothing given: a member left without partitions, or (incremental protocol) the
        # callback that follows a revocation.
        names = ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)) or "nothing"
        if self.recoveries:
            log.info("given %s; recovering %d store partitions first", names, len(self.recoveries))
        else:
            log.info("assigned %s", names)
            self.ready.set()
        return starts

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
        self.offsets_behind[tp] = applied
        return applied

    def _open(self, topic: SowTopic, partition: int) -> PartitionState:
        taken = None
        if self.standby is not None:
            taken = self.standby.take((topic.name, partition))
        store, warm_log_next = taken if taken is not None else (None, {})
        if store is None:
            store = self.open_store(topic, partition)
        codec = codec_for(topic)
        state = PartitionState(
            topic=topic,
            partition=partition,
            store=store,
            codec=codec,
            key_function=key_function(topic),
            writers=make_writers(topic, partition),
            shaping=Shaping.of(topic, codec),
        )
        deriver = self.derived.get(topic.name)
        if deriver is not None:
            self.derivations[(topic.name, partition)] = deriver.open(state)
        if state.transient:
            write_reset(state, self.producer)
        else:
            steps = self._recover(state, warm_log_next)
            self.recoveries[(topic.name, partition)] = Recovery(state, steps, {})
        return state

    def _recover(
        self, state: PartitionState, warm_log_next: Mapping[str, int]
    ) -> Generator[object, None, Restored]:
        """The steps of one store partition's recovery: replay, then republish if the
        log was lost (or a republish was cut short), then catch derived state up
        (:mod:`processor.engine.feeding`). ``warm_log_next`` is what a standby
        store's replay showed applied before the handover (its changelog was read there)."""
        restored = yield from restore_steps(state.store, state.topic, state.partition, self.reader)
        for log_topic, nxt in warm_log_next.items():
            restored.log_next[log_topic] = max(restored.log_next.get(log_topic, 0), nxt)
        if republish_pending(state.store):
            yield from republish_steps(state, self.producer, self.republish_chunk, crash=self.crash)
        derivation = self.derivations.get((state.topic.name, state.partition))
        if derivation is not None:
            yield from reset_steps(state, *derivation.version, self.producer)
        for listener in self.listeners.get(state.topic.name, ()):
            if isinstance(listener, Feeding) and feeding_needed(state, listener):
                produce = self.applier.produce
                yield from feed_steps(
                    state,
                    listener,
                    self.producer,
                    produce,
                    self.republish_chunk,
                    crash=self.crash,
                    local=self.local,
                )
        return restored

    def recover_step(self) -> None:
        """Run one step of the first unfinished recovery; on its end, resume its input."""
        key, recovery = next(iter(self.recoveries.items()))
        try:
            step = next(recovery.steps)
            if isinstance(step, int):  # a replay step: records replayed so far
                self.restored += step - recovery.replayed
                recovery.replayed = step
            return
        except StopIteration as done:
            restored: Restored = done.value
        del self.recoveries[key]
        self.restored += restored.applied - recovery.replayed
        state = recovery.state
        state.log_next = restored.log_next
        state.publishers.load()
        starts = {
            tp: self._start_after_recovery(state, tp, committed)
            for tp, committed in recovery.held.items()
        }
        assert self.input is not None
        self.input.resume(starts)
        for tp, committed in recovery.held.items():
            self._place(tp, starts[tp], committed)
        log.info(
            "recovered %s[%d]; resuming %s",
            state.topic.name,
            state.partition,
            ", ".join(f"{t}[{p}]" for t, p in sorted(starts)),
        )
        if not self.recoveries:
            routes = sorted(self.applier.routes)
            log.info("assigned %s", ", ".join(f"{t}[{p}]" for t, p in routes))
            self.ready.set()

    def _place(self, tp: TopicPartitionKey, start: int | None, committed: int) -> None:
        """Note where a partition's input resumes, when known (with no offset given or
        committed it is read from the start, ``auto.offset.reset``): for the watchdog,
        and as applied so far in the store partition's PROGRESS records, which thus name
        this input from the first transaction on."""
        begin = max(committed, 0) if start is None else start
        if begin >= 0:
            self.positions[tp] = begin
            route = self.applier.routes.get(tp)
            if route is not None:
                applied = route.state.applied
                applied[tp[0]] = max(applied.get(tp[0], 0), begin)

    def on_revoke(self, partitions: Sequence[TopicPartitionKey]) -> None:
        """Drop revoked log partitions (every one under the eager protocol, only those
        moving to another member under KIP-848's)."""
        if self.settle is not None:
            self.settle()
        revoked: set[tuple[str, int]] = set()
        for log_topic, partition in partitions:
            tp = (log_topic, partition)
            self.positions.pop(tp, None)
            self.applier.routes.pop(tp, None)
            self.offsets_behind.pop(tp, None)
            topic, _ = self.by_log_topic[log_topic]
            revoked.add((topic.name, partition))
            recovery = self.recoveries.get((topic.name, partition))
            if recovery is not None:  # its other log partition may stay: not to resume
                recovery.held.pop(tp, None)
        # A store partition closes once neither of its log topics is assigned.
        still = {(r.state.topic.name, r.state.partition) for r in self.applier.routes.values()}
        self.close_states([k for k in revoked if k not in still], warm=True)
        log.info("revoked %s", ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)))

    def close_states(self, keys: list[tuple[str, int]], warm: bool = False) -> None:
        """Drop store partitions; with ``warm``, their stores become standbys (when this
        processor keeps standbys) instead of closing."""
        for key in keys:
            recovery = self.recoveries.pop(key, None)
            if recovery is not None:
                recovery.steps.close()  # releases its reader and store iterators first
            derivation = self.derivations.pop(key, None)
            if isinstance(derivation, Closing):
                derivation.close()
            state = self.states.pop(key, None)
            if state is None:
                continue
            if warm and self.standby is not None:
                self.standby.give(state.topic, state.partition, state.store)
            else:
                state.store.close()

    def maintenance_due(self, standby: Standby | None) -> bool:
        """Whether the loop's next turn writes a transaction of its own (offsets found
        applied, barriers) or steps a recovery or a standby store."""
        return bool(
            self.offsets_behind or self.barriers_due or self.recoveries or standby is not None
        )

    @property
    def barriers_due(self) -> bool:
        """Whether a derived partition asks for a barrier (:class:`Direct`)."""
        return any(
            isinstance(derivation, Direct) and derivation.barrier_due
            for derivation in self.derivations.values()
        )

    def write_barriers(self) -> None:
        """Write the barriers due (:class:`~processor.engine.derived.Direct`), in a
        transaction of their own, between the processor's batches."""
        self.producer.begin()
        for key, derivation in sorted(self.derivations.items()):
            if isinstance(derivation, Direct) and derivation.barrier_due:
                state = self.states[key]
                record_key, headers = derivation.barrier()
                derivation.barrier_due = False
                self.producer.produce(
                    state.topic.kafka_topic, None, record_key, state.partition, headers
                )
        self.producer.commit()

    def local(self) -> dict[tuple[str, int], tuple[PartitionState, Direct]]:
        """The recovered derived partitions that can take direct changes (each says
        whether it is ready: :class:`~processor.engine.derived.Direct`)."""
        return {
            key: (self.states[key], derivation)
            for key, derivation in self.derivations.items()
            if isinstance(derivation, Direct) and key not in self.recoveries
        }

    def ticking(self, now_ms: int) -> list[tuple[PartitionState, Ticking]]:
        """The derived partitions (recovered) with timed work due by ``now_ms``."""
        return [
            (self.states[key], derivation)
            for key, derivation in self.derivations.items()
            if key not in self.recoveries
            and isinstance(derivation, Ticking)
            and derivation.due(now_ms)
        ]

    def read_again(self, records: Sequence[Record]) -> None:
        """Drop what an aborted batch changed in the store partitions (those recovering
        had none of it) and fetch its records again."""
        for key, state in self.states.items():
            if key not in self.recoveries:
                state.discard()
                derivation = self.derivations.get(key)
                if derivation is not None:
                    derivation.discard()
        starts: dict[TopicPartitionKey, int] = {}
        for record in records:
            if record.error() is None:
                tp = (record.topic(), record.partition())
                offset = record.offset()
                if tp not in starts or offset < starts[tp]:
                    starts[tp] = offset
        assert self.input is not None
        self.input.rewind(starts)
