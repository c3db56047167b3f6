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
        #: The partitions opened, by number (the latest of each).
        self._partitions: dict[int, QueuePartition] = {}
        #: The counts of partitions opened before the latest of their number.
        self._earlier = QueueFigures()

    def open(self, state: PartitionState) -> QueuePartition:
        earlier = self._partitions.get(state.partition)
        if earlier is not None:
            self._earlier.add(earlier.figures().counters())
        partition = QueuePartition(self.definition, state)
        self._partitions[state.partition] = partition
        return partition

    def figures(self) -> QueueFigures:
        """The queue's figures in this processor: what its open partitions hold now, and
        every partition's counts since start (counters never go down). Read from another
        thread, they may be a transaction apart."""
        total = self._earlier.counters()
        for partition in list(self._partitions.values()):
            figures = partition.figures()
            total.add(figures.counters() if partition.closed else figures)
        return total
