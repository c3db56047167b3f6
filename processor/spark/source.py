"""The ``sow`` PySpark data source: batch and streaming reads of changelogs and input topics.

Spark calls these classes in its Python workers: ``SowDataSource.schema`` and the
``partitions`` / offset methods on the driver side of a query, ``read`` in one task per
:class:`~processor.spark.scan.Split`. Everything they hold is picklable (options, the
planned schema, splits); Kafka clients are made inside each call and closed before it
returns.

Streaming: offsets are ``{"<partition>": next_offset}`` per Kafka partition. A
micro-batch reads exactly the records between two offsets Spark checkpointed, so a
query stopped and restarted from its checkpoint reads every record exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from processor.changelog import CONTROL_PREFIX, decode
from processor.errors import ConfigurationError, SowError
from processor.log.kafka.ranges import KafkaRangeReader
from processor.messages import codec_for
from processor.spark import pushdown
from processor.spark.columns import avro_struct, infer_struct, schema_ddl
from processor.spark.options import INFER_SAMPLE, ReadOptions, parse_options
from processor.spark.scan import Split, end_offsets, plan, read_split
from processor.topology.message_types import traits as message_traits


class SplitPartition(InputPartition):
    """One split as a Spark input partition."""

    def __init__(self, split: Split) -> None:
        super().__init__(split)
        self.split = split


class SowDataSource(DataSource):
    """``spark.read.format("sow")`` and ``spark.readStream.format("sow")``; options in
    :mod:`processor.spark.options` and docs/spark.md."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.read_options = parse_options(dict(options))

    @classmethod
    def name(cls) -> str:
        return "sow"

    def schema(self) -> str:
        """Record columns, then the message columns: given, from the Avro schema, or
        inferred from a sample of json messages (infer_schema=true)."""
        options = self.read_options
        message = None
        if not options.message_schema:
            if options.topic.message_type == "avro" and options.topic.schema:
                message = avro_struct(options.topic.schema)
            elif options.infer_schema and _inferable(options.topic.message_type):
                message = infer_struct(sample_messages(options, INFER_SAMPLE))
        return schema_ddl(options, message)

    def reader(self, schema: StructType) -> DataSourceReader:
        if self.read_options.pushdown:
            return SowPushdownReader(self.read_options, schema)
        return SowReader(self.read_options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.read_options.latest:
            raise ConfigurationError(
                "a streaming read follows every change; mode=latest and as_of are for "
                "batch reads (spark.read), not spark.readStream"
            )
        return SowStreamReader(self.read_options, schema)


def _inferable(message_type: str) -> bool:
    """Whether a schema can be inferred from decoded messages: fields, as JSON."""
    traits = message_traits(message_type)
    return traits.parsed and traits.json_text


def sample_messages(options: ReadOptions, count: int) -> list[Any]:
    """Up to ``count`` decoded messages from the start of the topic's partitions."""
    codec = codec_for(options.topic)
    reader = KafkaRangeReader(options.bootstrap, **options.kafka)
    found: list[Any] = []
    try:
        for p, end in end_offsets(options).items():
            for records in reader.read_range(options.kafka_topic, p, 0, end):
                for record in records:
                    value = record.value()
                    if value is None or (record.key() or b"").startswith(CONTROL_PREFIX):
                        continue
                    try:
                        data = decode(value).data if options.read == "changelog" else value
                        found.append(codec.decode(data))
                    except (SowError, ValueError):
                        continue
                if len(found) >= count:
                    return found[:count]
    finally:
        reader.close()
    return found


class SowReader(DataSourceReader):
    """A batch read: one task per split."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.only_partitions: list[int] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        return [SplitPartition(s) for s in plan(self.options, partitions=self.only_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split = cast(SplitPartition, partition).split
        yield from read_split(self.options, self.schema, split)


class SowPushdownReader(SowReader):
    """A batch read that takes Spark's filters (option ``pushdown=true``; Spark refuses
    a reader with ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Partition filters prune splits (exact, taken over); comparisons of message
        columns become part of the AMPS filter evaluated in the reader, and are left to
        Spark as well."""
        pushed = pushdown.push(self.options, self.schema, filters)
        self.options = pushed.options
        self.only_partitions = pushed.partitions
        yield from pushed.remaining


def _offsets(raw: dict[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in raw.items()}


class SowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read: each micro-batch reads the records between two offset maps.

    ``max_records_per_trigger`` caps each micro-batch at that many offsets per Kafka
    partition (Spark's ReadMaxRows limit, applied per partition). With
    ``trigger(availableNow=True)`` the query reads to the ends seen when it started, in
    as many micro-batches as the cap needs, then stops.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.target: dict[int, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        if self.options.starting_offsets == "latest":
            return {str(p): o for p, o in end_offsets(self.options).items()}
        return {str(p): 0 for p in end_offsets(self.options)}

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.options.max_records_per_trigger
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = end_offsets(self.options)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """The partitions' ends (or the availableNow target), at most the read limit's
        rows past ``start`` per partition."""
        ends = self.target if self.target is not None else end_offsets(self.options)
        if isinstance(limit, ReadMaxRows) and start is not None:
            begun = _offsets(start)
            ends = {p: min(e, begun.get(p, 0) + limit.max_rows) for p, e in ends.items()}
        return {str(p): o for p, o in ends.items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        splits = plan(self.options, starts=_offsets(start), ends=_offsets(end))
        return [SplitPartition(s) for s in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split = cast(SplitPartition, partition).split
        yield from read_split(self.options, self.schema, split)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the read holds no position of its own."""
