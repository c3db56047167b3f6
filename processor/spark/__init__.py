"""PySpark reader of kafka-sow's logs: ``spark.read.format("sow")`` (see docs/spark.md).

Reads a SOW topic's changelog (every change, the latest state, or the state as of a time
or position vector) and its input topic (the transaction log), batch and streaming,
straight from Kafka with confluent-kafka, yielding Arrow record batches. Imports PySpark
and pyarrow: install the ``spark`` extra. Nothing else in the package imports this one.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``sow`` data source with a SparkSession."""
    from processor.spark.source import SowDataSource

    spark.dataSource.register(SowDataSource)


__all__ = ["register"]
