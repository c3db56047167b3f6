"""confluent-kafka adapters: the only module that talks to Kafka.

Client settings tolerate the Tansu broker's quirks (ARCHITECTURE.md), which are also legal
behaviours of real clusters: short session timeouts so group joins take seconds, and
"caught up" decided from fetched positions (partition EOF) rather than ListOffsets, which
may under-report the end of a partition. The processor's group members speak the classic
consumer protocol or KIP-848's (``group_protocol``, see :func:`consumer_settings`); every
other consumer is group-less."""
