"""The feed of a queue over SOW topics: each publish of an underlying SOW topic becomes
a record of the queue's input, in the transaction that applies the publish."""

from __future__ import annotations

from collections.abc import Sequence

from processor.changelog.events import ChangeEvent, ChangeReason, Listener
from processor.engine.transaction import PartitionBatch
from processor.queues.definition import QueueDefinition, bookmark_of


class QueueFeed:
    """Sends each publish of a SOW underlying topic to the queue (see the module doc)."""

    needs_old = False

    def __init__(self, definition: QueueDefinition) -> None:
        self.definition = definition

    def listen(self, batch: PartitionBatch) -> Listener:
        target = self.definition.topic.kafka_topic
        partitions = self.definition.topic.partitions

        def changed(events: Sequence[ChangeEvent]) -> None:
            for event in events:
                if event.reason is not ChangeReason.PUBLISH or event.new is None:
                    continue
                log_topic, partition, offset = event.position
                key = bookmark_of(log_topic, partition, offset)
                batch.produce(target, event.new, key, partition % partitions)

        return changed
