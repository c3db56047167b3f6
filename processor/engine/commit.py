"""The commit protocol: the one place where a batch becomes durable, exactly once."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.changelog import PROGRESS_KEY, encode_progress, publisher_record
from processor.engine.partition import PartitionState
from processor.engine.publishers import publisher_meta
from processor.engine.transaction import Transaction, TransactionStatus
from processor.errors import ValueFormatError
from processor.log import TopicPartitionKey, TransactionalLog
from processor.state import CHANGELOG_OFFSET, offset_bytes

log = logging.getLogger(__name__)

#: Test hook: ``SOW_CRASH_AT=step:n`` kills the process (exit 86) the n-th time ``step``
#: is reached, so tests can crash the processor between any two commit steps (and after
#: a republish step, :mod:`processor.engine.republish`).
CRASH_ENV = "SOW_CRASH_AT"
#: Test hook: ``SOW_STALL_AT=step:n:seconds`` holds the processor still for that long the
#: n-th time ``step`` is reached, then lets it go on (a long pause mid-transaction: GC,
#: a frozen VM, CPU starvation).
STALL_ENV = "SOW_STALL_AT"
STEPS = ("produced", "offsets-sent", "committed", "stored", "republished")
#: How long the crash hook lets the Kafka client's threads go on before the exit, so
#: that what was produced reaches the broker: a crash after ``produced`` then leaves an
#: open transaction with its records in the log, as a process killed mid-transaction
#: usually does (an exit at once could leave nothing sent, and nothing to abort).
CRASH_PAUSE_S = 0.3

CrashHook = Callable[[str], None]


def crash_hook_from_env() -> CrashHook | None:
    """The test hook configured by ``SOW_CRASH_AT`` and ``SOW_STALL_AT``, or None."""
    hooks = [
        hook
        for hook in (_crash_hook(os.environ.get(CRASH_ENV)), _stall_hook(os.environ.get(STALL_ENV)))
        if hook is not None
    ]
    if len(hooks) < 2:
        return hooks[0] if hooks else None

    def every(reached: str) -> None:
        for hook in hooks:
            hook(reached)

    return every


def _at_step(env: str, spec: str) -> tuple[str, int, str]:
    """``step:n[:rest]`` of a test hook's setting: the step, n (default 1), the rest."""
    step, _, after = spec.partition(":")
    count, _, rest = after.partition(":")
    if step not in STEPS:
        raise ValueFormatError(f"{env}={spec!r}: step must be one of {', '.join(STEPS)}")
    return step, int(count or "1"), rest


def _crash_hook(spec: str | None) -> CrashHook | None:
    if not spec:
        return None
    step, count, _ = _at_step(CRASH_ENV, spec)
    remaining = [count]

    def hook(reached: str) -> None:
        if reached == step:
            remaining[0] -= 1
            if remaining[0] <= 0:
                log.error("%s: crashing at step %s as asked", CRASH_ENV, step)
                time.sleep(CRASH_PAUSE_S)
                os._exit(86)

    return hook


def _stall_hook(spec: str | None) -> CrashHook | None:
    if not spec:
        return None
    step, count, seconds = _at_step(STALL_ENV, spec)
    pause_s = float(seconds or "0")
    remaining = [count]

    def hook(reached: str) -> None:
        if reached == step:
            remaining[0] -= 1
            if remaining[0] == 0:
                log.error("%s: stalling at step %s for %gs as asked", STALL_ENV, step, pause_s)
                time.sleep(pause_s)

    return hook


@dataclass(frozen=True, slots=True)
class Prepared:
    """A transaction whose records are all produced (steps 1 of :func:`commit`), with
    the publisher sequences each partition's commit writes to its store."""

    transaction: Transaction
    publishers: dict[PartitionState, dict[str, int]]


def commit(
    transaction: Transaction,
    producer: TransactionalLog,
    offsets: Mapping[TopicPartitionKey, int],
    group: object,
    crash: CrashHook | None = None,
    flushed: Callable[[], None] | None = None,
) -> dict[TopicPartitionKey, int]:
    """Make one applied batch durable: the partitions it touched are the transaction's
    batches (:class:`~processor.engine.transaction.PartitionBatch`); return the offset
    of each touched changelog partition's PROGRESS record.

    The changelog records of the batch were produced while it was applied, and its
    change events go to the topics' listeners first (:meth:`Transaction.flush`: they
    may add to the batches); then ``flushed`` is called (the live units go out,
    :mod:`processor.engine.live`). Then:

    1. Produce, per touched partition, one publisher control record for each publisher
       whose sequence the batch changed, then one PROGRESS control record: the next
       offset of every input of the partition as of this transaction (``applied`` with
       this batch's ``progress`` on top, so the latest record alone, which is what
       compaction keeps, says it all); the PROGRESS offsets come back with step 3.
    2. Send the consumer offsets (next offset per input partition) to the transaction
       (none when the transaction only expired records).
    3. Commit the Kafka transaction: changelog records and offsets become visible at once.
    4. Write each touched store's batch: its data, the changelog offset it now reflects,
       the changed publishers' sequences and its due index changes, in one atomic
       RocksDB write.

    Step 1 is :func:`prepare`, on the processor's loop; steps 2-4 are :func:`finish`,
    which a pipelined processor runs on another thread while it applies the next batch
    (:mod:`processor.engine.pipeline`).

    A crash before 3 leaves an aborted transaction (Kafka drops it; stores untouched; the
    batch is re-read from the committed offsets). A crash between 3 and 4 leaves stores
    behind their changelog, which recovery replays. On any error the transaction is marked
    FAILED (its batches refuse any further use) and the caller must discard the
    partitions' state and re-read from committed offsets.
    """
    return finish(prepare(transaction, producer, crash, flushed), producer, offsets, group, crash)


def prepare(
    transaction: Transaction,
    producer: TransactionalLog,
    crash: CrashHook | None = None,
    flushed: Callable[[], None] | None = None,
) -> Prepared:
    """Step 1 of :func:`commit` (after the listeners and ``flushed``)."""
    try:
        transaction.flush()
        if flushed is not None:
            flushed()
        taken: dict[PartitionState, dict[str, int]] = {}
        for batch in transaction.batches:
            state = batch.state
            changelog = state.topic.changelog_topic
            changed = taken[state] = state.publishers.take()
            for publisher, sequence in changed.items():
                key, value = publisher_record(publisher, sequence)
                producer.produce(changelog, value, key, state.partition)
            reached = state.applied | batch.progress
            positions = [(topic, state.partition, nxt) for topic, nxt in reached.items()]
            progress = encode_progress(positions)
            producer.produce_tracked(changelog, progress, PROGRESS_KEY, state.partition)
        transaction.advance(TransactionStatus.STARTED, TransactionStatus.PREPARED)
        if crash:
            crash("produced")
    except BaseException:
        transaction.fail()
        raise
    return Prepared(transaction, taken)


def finish(
    prepared: Prepared,
    producer: TransactionalLog,
    offsets: Mapping[TopicPartitionKey, int],
    group: object,
    crash: CrashHook | None = None,
) -> dict[TopicPartitionKey, int]:
    """Steps 2-4 of :func:`commit`; the PROGRESS records' offsets."""
    transaction = prepared.transaction
    try:
        if offsets:
            producer.send_offsets(offsets, group)
        if crash:
            crash("offsets-sent")
        ends = producer.commit()
        if crash:
            crash("committed")
        for batch in transaction.batches:
            state = batch.state
            end = ends[(state.topic.changelog_topic, state.partition)]
            changed = prepared.publishers[state]
            meta: dict[bytes, bytes | None] = {**publisher_meta(changed), **batch.meta}
            meta[CHANGELOG_OFFSET] = offset_bytes(end + 1)
            state.store.write(batch.writes, meta, batch.due)
            state.applied.update(batch.progress)
            state.publishers.stored(changed)
            if state.inflight is batch.writes:
                state.inflight = None
        if crash:
            crash("stored")
        transaction.advance(TransactionStatus.PREPARED, TransactionStatus.COMPLETE)
    except BaseException:
        transaction.fail()
        raise
    return ends
