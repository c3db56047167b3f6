"""Batches whose consumer offsets the group refused: abort, read again, or restart.

A group refuses a transaction's offsets (StaleGroupError) when it moved to a new
generation or member epoch while the transaction was open (KIP-848 hands out a new epoch
as it gives this member partitions, between two polls). The processor then aborts the
transaction and applies its records again (:meth:`Assignment.read_again`): the next
consume runs the pending rebalance callback first, and the batch is applied again under
the group's new metadata. Nothing of it was committed or written to a store. When that
keeps happening, the pipeline restarts.
"""

from __future__ import annotations

import logging
import threading

from processor.errors import StaleGroupError
from processor.log import TransactionalLog

log = logging.getLogger(__name__)


class GroupRefusals:
    """Counts the refusals in a row (single-threaded: the processor's loop)."""

    #: Batches in a row whose offsets a moved-on group may refuse before the pipeline
    #: restarts (the consumer should catch up with the group within one consume).
    RETRIES = 5

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self.in_a_row = 0

    def accepted(self) -> None:
        self.in_a_row = 0

    def refused(self, producer: TransactionalLog, exc: StaleGroupError) -> None:
        """Abort the transaction the group refused; raise ``exc`` (a pipeline restart)
        when that keeps happening."""
        self.in_a_row += 1
        if self.in_a_row > self.RETRIES:
            raise exc
        log.info("%s; aborting the transaction and reading its batch again", exc)
        producer.abort()
        self._stop.wait(0.01 * self.in_a_row)
