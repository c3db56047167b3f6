"""The transaction object: one batch of log records applied as a unit."""

from __future__ import annotations

from enum import Enum

from processor.errors import TransactionStateError


class TransactionStatus(Enum):
    """STARTED -> PREPARED -> COMPLETE, or FAILED from any state. FAILED is final."""

    STARTED = "started"
    PREPARED = "prepared"
    COMPLETE = "complete"
    FAILED = "failed"


class Transaction:
    """Tracks the status of one batch; a failed or complete transaction is never reused."""

    __slots__ = ("number", "status")

    def __init__(self, number: int) -> None:
        self.number = number
        self.status = TransactionStatus.STARTED

    def advance(self, expected: TransactionStatus, new: TransactionStatus) -> None:
        """Move from ``expected`` to ``new``; anything else is a programming error."""
        if self.status is not expected:
            raise TransactionStateError(
                f"transaction {self.number} is {self.status.value}, expected {expected.value}"
            )
        self.status = new

    def fail(self) -> None:
        """Mark the transaction failed (allowed from any state but COMPLETE)."""
        if self.status is TransactionStatus.COMPLETE:
            raise TransactionStateError(f"transaction {self.number} already completed")
        self.status = TransactionStatus.FAILED
