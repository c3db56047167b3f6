"""The SOW engine: applies log commands to state stores with exactly-once commits.

Imports no Kafka, RocksDB or gRPC module: it talks to :mod:`processor.log` and
:mod:`processor.state` interfaces.
"""
