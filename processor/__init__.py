"""kafka-sow: a State of the World database on Kafka.

Publishers write commands to Kafka; the processor keeps the latest message per SowKey in
RocksDB with a compacted changelog and exactly-once commits; the query service serves SOW
queries over gRPC. See README.md and docs/.
"""

__version__ = "0.1.0"
