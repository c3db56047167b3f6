"""A queue as the processor's derived topic: it makes the queue's partitions and sums
their figures."""

from __future__ import annotations

from processor.engine.partition import PartitionState
from processor.queues.definition import QueueDefinition
from processor.queues.figures import QueueFigures
from processor.queues.partition import QueuePartition


class QueueTopic:
    """Makes the partitions of one queue, and sums their figures (monitoring)."""

    def __init__(self, definition: QueueDefinition) -> None:
        self.definition = definition
        #: The partitions opened, by number (the latest of each; a revoked one stays
        #: until its number is opened again).
        self._partitions: dict[int, QueuePartition] = {}

    def open(self, state: PartitionState) -> QueuePartition:
        partition = QueuePartition(self.definition, state)
        self._partitions[state.partition] = partition
        return partition

    def figures(self) -> QueueFigures:
        """The queue's figures in this processor: every partition's, summed. Read from
        another thread, they may be a transaction apart."""
        total = QueueFigures()
        for partition in list(self._partitions.values()):
            total.add(partition.figures())
        return total
