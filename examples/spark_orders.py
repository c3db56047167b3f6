"""Example pipeline: the ORDERS state to Parquet, plus a per-region aggregate.

Reads the current SOW of ORDERS (``mode=latest``: one row per order, deletes applied)
straight from the changelog on Kafka, writes it as Parquet, and writes (and prints) the
order count, total quantity and notional per region.

Against ``sow serve`` (it prints its broker's address on start)::

    sow serve --topology topologies/orders.yaml          # in one terminal
    sow publish ORDERS '{"orderId": 1, "region": "EU", "qty": 10, "price": 2.5}'
    python examples/spark_orders.py --bootstrap 127.0.0.1:PORT --out /tmp/orders

Needs the ``spark`` extra (``pip install -e '.[spark]'``) and Java 17. Runs Spark
``local[2]`` unless ``--master`` says otherwise (see docs/spark.md for spark-submit).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

#: The ORDERS message fields this pipeline reads (others are ignored).
ORDER_SCHEMA = "orderId bigint, region string, qty bigint, price double"


def run(spark: Any, bootstrap: str, out: Path, topic: str = "ORDERS", kafka_topic: str = "") -> Any:
    """Write ``out/state`` (Parquet, one row per order) and ``out/by_region`` (Parquet);
    return the per-region rows, sorted by region."""
    from pyspark.sql import functions as f

    from processor.spark import register

    register(spark)
    read = (
        spark.read.format("sow")
        .option("bootstrap", bootstrap)
        .option("topic", topic)
        .option("mode", "latest")
        .option("message_schema", ORDER_SCHEMA)
    )
    if kafka_topic:
        read = read.option("kafka_topic", kafka_topic)
    state = read.load().select(
        "sow_key", "orderId", "region", "qty", "price", "apply_time", "partition", "offset"
    )
    state.write.mode("overwrite").parquet(str(out / "state"))
    by_region = (
        spark.read.parquet(str(out / "state"))
        .groupBy("region")
        .agg(
            f.count("*").alias("orders"),
            f.sum("qty").alias("qty"),
            f.round(f.sum(f.col("qty") * f.col("price")), 2).alias("notional"),
        )
        .orderBy("region")
    )
    by_region.write.mode("overwrite").parquet(str(out / "by_region"))
    return by_region.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--topic", default="ORDERS")
    parser.add_argument("--kafka-topic", default="", help="when not the topic name")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("sow-orders")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = run(spark, args.bootstrap, args.out, args.topic, args.kafka_topic)
    finally:
        spark.stop()
    print(f"{'region':<12}{'orders':>10}{'qty':>12}{'notional':>16}")
    for row in rows:
        print(f"{row.region or '-':<12}{row.orders:>10}{row.qty or 0:>12}{row.notional or 0:>16}")
    print(f"state: {args.out / 'state'}  by region: {args.out / 'by_region'}")


if __name__ == "__main__":
    main()
