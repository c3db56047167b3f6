"""A Route: where the records of one input log partition go in the processor, and what
applying them needs (:mod:`processor.engine.apply`)."""

from __future__ import annotations

from processor.engine.derived import DerivedPartition
from processor.engine.families import PatternRecords
from processor.engine.partition import PartitionState
from processor.keys import partition_for


class Route:
    """Where records of one (log topic, partition) go, with what applying them needs."""

    __slots__ = (
        "decode",
        "decode_for_key",
        "derived",
        "family",
        "from_input",
        "key_function",
        "partitions",
        "placed",
        "plain",
        "shaping",
        "state",
        "writer",
    )

    #: How many SowKeys a route remembers as verified to belong to its partition.
    PLACED_SIZE = 1 << 16

    def __init__(
        self,
        state: PartitionState,
        log_topic: str,
        from_input: bool,
        derived: DerivedPartition | None = None,
    ) -> None:
        self.state = state
        self.from_input = from_input
        self.partitions = state.topic.partitions
        self.writer = state.writers[log_topic]
        self.decode = state.codec.decode
        topic = state.topic
        generated = topic.keys if topic.key_generator is None and not topic.preprocessing else ()
        #: The decode of the fast path, which needs only the Key fields.
        self.decode_for_key = state.codec.key_decoder(generated) if generated else self.decode
        self.shaping = state.shaping
        #: A Pattern topic's records name their own topics (engine/families.py).
        self.family = PatternRecords(state.topic, state.partition) if state.topic.pattern else None
        #: None sends every publish down the slow path (user keys; reshaped messages;
        #: a Pattern topic's records).
        self.key_function = (
            state.key_function if state.shaping is None and self.family is None else None
        )
        #: No topic expiration: a publish without headers needs no header parsing.
        self.plain = state.topic.expiration_s is None
        #: SowKeys seen on this partition whose CRC placement was already checked.
        self.placed: set[bytes] = set()
        #: A derived topic's (a view's) partition: it applies the records, in runs.
        self.derived = derived

    def misplaced(self, key: bytes | None, sow_key: bytes, partition: int) -> bool:
        """True when a record must be re-keyed: its Kafka key is not its SowKey, or the
        SowKey belongs to another partition."""
        if key != sow_key:
            return True
        placed = self.placed
        if sow_key in placed or self.partitions == 1:
            return False
        if partition_for(sow_key, self.partitions) != partition:
            return True
        if len(placed) >= self.PLACED_SIZE:
            placed.clear()
        placed.add(sow_key)
        return False
